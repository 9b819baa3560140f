// What a checkpoint manifest may say, checked beyond its checksum (which
// vouches only that the bytes are those written): the fields no writer
// could have produced, and shard names that leave the directory. Internal
// to checkpoint/.
#ifndef CHUNKZERO_CHECKPOINT_MANIFEST_FIELDS_H_
#define CHUNKZERO_CHECKPOINT_MANIFEST_FIELDS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "checkpoint/checkpoint.pb.h"

namespace chunkzero {
namespace checkpoint_internal {

// Shard files start with this, so that a file of something else is refused
// before its pieces are read.
inline constexpr char kShardMagic[] = {'C', 'Z', 'S', 'H', 'A', 'R', 'D', '1'};
inline constexpr int64_t kShardHeaderBytes = sizeof(kShardMagic);
// Pieces are f32 values.
inline constexpr int64_t kF32Bytes = 4;

// "FIELD = VALUE is ..." for the first field of `m` that no writer could
// have produced, or nothing.
std::optional<std::string> BadManifestField(const CheckpointManifest& m);

// DataLoss naming `path` for a shard entry whose name leaves `dir` or whose
// rank is not its index, and naming `dir` for a field BadManifestField
// finds.
absl::Status CheckManifestFields(const CheckpointManifest& manifest,
                                 const std::string& dir,
                                 const std::string& path);

}  // namespace checkpoint_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_CHECKPOINT_MANIFEST_FIELDS_H_
