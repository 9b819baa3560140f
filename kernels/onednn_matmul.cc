#include "kernels/onednn_matmul.h"

#include <cstddef>
#include <map>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

// libgomp's, declared here rather than through <omp.h>, which clang does
// not ship without libomp-dev.
extern "C" void omp_set_num_threads(int num_threads);

namespace chunkzero {
namespace gemm {
namespace internal {
namespace {

// What a primitive is made for: the operand type, the layouts, the shape,
// the leading dimensions and the epilogue.
using ShapeKey = std::tuple<Operands, bool, bool, int, int, int, int, int, int,
                            float, float>;

struct CachedMatmul {
  dnnl::matmul primitive;
  size_t scratch_bytes;
};

// A thread's primitives. The model has a few dozen shapes (each layer's
// products and their edge tiles); the bound only keeps a caller with
// ever-changing shapes from growing the cache without end.
constexpr size_t kMaxCachedShapes = 512;

struct ThreadState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<ShapeKey, CachedMatmul> matmuls;
  std::vector<std::byte> scratch;
};

ThreadState& ThisThread() {
  thread_local ThreadState state;
  return state;
}

// The rows x cols matrix stored row-major with leading dimension ld, or
// (transposed) stored cols x rows.
dnnl::memory::desc Matrix(int rows, int cols, int ld, bool transposed,
                          dnnl::memory::data_type type) {
  return dnnl::memory::desc(
      {rows, cols}, type,
      transposed ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1});
}

dnnl::memory::data_type TypeOf(Operands operands) {
  return operands == Operands::kBf16 ? dnnl::memory::data_type::bf16
                                     : dnnl::memory::data_type::f32;
}

dnnl::matmul::primitive_desc Describe(const dnnl::engine& engine,
                                      Operands operands, bool trans_a,
                                      bool trans_b, int m, int n, int k,
                                      int lda, int ldb, int ldc, float alpha,
                                      float beta) {
  using dt = dnnl::memory::data_type;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  return dnnl::matmul::primitive_desc(
      dnnl::matmul::desc(Matrix(m, k, lda, trans_a, TypeOf(operands)),
                         Matrix(k, n, ldb, trans_b, TypeOf(operands)),
                         Matrix(m, n, ldc, false, dt::f32)),
      attr, engine);
}

// oneDNN's global primitive cache is turned off: the primitives live in
// each thread's own cache above, so the global one would only add a lock
// and a second lookup to every product. Its other global state is made on
// first use, behind guards that ThreadSanitizer cannot see (the library is
// not instrumented); making one primitive inside a C++ static initialiser
// gives every later caller a happens-before edge to it that ThreadSanitizer
// sees. Throws what oneDNN throws (the initialiser then runs again on the
// next call).
void EnsureOneDnnInitialised() {
  static const bool initialised = [] {
    dnnl::set_primitive_cache_capacity(0);
    const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    dnnl::matmul(Describe(engine, Operands::kF32, false, false, 1, 1, 1, 1, 1,
                          1, 1.0f, 0.0f));
    return true;
  }();
  (void)initialised;
}

}  // namespace

dnnl_status_t MatmulHere(Operands operands, bool trans_a, bool trans_b, int m,
                         int n, int k, float alpha, const void* a, int lda,
                         const void* b, int ldb, float beta, float* c,
                         int ldc) {
  try {
    // Before any primitive is made: oneDNN sizes its threading by it.
    omp_set_num_threads(1);
    EnsureOneDnnInitialised();
    ThreadState& state = ThisThread();
    const ShapeKey key{operands, trans_a, trans_b, m,     n,   k,
                       lda,      ldb,     ldc,     alpha, beta};
    auto it = state.matmuls.find(key);
    if (it == state.matmuls.end()) {
      if (state.matmuls.size() >= kMaxCachedShapes) state.matmuls.clear();
      const auto pd = Describe(state.engine, operands, trans_a, trans_b, m, n,
                               k, lda, ldb, ldc, alpha, beta);
      it = state.matmuls
               .emplace(key, CachedMatmul{dnnl::matmul(pd),
                                          pd.scratchpad_desc().get_size()})
               .first;
    }
    if (state.scratch.size() < it->second.scratch_bytes) {
      state.scratch.resize(it->second.scratch_bytes);
    }
    using dt = dnnl::memory::data_type;
    // oneDNN's memory objects take mutable pointers; A and B are only read.
    dnnl::memory a_mem(Matrix(m, k, lda, trans_a, TypeOf(operands)),
                       state.engine, const_cast<void*>(a));
    dnnl::memory b_mem(Matrix(k, n, ldb, trans_b, TypeOf(operands)),
                       state.engine, const_cast<void*>(b));
    dnnl::memory c_mem(Matrix(m, n, ldc, false, dt::f32), state.engine, c);
    std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, a_mem},
                                                  {DNNL_ARG_WEIGHTS, b_mem},
                                                  {DNNL_ARG_DST, c_mem}};
    if (it->second.scratch_bytes > 0) {
      args.emplace(
          DNNL_ARG_SCRATCHPAD,
          dnnl::memory(dnnl::memory::desc({static_cast<dnnl::memory::dim>(
                                              it->second.scratch_bytes)},
                                          dt::u8, dnnl::memory::format_tag::a),
                       state.engine, state.scratch.data()));
    }
    it->second.primitive.execute(state.stream, args);
    state.stream.wait();
    return dnnl_success;
  } catch (const dnnl::error& e) {
    return e.status;
  } catch (const std::bad_alloc&) {
    return dnnl_out_of_memory;
  }
}

std::string MatmulImplementation(Operands operands) {
  try {
    omp_set_num_threads(1);
    EnsureOneDnnInitialised();
    const auto pd = Describe(ThisThread().engine, operands, false, false, 256,
                             1024, 256, 256, 1024, 1024, 1.0f, 0.0f);
    return pd.impl_info_str();
  } catch (const dnnl::error&) {
    return "";
  }
}

}  // namespace internal
}  // namespace gemm
}  // namespace chunkzero
