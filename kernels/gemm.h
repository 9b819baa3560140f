// Gemm: the model's matrix products, through oneDNN.
//
//   Gemm(Transpose::kNo, Transpose::kYes, m, n, k, 1.0f, a, lda, b, ldb,
//        0.0f, c, ldc);  // c[m, n] = a[m, k] b[n, k]^T
//
// One code path for every matrix product of the model: oneDNN's matmul
// primitive (Debian's libdnnl), which picks its kernels from the
// instruction sets the processor reports (cpuid), not from a table of known
// processor models, so a new processor gets the widest kernels it supports;
// docs/PERFORMANCE.md has the measurements behind the choice.
// GemmKernelName() says what runs, and the train job's summary prints it.
//
// Threads: a product is cut into fixed tiles of C whose shape depends only
// on m and n. The tiles run on ParallelFor (base/parallel_for.h), each on
// one thread with oneDNN's own OpenMP threading off, so there is one thread
// pool in the process and results do not depend on the number of threads
// (or on which thread ran a tile). GemmOnThisThread runs a product on the
// calling thread alone, for callers that parallelise over many small
// products themselves (attention heads).
//
// Errors: the shapes are the caller's contract (REQUIRES below); leading
// dimensions shorter than a row are refused before anything is read.
// oneDNN running out of memory throws std::bad_alloc; any other failure
// throws std::runtime_error naming the call ("f32 matmul(N, T, m=...")
// failed: ..."). Nothing is thrown out of a
// ParallelFor piece: a tile's failure is rethrown on the calling thread
// after every tile has finished.
//
// Thread-safety: any number of threads may call these at once (on distinct
// outputs).
#ifndef CHUNKZERO_KERNELS_GEMM_H_
#define CHUNKZERO_KERNELS_GEMM_H_

#include <cstdint>
#include <optional>
#include <string>

#include "kernels/gemm_types.h"

namespace chunkzero {
namespace gemm {

// Transpose and Precision are in kernels/gemm_types.h.
// Bf16RouteHere() says how kBf16 products run here.

// How kBf16 products run. Both compute the same exact products of bf16
// values (a product of two bf16 values is exact in f32) and add them in f32;
// they differ in the order of the additions, so in the last bits.
enum class Bf16Route {
  // oneDNN's matmul on bf16 operands: AVX512-BF16 dot products or AMX
  // tiles, twice the f32 FMA rate or more where they are fast.
  kBf16Matmul,
  // The f32 matmul on bf16-rounded f32 copies of A and B: for processors whose
  // bf16 dot products are slower than their f32 FMAs.
  kF32OnRoundedInputs,
};

// The route for a processor: the bf16 matmul where oneDNN runs it with
// brgemm kernels (`bf16_implementation`, e.g. "brg:avx512_core_bf16") and
// those are known to outrun f32 FMAs: AMX ("avx512_core_amx"), or AMD's
// AVX512-BF16 (Zen 4 and later; measured on Zen 5 at 1.8x the FMA peak).
// Intel's AVX512-BF16 without AMX ran its dot products at half the FMA rate
// on the Xeon measured, so f32 on rounded inputs is faster there.
// docs/PERFORMANCE.md has the numbers.
Bf16Route ChooseBf16Route(const std::string& isa, bool amd,
                          const std::string& bf16_implementation);

// ChooseBf16Route for this processor, decided once per process (so that a
// run's bits never depend on timing), or the route set for testing.
Bf16Route Bf16RouteHere();

// Forces Bf16RouteHere() (nullopt: back to the processor's route). Tests
// only; not to be called while products run.
void SetBf16RouteForTesting(std::optional<Bf16Route> route);

// A matrix operand: f32 values, or bf16 bit patterns (Operand::Bf16) that
// kBf16 products use as they are, where f32 values would be rounded first
// (f32 products widen them, exactly). Either is stored row-major with
// leading dimension ld, as Gemm's float operands are. Bits serve a caller
// that multiplies one operand more than once (PackBf16 rounds it once) or
// holds it in bf16 already.
class Operand {
 public:
  Operand(const float* values, int ld) : f32_(values), ld_(ld) {}
  static Operand Bf16(const uint16_t* bits, int ld) {
    return Operand(bits, ld);
  }

  const float* f32() const { return f32_; }
  const uint16_t* bf16() const { return bf16_; }
  int ld() const { return ld_; }

 private:
  Operand(const uint16_t* bits, int ld) : bf16_(bits), ld_(ld) {}

  const float* f32_ = nullptr;
  const uint16_t* bf16_ = nullptr;
  int ld_;
};

// out (rows x cols, dense: leading dimension cols) = x (leading dimension
// ld) rounded to bf16 as kBf16 products round their inputs, on ParallelFor.
// REQUIRES: ld >= cols; out holds rows * cols values.
void PackBf16(const float* x, int rows, int cols, int ld, uint16_t* out);

// Row-major C[m, n] = alpha * op(A) op(B) + beta * C, where op(A) is m x k
// (A is stored k x m when transposed) and op(B) is k x n. With beta == 0, C
// is only written (NaN or garbage in it does not propagate). k == 0 scales C
// by beta.
// REQUIRES: m, n, k >= 0; each leading dimension >= the stored row length
// (and >= 1); the pointers cover the stored matrices; C does not overlap A
// or B.
void Gemm(Transpose trans_a, Transpose trans_b, int m, int n, int k,
          float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc, Precision precision = Precision::kF32);

// Gemm on Operands (either may hold bf16 bits). The float overload above is
// this one with f32 operands; results are bit-identical to it when the bits
// are PackBf16 of its f32 values.
void Gemm(Transpose trans_a, Transpose trans_b, int m, int n, int k,
          float alpha, const Operand& a, const Operand& b, float beta, float* c,
          int ldc, Precision precision);

// Gemm on the calling thread only. Results are bit-identical to Gemm's.
void GemmOnThisThread(Transpose trans_a, Transpose trans_b, int m, int n, int k,
                      float alpha, const float* a, int lda, const float* b,
                      int ldb, float beta, float* c, int ldc,
                      Precision precision = Precision::kF32);

// The instruction set oneDNN's kernels use on this processor, as oneDNN
// names it: "avx512_core_amx", "avx512_core_bf16", "avx512_core", "avx2",
// ... ("sse41" or "default" means no AVX kernel at all).
std::string GemmIsa();

// What runs the products of `precision`, for the job's summary: e.g.
// "onednn 2.6.3 matmul brg:avx512_core" (f32), "onednn 2.6.3 matmul
// brg:avx512_core_bf16" (bf16), or for bf16 on the f32 route "onednn 2.6.3
// matmul brg:avx512_core (f32 FMAs)".
std::string GemmKernelName(Precision precision = Precision::kF32);

}  // namespace gemm
}  // namespace chunkzero

#endif  // CHUNKZERO_KERNELS_GEMM_H_
