#include "checkpoint/manifest_fields.h"

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace chunkzero {
namespace checkpoint_internal {
namespace {

// The largest step, iteration or update count a manifest may hold. The
// counters become doubles (the learning rate's schedule, Adam's bias
// correction, the metrics' JSON), exact up to 2^53, and must still count
// on; no run takes 2^53 steps (285 years at a step per microsecond).
constexpr int64_t kMaxSteps = int64_t{1} << 53;

// `x` in the fewest significant digits that read back as `x` (16777216,
// not 1.67772e+07), for messages that quote a field's value.
std::string ExactDouble(double x) {
  for (int digits = 6; digits < 17; ++digits) {
    const std::string s = absl::StrFormat("%.*g", digits, x);
    if (std::strtod(s.c_str(), nullptr) == x) return s;
  }
  return absl::StrFormat("%.17g", x);
}

}  // namespace

// "FIELD = VALUE is ..." for the first field of `manifest` that no writer
// could have produced, or nothing. The checksum vouches only that the bytes
// are those written; these checks catch a writer's bug or a hand-made file.
// Only relations that hold for every state ZeroOptimizer saves are checked
// (optim/optimizer_state.h): iterations counts Step calls, one per step
// whatever the grad accumulation, skipped steps included; updates counts the
// steps taken; a loss scaler's growth tracker counts updates (since the
// scale last changed) and it always has an overflow left to tolerate. How
// far the tracker and hysteresis may go depends on the scaler's options,
// which the loader checks (LoadShardedCheckpoint).
std::optional<std::string> BadManifestField(const CheckpointManifest& m) {
  auto field = [](absl::string_view name, int64_t value) {
    return absl::StrCat(name, " = ", value);
  };
  for (const auto& [name, value] :
       {std::pair<const char*, int64_t>{"step", m.step()},
        {"iterations", m.iterations()},
        {"updates", m.updates()},
        {"growth_tracker", m.growth_tracker()}}) {
    if (value < 0) return field(name, value) + " is negative";
    if (value > kMaxSteps) {
      return absl::StrCat(field(name, value), " is above 2^53 = ", kMaxSteps,
                          ", more steps than a run takes");
    }
  }
  if (m.iterations() != m.step()) {
    return absl::StrCat(field("iterations", m.iterations()),
                        " is not step = ", m.step(),
                        " (the optimizer steps once per step, skipped steps "
                        "included)");
  }
  if (m.updates() > m.iterations()) {
    return absl::StrCat(field("updates", m.updates()),
                        " is more than iterations = ", m.iterations(),
                        " (skipped steps count in iterations only)");
  }
  const double scale = m.loss_scale();
  const std::string scale_field = "loss_scale = " + ExactDouble(scale);
  if (!std::isfinite(scale)) return scale_field + " is not finite";
  if (scale < 0) return scale_field + " is negative";
  if (scale == 0) {
    // Saved without a loss scaler (f32 or bf16 compute).
    const std::string none =
        " is not 0, though loss_scale = 0 says no loss scaler saved it";
    if (m.growth_tracker() != 0) {
      return field("growth_tracker", m.growth_tracker()) + none;
    }
    if (m.hysteresis_left() != 0) {
      return field("hysteresis_left", m.hysteresis_left()) + none;
    }
  } else {
    if (m.hysteresis_left() < 1) {
      return absl::StrCat(field("hysteresis_left", m.hysteresis_left()),
                          " is not positive, though ", scale_field,
                          " says a loss scaler saved it");
    }
  }
  if (m.world_size() < 1) {
    return field("world_size", m.world_size()) + " is not positive";
  }
  if (m.shards_size() != m.world_size()) {
    return absl::StrCat(field("world_size", m.world_size()),
                        " but the manifest lists ", m.shards_size(), " shards");
  }
  for (int i = 0; i < m.shards_size(); ++i) {
    const ShardIndex& shard = m.shards(i);
    const std::string name = absl::StrCat("shards[", i, "].");
    if (shard.step() != m.step()) {
      return absl::StrCat(field(name + "step", shard.step()),
                          " is not step = ", m.step());
    }
    if (shard.world_size() != m.world_size()) {
      return absl::StrCat(field(name + "world_size", shard.world_size()),
                          " is not world_size = ", m.world_size());
    }
    // The writer puts the pieces back to back after the magic.
    int64_t end = kShardHeaderBytes;
    for (int k = 0; k < shard.pieces_size(); ++k) {
      const PieceIndex& piece = shard.pieces(k);
      const std::string piece_name = absl::StrCat(name, "pieces[", k, "].");
      if (piece.numel() < 0) {
        return field(piece_name + "numel", piece.numel()) + " is negative";
      }
      if (piece.numel() >
          (std::numeric_limits<int64_t>::max() - end) / kF32Bytes) {
        return field(piece_name + "numel", piece.numel()) +
               " is more than a file can hold";
      }
      if (piece.byte_offset() != end) {
        return absl::StrCat(
            field(piece_name + "byte_offset", piece.byte_offset()), " is not ",
            end,
            k == 0 ? ", where the header ends"
                   : ", where the piece before it ends");
      }
      end += piece.numel() * kF32Bytes;
    }
    if (shard.byte_size() != end) {
      return absl::StrCat(field(name + "byte_size", shard.byte_size()),
                          " is not ", end,
                          ", the bytes of its header and pieces");
    }
  }
  return std::nullopt;
}

// Checks what the manifest says, which its checksum alone cannot vouch for
// (a writer's bug, or a hand-made file).
absl::Status CheckManifestFields(const CheckpointManifest& manifest,
                                 const std::string& dir,
                                 const std::string& path) {
  // A shard's name must stay inside the directory.
  for (int rank = 0; rank < manifest.shards_size(); ++rank) {
    const ShardIndex& shard = manifest.shards(rank);
    if (shard.rank() != rank || shard.file().empty() ||
        absl::StrContains(shard.file(), '/') || shard.file() == "." ||
        shard.file() == "..") {
      return absl::DataLossError(absl::StrCat(path, ": bad entry for rank ",
                                              rank, ": shard \"", shard.file(),
                                              "\" of rank ", shard.rank()));
    }
  }
  if (std::optional<std::string> bad = BadManifestField(manifest)) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", dir, ": manifest field ", *bad));
  }
  return absl::OkStatus();
}

}  // namespace checkpoint_internal
}  // namespace chunkzero
