// CheckTokenBatch: the checks every language model's Forward makes of its
// input before it touches anything.
#ifndef CHUNKZERO_MODELS_COMMON_TOKEN_BATCH_H_
#define CHUNKZERO_MODELS_COMMON_TOKEN_BATCH_H_

#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace chunkzero {

// InvalidArgument starting with `where` ("GptModel::Forward") unless
// 1 <= seq <= max_seq, batch >= 1, tokens and targets hold batch x seq ids,
// and every id is in [0, vocab) (naming the first that is not and its
// [sequence, position]).
inline absl::Status CheckTokenBatch(absl::string_view where, int batch, int seq,
                                    int max_seq, int vocab,
                                    absl::Span<const int32_t> tokens,
                                    absl::Span<const int32_t> targets) {
  if (batch <= 0 || seq <= 0 || seq > max_seq) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": batch ", batch, " x seq ", seq,
                     " (seq must be in [1, ", max_seq, "])"));
  }
  const size_t n = static_cast<size_t>(batch) * seq;
  if (tokens.size() != n || targets.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", tokens.size(), " tokens and ", targets.size(),
                     " targets for batch ", batch, " x seq ", seq));
  }
  for (size_t i = 0; i < n; ++i) {
    for (auto [what, values] :
         {std::pair{"token", tokens}, std::pair{"target", targets}}) {
      if (values[i] < 0 || values[i] >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": ", what, " ", values[i], " at [", i / seq, ", ", i % seq,
            "] is outside the vocabulary [0, ", vocab, ")"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace chunkzero

#endif  // CHUNKZERO_MODELS_COMMON_TOKEN_BATCH_H_
