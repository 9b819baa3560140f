// DeviceArray<T>: an array of T in memory of one device, from the
// registry's allocator, for a model's activation and scratch buffers. The
// model reports these bytes itself (ParameterScopes::HoldBuffers), so the
// storage reports nowhere. Host memory starts zeroed.
//
//   DeviceArray<float> probs;
//   CZ_RETURN_IF_ERROR(probs.Allocate(rows * vocab, Device::Cpu()));
//   float* p = probs.data();
#ifndef CHUNKZERO_MODELS_COMMON_DEVICE_ARRAY_H_
#define CHUNKZERO_MODELS_COMMON_DEVICE_ARRAY_H_

#include <cstddef>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensor/device.h"
#include "tensor/storage.h"

namespace chunkzero {

template <typename T>
class DeviceArray {
 public:
  T* data() const {
    return storage_ == nullptr ? nullptr : static_cast<T*>(storage_->data());
  }
  size_t size() const { return size_; }
  static constexpr size_t kElementBytes = sizeof(T);

  // n elements on `device` in place of what was held; the storage's error
  // (nothing held then) when the device cannot hold them.
  absl::Status Allocate(size_t n, Device device) {
    Reset();
    if (n == 0) return absl::OkStatus();
    absl::StatusOr<std::shared_ptr<Storage>> made =
        Storage::Create(n * sizeof(T), device);
    if (!made.ok()) return made.status();
    storage_ = *std::move(made);
    if (device.is_host_accessible()) {
      std::memset(storage_->data(), 0, n * sizeof(T));
    }
    size_ = n;
    return absl::OkStatus();
  }
  void Reset() {
    storage_.reset();
    size_ = 0;
  }

 private:
  std::shared_ptr<Storage> storage_;
  size_t size_ = 0;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_MODELS_COMMON_DEVICE_ARRAY_H_
