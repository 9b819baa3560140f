// Writing a model directory as Hugging Face's save_pretrained does
// (pretrained_directory.h reads it), so that a failure at any point, a kill
// included, leaves the directory's earlier export loadable and nothing of
// the new one behind for long.
//
//   // Before training: the names the export will create, and that this
//   // process may create, replace and remove each.
//   const std::vector<std::string> files =
//       PretrainedExportFiles(tensor_bytes, /*shard_bytes=*/5'000'000'000);
//   CZ_RETURN_IF_ERROR(CheckCanWritePretrainedDirectory("out", files));
//   ...
//   CZ_RETURN_IF_ERROR(WritePretrainedDirectory(
//       "out", config.dump(2), tensors, /*shard_bytes=*/5'000'000'000));
//
// The weights go in one model.safetensors up to `shard_bytes`, else in
// shards model-0000i-of-0000n.safetensors of at most that many bytes each
// (a tensor larger than that alone in its shard, in the order given), with
// the index model.safetensors.index.json; config.json beside them; the
// metadata {"format": "pt"}.
//
// How it commits. Everything is first written into a staging directory
// .chunkzero-export-XXXXXX inside the export directory, which the writing
// process holds locked (flock) while it lives: a later export removes any
// staging directory nobody holds (what a killed export left), and files
// named like shards that the live export does not use (what a failure in
// step 4 left; save_pretrained removes them too). Then, with
// every byte down:
//  1. If a new shard would take the name of a shard the live index lists
//     (a re-export with as many shards), that shard is first linked (or
//     copied) to .chunkzero-old-NAME and the live index atomically replaced
//     by one naming the copies: the earlier export stays whole.
//  2. The new shards move into place, then config.json.
//  3. The entry point switches, atomically: the new index renamed over the
//     old one (and an earlier model.safetensors, which from_pretrained
//     would prefer, removed), or the new model.safetensors renamed over the
//     old one (which takes precedence over an earlier index at once).
//  4. What the earlier export alone used is removed: its shards (*.
//     safetensors names its index lists), its index, the copies of step 1.
// A failure before step 3 undoes steps 1 and 2; other files (a tokenizer)
// are never touched. Between steps 2 and 3 the directory pairs the new
// config.json with the old weights (from_pretrained then refuses a changed
// shape rather than loading a mix). An export directory that did not exist
// and whose export failed is removed again.
//
// Not for two exports into one directory at once.
#ifndef CHUNKZERO_IO_PRETRAINED_PRETRAINED_EXPORT_H_
#define CHUNKZERO_IO_PRETRAINED_PRETRAINED_EXPORT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "tensor/tensor.h"

namespace chunkzero {

// The staging directories' name prefix, and the prefix of step 1's copies.
inline constexpr char kExportStagingPrefix[] = ".chunkzero-export-";
inline constexpr char kExportBackupPrefix[] = ".chunkzero-old-";

// The files an export of tensors of `tensor_bytes` (in the order written)
// in shards of at most `shard_bytes` creates in its directory: the weights
// (model.safetensors, or the shards and then the index), config.json last.
// REQUIRES: shard_bytes >= 1.
std::vector<std::string> PretrainedExportFiles(
    const std::vector<int64_t>& tensor_bytes, int64_t shard_bytes);

// Checks, before any work is done, that WritePretrainedDirectory could
// write `files` (PretrainedExportFiles) into `dir` as this process's user:
// that `dir` is a directory in which it may create files, or that nothing
// is there and its parent takes a new directory (nothing is created); that
// each of `files`, both entry points and the shards the live index lists
// are each nothing or a file it may replace or remove
// (CheckCanReplaceOrRemove: no FIFO, directory or device stands there; no
// sticky directory or immutable flag forbids it). Errors name the file and
// carry errno's code and text.
[[nodiscard]] absl::Status CheckCanWritePretrainedDirectory(
    const std::string& dir, const std::vector<std::string>& files);

// Writes `tensors` and `config_json` into `dir` as described above.
// InvalidArgument for shard_bytes < 1 or no tensors; the errors of
// CheckCanWritePretrainedDirectory, checked again; file errors naming the
// file (EFBIG past the process's file size limit, ENOSPC on a full disk).
[[nodiscard]] absl::Status WritePretrainedDirectory(
    const std::string& dir, const std::string& config_json,
    const std::vector<std::pair<std::string, Tensor>>& tensors,
    int64_t shard_bytes);

namespace pretrained_export_internal {

// For tests of the commit order: the `n`th file operation of the next
// commits (counting renames, links, removals and the protected index's
// write, from 1) fails as if with EIO; 0 turns it off. Not thread-safe
// against concurrent exports.
void FailCommitOperationForTesting(int n);

}  // namespace pretrained_export_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_IO_PRETRAINED_PRETRAINED_EXPORT_H_
