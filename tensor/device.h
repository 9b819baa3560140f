// Where a tensor's bytes live.
//
//   Device cpu = Device::Cpu();
//   Device sim = Device::Simulated(0);     // host memory, a distinct device
//   absl::StatusOr<Device> d = ParseDevice("cuda:1");
//
// kSimulated is a second, host-backed device: its memory comes from its own
// allocator and is never the same buffer as CPU memory, so code that moves
// chunks between devices (offload) can be tested on machines without a GPU.
// A Device is a small value type: cheap to copy, hashable, comparable.
#ifndef CHUNKZERO_TENSOR_DEVICE_H_
#define CHUNKZERO_TENSOR_DEVICE_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace chunkzero {

enum class DeviceType : uint8_t {
  kCpu = 0,
  kCuda = 1,
  kSimulated = 2,
};

class Device {
 public:
  static constexpr Device Cpu() { return Device(DeviceType::kCpu, 0); }
  static constexpr Device Cuda(int index) {
    return Device(DeviceType::kCuda, index);
  }
  static constexpr Device Simulated(int index) {
    return Device(DeviceType::kSimulated, index);
  }

  constexpr DeviceType type() const { return type_; }
  // Always 0 for the CPU.
  constexpr int index() const { return index_; }

  // True for devices whose memory the host can read directly (CPU and the
  // simulated device): kernels run on them with plain pointers.
  constexpr bool is_host_accessible() const {
    return type_ != DeviceType::kCuda;
  }

  // "cpu", "cuda:N" or "sim:N".
  std::string ToString() const;

  friend constexpr bool operator==(Device a, Device b) {
    return a.type_ == b.type_ && a.index_ == b.index_;
  }
  friend constexpr bool operator!=(Device a, Device b) { return !(a == b); }
  friend constexpr bool operator<(Device a, Device b) {
    return a.type_ != b.type_ ? a.type_ < b.type_ : a.index_ < b.index_;
  }
  template <typename H>
  friend H AbslHashValue(H h, Device d) {
    return H::combine(std::move(h), d.type_, d.index_);
  }

 private:
  constexpr Device(DeviceType type, int index) : type_(type), index_(index) {}

  DeviceType type_;
  int index_;
};

// Parses "cpu", "cuda:N" or "sim:N" (N >= 0). InvalidArgument otherwise.
[[nodiscard]] absl::StatusOr<Device> ParseDevice(absl::string_view text);

std::ostream& operator<<(std::ostream& os, Device device);

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_DEVICE_H_
