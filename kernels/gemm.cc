#include "kernels/gemm.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <stdexcept>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "base/parallel_for.h"
#include "kernels/onednn_matmul.h"
#include "oneapi/dnnl/dnnl.h"
#include "tensor/cpu/cast_kernels.h"

namespace chunkzero {
namespace gemm {
namespace {

// The tile of C one thread computes. Fixed, so that a product is always cut
// the same way: a tile's result depends only on its own inputs, never on
// the thread count. 256 x 1024 keeps oneDNN's packing of a tile's panels of
// A and B small against the tile's arithmetic (1/256 and 1/1024 of it) and
// still gives 8 or more tiles to the model's larger products.
constexpr int kTileRows = 256;
constexpr int kTileCols = 1024;

char TransChar(Transpose t) { return t == Transpose::kYes ? 'T' : 'N'; }

std::string StatusName(dnnl_status_t status) {
  switch (status) {
    case dnnl_out_of_memory:
      return "out of memory";
    case dnnl_invalid_arguments:
      return "invalid arguments";
    case dnnl_unimplemented:
      return "unimplemented";
    case dnnl_runtime_error:
      return "runtime error";
    default:
      return absl::StrCat("status ", static_cast<int>(status));
  }
}

// `call` names what failed: "f32 matmul" or "bf16 matmul".
[[noreturn]] void ThrowFailure(const char* call, dnnl_status_t status,
                               Transpose trans_a, Transpose trans_b, int m,
                               int n, int k, int lda, int ldb, int ldc) {
  if (status == dnnl_out_of_memory) throw std::bad_alloc();
  throw std::runtime_error(
      absl::StrCat(call, "(", std::string(1, TransChar(trans_a)), ", ",
                   std::string(1, TransChar(trans_b)), ", m=", m, ", n=", n,
                   ", k=", k, ", lda=", lda, ", ldb=", ldb, ", ldc=", ldc,
                   ") failed: ", StatusName(status)));
}

// k == 0: C = beta C (BLAS leaves the product out).
void ScaleC(int m, int n, float beta, float* c, int ldc) {
  for (int i = 0; i < m; ++i) {
    float* row = c + static_cast<size_t>(i) * ldc;
    if (beta == 0.0f) {
      std::fill(row, row + n, 0.0f);
    } else {
      for (int j = 0; j < n; ++j) row[j] *= beta;
    }
  }
}

// Element (row, col) of the stored matrix X (row-major, leading dimension
// ld), for op(X) = X or X^T.
template <typename T>
const T* At(const T* x, int ld, Transpose t, int row, int col) {
  return t == Transpose::kNo ? x + static_cast<size_t>(row) * ld + col
                             : x + static_cast<size_t>(col) * ld + row;
}

// An operand as a tile reads it: bf16 bits for the bf16 matmul, else f32
// values, stored row-major with leading dimension ld.
struct ReadyOperand {
  const float* f32 = nullptr;
  const uint16_t* bits = nullptr;
  int ld = 0;
};

// One product, cut into kTileRows x kTileCols tiles of C, numbered row by
// row. It runs as a bf16 matmul when its operands are bits, else as f32.
struct TiledProduct {
  Transpose trans_a, trans_b;
  int m, n, k;
  float alpha;
  ReadyOperand a, b;
  float beta;
  float* c;
  int ldc;
  // The caller's leading dimensions, for messages.
  int lda, ldb;

  bool bf16() const { return a.bits != nullptr; }
  int tile_cols() const { return (n + kTileCols - 1) / kTileCols; }
  size_t tiles() const {
    return static_cast<size_t>((m + kTileRows - 1) / kTileRows) * tile_cols();
  }

  // Computes tile `t` on this thread.
  dnnl_status_t Tile(size_t t) const {
    const int row = static_cast<int>(t / tile_cols()) * kTileRows;
    const int col = static_cast<int>(t % tile_cols()) * kTileCols;
    const int rows = std::min(kTileRows, m - row);
    const int cols = std::min(kTileCols, n - col);
    float* c_tile = c + static_cast<size_t>(row) * ldc + col;
    const bool ta = trans_a == Transpose::kYes, tb = trans_b == Transpose::kYes;
    if (bf16()) {
      return internal::MatmulHere(internal::Operands::kBf16, ta, tb, rows, cols,
                                  k, alpha, At(a.bits, a.ld, trans_a, row, 0),
                                  a.ld, At(b.bits, b.ld, trans_b, 0, col), b.ld,
                                  beta, c_tile, ldc);
    }
    return internal::MatmulHere(internal::Operands::kF32, ta, tb, rows, cols, k,
                                alpha, At(a.f32, a.ld, trans_a, row, 0), a.ld,
                                At(b.f32, b.ld, trans_b, 0, col), b.ld, beta,
                                c_tile, ldc);
  }

