// The element loops of every backend's local reduction (internal to comm/).
//
//   const void* in[3] = {a, b, c};
//   ReduceInto(out, in, 3, n, DType::kF32, ReduceOp::kSum);
//   // out[i] == (a[i] + b[i]) + c[i], bit for bit
//
// Semantics (the reference every backend must match): for each i, the inputs
// are combined in order, acc = in[0][i]; acc = acc op in[k][i] for k = 1..n-1;
// kAvg then divides the f32 sum by n. f16/bf16 are widened to f32 exactly,
// accumulated in f32 and rounded to nearest even once at the end. With n == 1
// the result is a plain copy of in[0].
//
// Thread-safe (no shared state).
#ifndef CHUNKZERO_COMM_INTERNAL_REDUCE_KERNELS_H_
#define CHUNKZERO_COMM_INTERNAL_REDUCE_KERNELS_H_

#include <cstddef>

#include "comm/types.h"
#include "tensor/dtype.h"

namespace chunkzero {
namespace comm {
namespace internal {

// out[0, count) = reduction of in[0..n)[0, count) as above.
// REQUIRES: n >= 1; out either equals some in[k] exactly or overlaps none of
// them.
void ReduceInto(void* out, const void* const* in, int n, size_t count,
                DType dtype, ReduceOp op);

// As above, but writes the result to each of out[0..num_out), tile by tile
// while it is hot in L1 (the fused reduce + copy of the in-process
// AllReduce). REQUIRES: each out[j] equals some in[k] exactly or overlaps
// none of them; the out[j] do not overlap each other.
void ReduceIntoEach(void* const* out, int num_out, const void* const* in, int n,
                    size_t count, DType dtype, ReduceOp op);

}  // namespace internal
}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_INTERNAL_REDUCE_KERNELS_H_
