// TokenData: the token stream the train job reads, and the documented order
// in which it cuts batches out of it (README, "Data order").
//
//   CZ_ASSIGN_OR_RETURN(TokenData data, TokenData::FromTokenFile(path, 50257));
//   std::vector<int32_t> inputs(batch * seq), targets(batch * seq);
//   CZ_RETURN_IF_ERROR(data.FillBatch(order, step, micro, rank, inputs,
//                                      targets));
//
// Order: tokens t[0..n). For step s, micro-batch m and global sequence j
// (0 <= j < batch * world_size), q = (s * grad_accum + m) * batch *
// world_size + j and start = (q * seq_len) mod (n - seq_len); the input is
// t[start, start + seq_len) and the targets are the same shifted by one.
// Rank r takes j in [r * batch, (r + 1) * batch). Nothing else (no seed, no
// shuffling) enters, so another framework can reproduce a run exactly.
//
// Immutable after construction; thread-safe.
#ifndef CHUNKZERO_TOOLS_TRAIN_TOKEN_DATA_H_
#define CHUNKZERO_TOOLS_TRAIN_TOKEN_DATA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace chunkzero {

// The shape of one step's data.
struct BatchOrder {
  int batch = 1;  // Sequences per rank per micro-batch.
  int world_size = 1;
  int grad_accum = 1;  // Micro-batches per step.
  int seq_len = 1;
};

// How a token file stores its ids (--token_dtype): little-endian uint16
// (vocabularies up to 65,536, GPT-2's) or uint32 (larger ones, Llama 3's
// 128,256).
enum class TokenDType { kU16, kU32 };

class TokenData {
 public:
  // Little-endian token ids of `dtype`. InvalidArgument naming the file,
  // the token's index and byte offset for an id >= vocab, or for a byte
  // count that is not a whole number of ids; NotFound for a missing file;
  // InvalidArgument for a directory or another file that is not a regular
  // one (base/file.h).
  [[nodiscard]] static absl::StatusOr<TokenData> FromTokenFile(
      const std::string& path, int vocab, TokenDType dtype = TokenDType::kU16);
  // Every byte is a token (vocab 256).
  [[nodiscard]] static absl::StatusOr<TokenData> FromByteFile(
      const std::string& path);
  // The bytes of a few pages of English text compiled into the binary.
  static TokenData BuiltIn();
  static TokenData FromTokens(std::vector<int32_t> tokens);

  int64_t size() const { return static_cast<int64_t>(tokens_->size()); }
  // The largest id plus one.
  int vocab_used() const { return vocab_used_; }

  // Fills this rank's micro-batch: inputs and targets hold batch * seq_len
  // ids each, row-major. InvalidArgument when the stream is not longer than
  // seq_len or the spans have the wrong size.
  [[nodiscard]] absl::Status FillBatch(const BatchOrder& order, int64_t step,
                                       int micro, int rank,
                                       absl::Span<int32_t> inputs,
                                       absl::Span<int32_t> targets) const;

 private:
  explicit TokenData(std::vector<int32_t> tokens);

  std::shared_ptr<const std::vector<int32_t>> tokens_;
  int vocab_used_ = 0;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_TRAIN_TOKEN_DATA_H_
