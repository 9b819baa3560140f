#include "tools/train/token_data.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "tools/train/builtin_corpus.h"

namespace chunkzero {

TokenData::TokenData(std::vector<int32_t> tokens) {
  for (int32_t t : tokens) vocab_used_ = std::max(vocab_used_, t + 1);
  tokens_ = std::make_shared<const std::vector<int32_t>>(std::move(tokens));
}

TokenData TokenData::FromTokens(std::vector<int32_t> tokens) {
  return TokenData(std::move(tokens));
}

absl::StatusOr<TokenData> TokenData::FromTokenFile(const std::string& path,
                                                   int vocab,
                                                   TokenDType dtype) {
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  if (!bytes.ok()) return bytes.status();
  const size_t width = dtype == TokenDType::kU32 ? 4 : 2;
  if (bytes->size() % width != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " has ", bytes->size(), " bytes, not a whole number of uint",
        8 * width, " token ids"));
  }
  std::vector<int32_t> tokens(bytes->size() / width);
  const auto* b = reinterpret_cast<const unsigned char*>(bytes->data());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const unsigned char* at = b + width * i;
    // Little-endian.
    uint32_t id = at[0] | (uint32_t{at[1]} << 8);
    if (width == 4) id |= (uint32_t{at[2]} << 16) | (uint32_t{at[3]} << 24);
    if (id >= static_cast<uint32_t>(vocab)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": token ", i, " (byte offset ", width * i,
                       ") is ", id, ", outside the vocabulary of ", vocab));
    }
    tokens[i] = static_cast<int32_t>(id);
  }
  return TokenData(std::move(tokens));
}

absl::StatusOr<TokenData> TokenData::FromByteFile(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  if (!bytes.ok()) return bytes.status();
  std::vector<int32_t> tokens(bytes->begin(), bytes->end());
  for (size_t i = 0; i < bytes->size(); ++i) {
    tokens[i] = static_cast<unsigned char>((*bytes)[i]);
  }
  return TokenData(std::move(tokens));
}

TokenData TokenData::BuiltIn() {
  const absl::string_view text = BuiltinCorpus();
  std::vector<int32_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    tokens[i] = static_cast<unsigned char>(text[i]);
  }
  return TokenData(std::move(tokens));
}

absl::Status TokenData::FillBatch(const BatchOrder& order, int64_t step,
                                  int micro, int rank,
                                  absl::Span<int32_t> inputs,
                                  absl::Span<int32_t> targets) const {
  const int64_t n = size();
  const int64_t seq = order.seq_len;
  const size_t want = static_cast<size_t>(order.batch) * seq;
  if (n <= seq) {
    return absl::InvalidArgumentError(
        absl::StrCat("the data has ", n, " tokens; sequences of ", seq,
                     " need more than that"));
  }
  if (inputs.size() != want || targets.size() != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch buffers hold ", inputs.size(), " and ",
                     targets.size(), " ids, want ", want));
  }
  const int64_t global = static_cast<int64_t>(order.batch) * order.world_size;
  for (int b = 0; b < order.batch; ++b) {
    const int64_t j = static_cast<int64_t>(rank) * order.batch + b;
    // start = (q * seq) mod (n - seq) for q = (step * grad_accum + micro) *
    // global + j, reduced as it goes so that no product overflows however
    // long the run.
    using Wide = unsigned __int128;
    const Wide span = static_cast<Wide>(n - seq);
    const Wide slot =
        static_cast<Wide>(step) * static_cast<Wide>(order.grad_accum) + micro;
    const Wide q = ((slot % span) * (static_cast<Wide>(global) % span) +
                    static_cast<Wide>(j)) %
                   span;
    const auto start = static_cast<int64_t>(q * static_cast<Wide>(seq) % span);
    const int32_t* t = tokens_->data() + start;
    std::copy_n(t, seq, inputs.begin() + b * seq);
    std::copy_n(t + 1, seq, targets.begin() + b * seq);
  }
  return absl::OkStatus();
}

}  // namespace chunkzero
