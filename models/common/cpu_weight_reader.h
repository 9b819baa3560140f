// CpuWeightReader: the WeightReader of layers that compute on the CPU:
// they read any host-accessible memory in place and widen 16-bit weights
// with tensor/cpu's casts.
#ifndef CHUNKZERO_MODELS_COMMON_CPU_WEIGHT_READER_H_
#define CHUNKZERO_MODELS_COMMON_CPU_WEIGHT_READER_H_

#include <cstddef>

#include "models/common/parameter_scopes.h"
#include "tensor/cpu/cast_kernels.h"

namespace chunkzero {

class CpuWeightReader final : public WeightReader {
 public:
  Device device() const override { return Device::Cpu(); }
  bool Reads(Device device) const override {
    return device.is_host_accessible();
  }
  absl::Status Widen(float* out, const void* x, DType dtype,
                     size_t n) override {
    return Cast(out, DType::kF32, x, dtype, n);
  }
};

}  // namespace chunkzero

#endif  // CHUNKZERO_MODELS_COMMON_CPU_WEIGHT_READER_H_
