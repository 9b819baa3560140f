// ExportTensor: a parameter's values as a model export writes them: f32
// (cast from f16 or bf16 on the host), and finite, since a model holding
// Inf or NaN is unusable and must not replace a good export.
#ifndef CHUNKZERO_MODELS_COMMON_EXPORT_TENSOR_H_
#define CHUNKZERO_MODELS_COMMON_EXPORT_TENSOR_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tensor/tensor.h"

namespace chunkzero {

// `t` as f32 (itself when it already is). InvalidArgument starting with
// `where` and naming `name` when it is not readable on the host or holds
// Inf or NaN.
[[nodiscard]] absl::StatusOr<Tensor> ExportTensor(const Tensor& t,
                                                  absl::string_view name,
                                                  absl::string_view where);

}  // namespace chunkzero

#endif  // CHUNKZERO_MODELS_COMMON_EXPORT_TENSOR_H_
