#include "ddp/parameter.h"

#include "absl/strings/str_cat.h"

namespace chunkzero {

std::string JoinName(absl::string_view prefix, absl::string_view name) {
  if (prefix.empty()) return std::string(name);
  return absl::StrCat(prefix, ".", name);
}

}  // namespace chunkzero
