#include "models/gpt2/gemm.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <new>
#include <stdexcept>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/parallel_for.h"
#include "oneapi/dnnl/dnnl.h"
#include "tensor/cast_kernels.h"

// libgomp's; declared here rather than through <omp.h>, which clang does not
// ship without libomp-dev.
extern "C" void omp_set_num_threads(int num_threads);

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

// One oneDNN call on this thread, with OpenMP kept to this thread (the
// count is per thread in OpenMP, so this touches no other caller).
dnnl_status_t SgemmHere(Transpose trans_a, Transpose trans_b, int m, int n,
                        int k, float alpha, const float* a, int lda,
                        const float* b, int ldb, float beta, float* c,
                        int ldc) {
  omp_set_num_threads(1);
  return dnnl_sgemm(TransChar(trans_a), TransChar(trans_b), m, n, k, alpha, a,
                    lda, b, ldb, beta, c, ldc);
}

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

[[noreturn]] void ThrowFailure(dnnl_status_t status, Transpose trans_a,
                               Transpose trans_b, int m, int n, int k, int lda,
                               int ldb, int ldc) {
  if (status == dnnl_out_of_memory) throw std::bad_alloc();
  throw std::runtime_error(
      absl::StrCat("dnnl_sgemm(", std::string(1, TransChar(trans_a)), ", ",
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
const float* At(const float* x, int ld, Transpose t, int row, int col) {
  return t == Transpose::kNo ? x + static_cast<size_t>(row) * ld + col
                             : x + static_cast<size_t>(col) * ld + row;
}

// One product, cut into kTileRows x kTileCols tiles of C, numbered row by
// row.
struct TiledProduct {
  Transpose trans_a, trans_b;
  int m, n, k;
  float alpha;
  const float* a;
  int lda;
  const float* b;
  int ldb;
  float beta;
  float* c;
  int ldc;

  int tile_cols() const { return (n + kTileCols - 1) / kTileCols; }
  size_t tiles() const {
    return static_cast<size_t>((m + kTileRows - 1) / kTileRows) * tile_cols();
  }

  // Computes tile `t` on this thread.
  dnnl_status_t Tile(size_t t) const {
    const int row = static_cast<int>(t / tile_cols()) * kTileRows;
    const int col = static_cast<int>(t % tile_cols()) * kTileCols;
    return SgemmHere(trans_a, trans_b, std::min(kTileRows, m - row),
                     std::min(kTileCols, n - col), k, alpha,
                     At(a, lda, trans_a, row, 0), lda,
                     At(b, ldb, trans_b, 0, col), ldb, beta,
                     c + static_cast<size_t>(row) * ldc + col, ldc);
  }

  [[noreturn]] void Throw(dnnl_status_t status) const {
    ThrowFailure(status, trans_a, trans_b, m, n, k, lda, ldb, ldc);
  }
};

// Writes the stored matrix x (rows x cols, leading dimension ld) rounded to
// bf16 values into `out`, densely (leading dimension cols), and returns it.
// `run_rows(rows, fn)` runs fn(begin, end) over [0, rows): ParallelFor or a
// plain call.
template <typename Rows>
const float* RoundRowsToBf16(const float* x, int rows, int cols, int ld,
                             std::vector<float>* out,
                             std::vector<uint16_t>* bits, Rows&& run_rows) {
  const size_t n = static_cast<size_t>(rows) * cols;
  out->resize(n);
  bits->resize(n);
  uint16_t* b = bits->data();
  float* o = out->data();
  run_rows(static_cast<size_t>(rows), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      CastF32ToBF16(b + i * cols, x + i * ld, cols);
      CastBF16ToF32(o + i * cols, b + i * cols, cols);
    }
  });
  return o;
}

// `p` with A and B replaced by bf16-rounded copies in this thread's scratch.
// The leading dimensions are checked first (oneDNN checks them for the f32
// path), since the copies read what they say.
template <typename Rows>
TiledProduct RoundToBf16(const TiledProduct& p, Rows&& run_rows) {
  thread_local std::vector<float> a_scratch, b_scratch;
  thread_local std::vector<uint16_t> a_bits, b_bits;
  const int a_rows = p.trans_a == Transpose::kNo ? p.m : p.k;
  const int a_cols = p.trans_a == Transpose::kNo ? p.k : p.m;
  const int b_rows = p.trans_b == Transpose::kNo ? p.k : p.n;
  const int b_cols = p.trans_b == Transpose::kNo ? p.n : p.k;
  if (p.lda < std::max(1, a_cols) || p.ldb < std::max(1, b_cols) ||
      p.ldc < std::max(1, p.n)) {
    p.Throw(dnnl_invalid_arguments);
  }
  TiledProduct rounded = p;
  rounded.a = RoundRowsToBf16(p.a, a_rows, a_cols, p.lda, &a_scratch, &a_bits,
                              run_rows);
  rounded.lda = a_cols;
  rounded.b = RoundRowsToBf16(p.b, b_rows, b_cols, p.ldb, &b_scratch, &b_bits,
                              run_rows);
  rounded.ldb = b_cols;
  return rounded;
}

}  // namespace

void GemmOnThisThread(Transpose trans_a, Transpose trans_b, int m, int n, int k,
                      float alpha, const float* a, int lda, const float* b,
                      int ldb, float beta, float* c, int ldc,
                      Precision precision) {
  if (m == 0 || n == 0) return;
  if (k == 0) return ScaleC(m, n, beta, c, ldc);
  // The same tiles as Gemm, so that both give the same bits.
  TiledProduct product{trans_a, trans_b, m,   n,    k, alpha, a,
                       lda,     b,       ldb, beta, c, ldc};
  if (precision == Precision::kBf16) {
    product = RoundToBf16(product,
                          [](size_t rows, auto&& fn) { fn(size_t{0}, rows); });
  }
  for (size_t t = 0; t < product.tiles(); ++t) {
    const dnnl_status_t status = product.Tile(t);
    if (status != dnnl_success) product.Throw(status);
  }
}

void Gemm(Transpose trans_a, Transpose trans_b, int m, int n, int k,
          float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc, Precision precision) {
  if (m == 0 || n == 0) return;
  if (k == 0) return ScaleC(m, n, beta, c, ldc);
  TiledProduct product{trans_a, trans_b, m,   n,    k, alpha, a,
                       lda,     b,       ldb, beta, c, ldc};
  if (precision == Precision::kBf16) {
    product = RoundToBf16(
        product, [](size_t rows, auto&& fn) { ParallelFor(rows, 16, fn); });
  }
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

std::string GemmKernelName() {
  const dnnl_version_t* version = dnnl_version();
  return absl::StrCat("onednn ", version->major, ".", version->minor, ".",
                      version->patch, " sgemm ", GemmIsa());
}

}  // namespace gemm
}  // namespace chunkzero
