// Conversions between f32, f16 and bf16 arrays.
//
//   std::vector<float> master(n);
//   std::vector<uint16_t> half(n);
//   CastF32ToF16(half.data(), master.data(), n);      // half = f16(master)
//   CZ_RETURN_IF_ERROR(Cast(dst, DType::kBF16, src, DType::kF32, n));
//
// Results are exactly those of the scalar conversions in tensor/half.h for
// every input (round to nearest even, f16 subnormals kept, overflow to Inf,
// NaN kept as a quiet NaN with its sign and top payload bits), whichever
// implementation runs: AVX-512, AVX2+F16C or plain C++ (see
// tensor/cpu/cpu_features.h). f16 and bf16 values are passed as their 16-bit
// patterns. Arrays of 128K elements or more are split over threads
// (base/parallel_for.h); outputs of 8 MiB or more are written with
// non-temporal stores, so they are not left in the cache.
//
// Thread-safety: any number of threads may run kernels at once. REQUIRES
// (all functions): `out` and `in` hold n elements each and do not overlap.
// The results assume the default floating-point environment (MXCSR with
// round-to-nearest and no DAZ/FTZ).
#ifndef CHUNKZERO_TENSOR_CPU_CAST_KERNELS_H_
#define CHUNKZERO_TENSOR_CPU_CAST_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "tensor/dtype.h"

namespace chunkzero {

// out[n] = f16(in[n])
void CastF32ToF16(uint16_t* out, const float* in, size_t n);
// out[n] = f32(in[n]), exact.
void CastF16ToF32(float* out, const uint16_t* in, size_t n);
// out[n] = bf16(in[n])
void CastF32ToBF16(uint16_t* out, const float* in, size_t n);
// out[n] = f32(in[n]), exact.
void CastBF16ToF32(float* out, const uint16_t* in, size_t n);
// out[n] = bf16(f32(in[n])): one rounding, as f16 -> f32 is exact.
void CastF16ToBF16(uint16_t* out, const uint16_t* in, size_t n);
// out[n] = f16(f32(in[n])): one rounding, as bf16 -> f32 is exact.
void CastBF16ToF16(uint16_t* out, const uint16_t* in, size_t n);

// out[n] (of out_dtype) = in[n] (of in_dtype) converted as above; a plain
// (multithreaded) copy when the dtypes are equal. Returns InvalidArgument for
// a null pointer with n > 0 or a DType value outside the enum.
[[nodiscard]] absl::Status Cast(void* out, DType out_dtype, const void* in,
                                DType in_dtype, size_t n);

// out[n] (of out_dtype: f32, f16 or bf16) = in[n] * scale, multiplied in f32
// and then rounded once: the same bits as ScaleF32 on a copy of `in`
// followed by Cast, without the copy. Returns InvalidArgument as Cast does,
// and for an out_dtype that is not a compute type.
[[nodiscard]] absl::Status CastScaled(void* out, DType out_dtype,
                                      const float* in, float scale, size_t n);

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_CPU_CAST_KERNELS_H_
