#include "engine/activation_checkpointing.h"

#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace chunkzero {

std::string ActivationCheckpointing::ToString() const {
  if (every <= 0) return "none";
  if (every == 1) return "layers";
  return absl::StrCat("every:", every);
}

absl::StatusOr<ActivationCheckpointing> ActivationCheckpointing::Parse(
    absl::string_view text) {
  ActivationCheckpointing ac;
  if (text == "none") return ac;
  if (text == "layers") {
    ac.every = 1;
    return ac;
  }
  constexpr absl::string_view kEvery = "every:";
  int every = 0;
  if (absl::StartsWith(text, kEvery) &&
      absl::SimpleAtoi(text.substr(kEvery.size()), &every) && every > 0 &&
      // SimpleAtoi takes "+3" and " 3"; the flag's spelling is digits only.
      text.substr(kEvery.size()).find_first_not_of("0123456789") ==
          absl::string_view::npos) {
    ac.every = every;
    return ac;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "activation checkpointing '", text,
      "': expected none, layers or every:K with K a positive integer"));
}

}  // namespace chunkzero
