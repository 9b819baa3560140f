// What the CPU and GPU fused optimizer kernels share before they run: the
// argument rules and the folding of a step into per-call f32 constants.
//
//   CZ_RETURN_IF_ERROR(CheckFusedArgs("FusedAdam", n, {param, m, v, grad},
//                                     grad, DType::kBF16, out, DType::kBF16));
//   const AdamConstants c = FoldAdamStep(step);
#ifndef CHUNKZERO_OPTIM_INTERNAL_FUSED_STEP_ARGS_H_
#define CHUNKZERO_OPTIM_INTERNAL_FUSED_STEP_ARGS_H_

#include <cstddef>
#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "optim/fused_step.h"
#include "optim/internal/fused_constants.h"
#include "tensor/dtype.h"

namespace chunkzero {
namespace optim_internal {

// The argument rules of optim/fused_kernels.h: compute dtypes, non-null
// required arrays when n > 0, and param_out either disjoint from grad or
// the same array of the same dtype (grad reuse). InvalidArgument naming
// `op` otherwise.
[[nodiscard]] absl::Status CheckFusedArgs(
    absl::string_view op, size_t n, std::initializer_list<const void*> required,
    const void* grad, DType grad_dtype, const void* param_out, DType out_dtype);

// Derived factors, computed once in f32 (the same for every implementation
// and thread).
AdamConstants FoldAdamStep(const AdamStep& step);
SgdConstants FoldSgdStep(const SgdStep& step);

}  // namespace optim_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_OPTIM_INTERNAL_FUSED_STEP_ARGS_H_