  [[noreturn]] void Throw(dnnl_status_t status) const {
    ThrowFailure(bf16() ? "bf16 matmul" : "f32 matmul", status, trans_a,
                 trans_b, m, n, k, lda, ldb, ldc);
  }
};

// Rows of a stored matrix through ParallelFor, or on the calling thread.
using RunRows = void (*)(size_t rows, absl::FunctionRef<void(size_t, size_t)>);
void RowsInParallel(size_t rows, absl::FunctionRef<void(size_t, size_t)> fn) {
  ParallelFor(rows, 16, fn);
}
void RowsHere(size_t rows, absl::FunctionRef<void(size_t, size_t)> fn) {
  fn(0, rows);
}

// The stored matrix x (rows x cols) as a tile reads it, copied into
// `scratch` where it must change: packed into bf16 bits for the bf16
// matmul, rounded to bf16 values (f32 route of a kBf16 product) or widened
// from bits to f32 (f32 products of bits) for the f32 one.
ReadyOperand Prepare(const Operand& x, int rows, int cols, bool bf16_matmul,
                     bool round, std::vector<float>* f32_scratch,
                     std::vector<uint16_t>* bits_scratch, RunRows run_rows) {
  const size_t n = static_cast<size_t>(rows) * cols;
  const int ld = x.ld();
  if (bf16_matmul) {
    if (x.bf16() != nullptr) return {nullptr, x.bf16(), ld};
    bits_scratch->resize(n);
    uint16_t* out = bits_scratch->data();
    run_rows(static_cast<size_t>(rows), [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        CastF32ToBF16(out + i * cols, x.f32() + i * ld, cols);
      }
    });
    return {nullptr, out, cols};
  }
  if (x.bf16() == nullptr && !round) return {x.f32(), nullptr, ld};
  f32_scratch->resize(n);
  float* out = f32_scratch->data();
  if (x.bf16() == nullptr) bits_scratch->resize(n);
  run_rows(static_cast<size_t>(rows), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const uint16_t* bits;
      if (x.bf16() != nullptr) {
        bits = x.bf16() + i * ld;
      } else {
        uint16_t* rounded = bits_scratch->data() + i * cols;
        CastF32ToBF16(rounded, x.f32() + i * ld, cols);
        bits = rounded;
      }
      CastBF16ToF32(out + i * cols, bits, cols);
    }
  });
  return {out, nullptr, cols};
}

// The product of the caller's operands, checked and made ready: the
// leading dimensions first (oneDNN takes any strides, overlapping rows
// included), then A and B as Prepare says.
TiledProduct Ready(Transpose trans_a, Transpose trans_b, int m, int n, int k,
                   float alpha, const Operand& a, const Operand& b, float beta,
                   float* c, int ldc, Precision precision, RunRows run_rows) {
  const bool bf16 = precision == Precision::kBf16;
  const bool bf16_matmul = bf16 && Bf16RouteHere() == Bf16Route::kBf16Matmul;
  const int a_rows = trans_a == Transpose::kNo ? m : k;
  const int a_cols = trans_a == Transpose::kNo ? k : m;
  const int b_rows = trans_b == Transpose::kNo ? k : n;
  const int b_cols = trans_b == Transpose::kNo ? n : k;
  if (a.ld() < std::max(1, a_cols) || b.ld() < std::max(1, b_cols) ||
      ldc < std::max(1, n)) {
    ThrowFailure(bf16_matmul ? "bf16 matmul" : "f32 matmul",
                 dnnl_invalid_arguments, trans_a, trans_b, m, n, k, a.ld(),
                 b.ld(), ldc);
  }
  thread_local std::vector<float> a_f32, b_f32;
  thread_local std::vector<uint16_t> a_bits, b_bits;
  TiledProduct p{trans_a, trans_b, m, n,   k,      alpha, {},
                 {},      beta,    c, ldc, a.ld(), b.ld()};
  p.a =
      Prepare(a, a_rows, a_cols, bf16_matmul, bf16, &a_f32, &a_bits, run_rows);
  p.b =
      Prepare(b, b_rows, b_cols, bf16_matmul, bf16, &b_f32, &b_bits, run_rows);
  return p;
}

