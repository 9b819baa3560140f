// Scalar conversions between f32 and the 16-bit float formats.
//
//   uint16_t h = FloatToHalfBits(1.0f);     // 0x3C00
//   float f = HalfBitsToFloat(h);           // 1.0f
//   uint16_t b = FloatToBFloat16Bits(x);    // round to nearest even
//
// These are the reference semantics that every vectorised cast kernel in
// tensor/cpu (and the GPU casts of tensor/cuda) must match bit for bit:
//  - f32 -> f16 / bf16 rounds to nearest, ties to even; overflow gives
//    infinity; f16 subnormals are produced exactly (no flush to zero).
//  - NaN stays NaN with its sign, is made quiet, and keeps the top payload
//    bits that fit (what x86 F16C's VCVTPS2PH does).
//  - f16 -> f32 is exact (subnormals included); a NaN is made quiet (as
//    VCVTPH2PS does) and keeps its payload. bf16 -> f32 is a plain shift.
// Header-only with no dependencies, so the comm and kernel code can use them
// in inner loops, and CZ_HOST_DEVICE: the CUDA kernels run these very
// functions, so the GPU's casts are the CPU's bit for bit.
#ifndef CHUNKZERO_TENSOR_HALF_H_
#define CHUNKZERO_TENSOR_HALF_H_

#include <cstdint>
#include <cstring>

#include "base/host_device.h"

namespace chunkzero {

CZ_HOST_DEVICE inline uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

CZ_HOST_DEVICE inline float BitsToFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

CZ_HOST_DEVICE inline uint16_t FloatToHalfBits(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: quiet it, keep the top 9 payload bits.
    return sign | 0x7e00u | static_cast<uint16_t>((abs >> 13) & 0x3ffu);
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 (and inf): inf.
  const uint32_t exponent = abs >> 23;
  if (exponent < 113) {               // Below 2^-14: an f16 subnormal or zero.
    if (exponent < 102) return sign;  // Below 2^-25: rounds to zero.
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24
    uint32_t result = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (result & 1u))) ++result;
    return sign | static_cast<uint16_t>(result);
  }
  // Normal: rebias the exponent, round the mantissa from 23 to 10 bits. A
  // carry out of the mantissa correctly bumps the exponent (up to inf).
  uint32_t result = ((exponent - 112) << 10) | ((abs >> 13) & 0x3ffu);
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (result & 1u))) ++result;
  return sign | static_cast<uint16_t>(result);
}

CZ_HOST_DEVICE inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in f32.
    const float magnitude =
        static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return BitsToFloat(sign | FloatBits(magnitude));
  }
  if (exponent == 31) {
    if (mantissa == 0) return BitsToFloat(sign | 0x7f800000u);
    return BitsToFloat(sign | 0x7fc00000u | (mantissa << 13));
  }
  return BitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

CZ_HOST_DEVICE inline uint16_t FloatToBFloat16Bits(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // NaN: quiet it, keep the sign.
    return static_cast<uint16_t>((x >> 16) | 0x0040u);
  }
  // Round to nearest even on the low 16 bits; overflow carries into inf.
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

CZ_HOST_DEVICE inline float BFloat16BitsToFloat(uint16_t b) {
  return BitsToFloat(static_cast<uint32_t>(b) << 16);
}

}  // namespace chunkzero

#endif  // CHUNKZERO_TENSOR_HALF_H_
