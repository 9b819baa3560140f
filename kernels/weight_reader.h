// What a model's parameter code needs to know of the layers that compute
// with its weights: where they compute, which memory they read in place,
// and how a 16-bit weight is widened there (WeightReader), and a weight
// matrix as the products read it (MatrixWeight). LayerBackend
// (kernels/layer_backend.h) is a WeightReader; ParameterScopes reads
// weights through one.
#ifndef CHUNKZERO_KERNELS_WEIGHT_READER_H_
#define CHUNKZERO_KERNELS_WEIGHT_READER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "tensor/device.h"
#include "tensor/dtype.h"

namespace chunkzero {

// A weight matrix as a product reads it: its f32 values, and its bf16 bit
// patterns when its parameter is stored in bf16 (else null). bf16 products
// read the bits when present (f32 may then be null); f32 products read the
// values.
struct MatrixWeight {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
};

// Where a model's layers compute, as far as reading weights goes.
class WeightReader {
 public:
  virtual ~WeightReader() = default;
  // The device the layers compute on (where the widened weights and grads
  // are made).
  virtual Device device() const = 0;
  // Whether the layers read a tensor on `device` in place.
  virtual bool Reads(Device device) const = 0;
  // out[n] = the f32 value of x[n], of `dtype` (f16 or bf16).
  virtual absl::Status Widen(float* out, const void* x, DType dtype,
                             size_t n) = 0;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_WEIGHT_READER_H_