std::atomic<int> g_route_for_testing{-1};

}  // namespace

Bf16Route ChooseBf16Route(const std::string& isa, bool amd,
                          const std::string& bf16_implementation) {
  // Only oneDNN's brgemm kernels are worth it; its reference or
  // gemm-emulated bf16 is slower than f32 FMAs.
  if (bf16_implementation.rfind("brg:", 0) != 0) {
    return Bf16Route::kF32OnRoundedInputs;
  }
  if (isa == "avx512_core_amx") return Bf16Route::kBf16Matmul;
  if (isa == "avx512_core_bf16" && amd) return Bf16Route::kBf16Matmul;
  return Bf16Route::kF32OnRoundedInputs;
}

Bf16Route Bf16RouteHere() {
  const int forced = g_route_for_testing.load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<Bf16Route>(forced);
  static const Bf16Route route = ChooseBf16Route(
      GemmIsa(), __builtin_cpu_is("amd"),
      internal::MatmulImplementation(internal::Operands::kBf16));
  return route;
}

void SetBf16RouteForTesting(std::optional<Bf16Route> route) {
  g_route_for_testing.store(route ? static_cast<int>(*route) : -1);
}

void PackBf16(const float* x, int rows, int cols, int ld, uint16_t* out) {
  ParallelFor(static_cast<size_t>(rows), 16, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      CastF32ToBF16(out + i * cols, x + i * ld, cols);
    }
  });
}

void GemmOnThisThread(Transpose trans_a, Transpose trans_b, int m, int n, int k,
                      float alpha, const float* a, int lda, const float* b,
                      int ldb, float beta, float* c, int ldc,
                      Precision precision) {
  if (m == 0 || n == 0) return;
  if (k == 0) return ScaleC(m, n, beta, c, ldc);
  // The same tiles as Gemm, so that both give the same bits.
  const TiledProduct product =
      Ready(trans_a, trans_b, m, n, k, alpha, Operand(a, lda), Operand(b, ldb),
            beta, c, ldc, precision, RowsHere);
  for (size_t t = 0; t < product.tiles(); ++t) {
    const dnnl_status_t status = product.Tile(t);
    if (status != dnnl_success) product.Throw(status);
  }
}

void Gemm(Transpose trans_a, Transpose trans_b, int m, int n, int k,
          float alpha, const Operand& a, const Operand& b, float beta, float* c,
          int ldc, Precision precision) {
  if (m == 0 || n == 0) return;
  if (k == 0) return ScaleC(m, n, beta, c, ldc);
  const TiledProduct product = Ready(trans_a, trans_b, m, n, k, alpha, a, b,
                                     beta, c, ldc, precision, RowsInParallel);
  // The first failure; the others are alike.
  std::atomic<dnnl_status_t> failure{dnnl_success};
  ParallelFor(product.tiles(), 1, [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) {
      const dnnl_status_t status = product.Tile(t);
      if (status != dnnl_success) {
        dnnl_status_t expected = dnnl_success;
        failure.compare_exchange_strong(expected, status);
      }
    }
  });
  if (failure.load() != dnnl_success) product.Throw(failure.load());
}

void Gemm(Transpose trans_a, Transpose trans_b, int m, int n, int k,
          float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc, Precision precision) {
  Gemm(trans_a, trans_b, m, n, k, alpha, Operand(a, lda), Operand(b, ldb), beta,
       c, ldc, precision);
}

std::string GemmIsa() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic:
      return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "default";
  }
}

std::string GemmKernelName(Precision precision) {
  const dnnl_version_t* version = dnnl_version();
  const std::string onednn = absl::StrCat("onednn ", version->major, ".",
                                          version->minor, ".", version->patch);
  if (precision == Precision::kBf16 &&
      Bf16RouteHere() == Bf16Route::kBf16Matmul) {
    return absl::StrCat(
        onednn, " matmul ",
        internal::MatmulImplementation(internal::Operands::kBf16));
  }
  return absl::StrCat(onednn, " matmul ",
                      internal::MatmulImplementation(internal::Operands::kF32),
                      precision == Precision::kBf16 ? " (f32 FMAs)" : "");
}

}  // namespace gemm
}  // namespace chunkzero
