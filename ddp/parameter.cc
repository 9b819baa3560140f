#include "ddp/parameter.h"

#include "absl/strings/str_cat.h"

namespace chunkzero {

absl::Status Parameter::Materialize() {
  if (init_ == nullptr) return absl::OkStatus();
  absl::StatusOr<Tensor> values = init_();
  if (!values.ok()) {
    return absl::Status(values.status().code(),
                        absl::StrCat("making parameter '", name_,
                                     "': ", values.status().message()));
  }
  if (values->shape() != shape_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "making parameter '", name_, "': its init made ", values->DebugString(),
        ", expected shape ", ShapeToString(shape_)));
  }
  set_data(*std::move(values));
  return absl::OkStatus();
}

std::string JoinName(absl::string_view prefix, absl::string_view name) {
  if (prefix.empty()) return std::string(name);
  return absl::StrCat(prefix, ".", name);
}

}  // namespace chunkzero
