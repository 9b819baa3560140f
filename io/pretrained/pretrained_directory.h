// Model directories as Hugging Face's save_pretrained writes them:
// config.json beside the weights, either one model.safetensors or shards
// model-0000i-of-0000n.safetensors listed in model.safetensors.index.json
// ({"metadata": {"total_size": bytes}, "weight_map": {name: shard}}).
//
//   CZ_ASSIGN_OR_RETURN(PretrainedDirectory dir,
//                       PretrainedDirectory::Read("TinyLlama"));
//   const nlohmann::json& config = dir.config();
//   CZ_ASSIGN_OR_RETURN(Tensor w, dir.Get("model.norm.weight"));
//
//   CZ_RETURN_IF_ERROR(WritePretrainedDirectory(
//       "out", config.dump(2), tensors, /*shard_bytes=*/5'000'000'000));
//
// Reading checks config.json is a JSON object, every shard the index names
// (or the single file) with the safetensors checks, and that the index and
// the shards agree: every tensor of the weight map is in the shard it names,
// no tensor is in two shards, no shard holds a tensor the map does not
// list. Errors name the directory and the file (and the tensor): NotFound
// for a missing directory, config.json or weights, DataLoss for corrupt or
// disagreeing files. Every shard is held in memory (a model's weights).
//
// Writing creates the directory if needed, writes the weights (one file up
// to `shard_bytes`, else shards of at most that many bytes, a tensor larger
// than that alone in its shard, in the order given) with the metadata
// {"format": "pt"}, the index when sharded, and config.json into a staging
// directory inside `dir`, then moves them into place: a failed write (a
// full disk) leaves an earlier export whole. The earlier export's weights
// entry (model.safetensors or the index, which from_pretrained would read)
// and the shards its index listed are replaced or removed; other files
// (a tokenizer) stay.
#ifndef CHUNKZERO_IO_PRETRAINED_PRETRAINED_DIRECTORY_H_
#define CHUNKZERO_IO_PRETRAINED_PRETRAINED_DIRECTORY_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/safetensors/safetensors.h"
#include "nlohmann/json.hpp"
#include "tensor/tensor.h"

namespace chunkzero {

inline constexpr char kPretrainedConfigName[] = "config.json";
inline constexpr char kPretrainedWeightsName[] = "model.safetensors";
inline constexpr char kPretrainedIndexName[] = "model.safetensors.index.json";

class PretrainedDirectory {
 public:
  [[nodiscard]] static absl::StatusOr<PretrainedDirectory> Read(
      const std::string& dir);

  const std::string& path() const { return path_; }
  const nlohmann::json& config() const { return config_; }
  // Every tensor name, in name order.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const {
    return where_.count(name) > 0;
  }
  // As SafetensorsFile's, from the shard that holds the tensor.
  [[nodiscard]] absl::StatusOr<std::string> dtype(
      const std::string& name) const;
  [[nodiscard]] absl::StatusOr<Shape> shape(const std::string& name) const;
  [[nodiscard]] absl::StatusOr<Tensor> Get(const std::string& name) const;
  // The files the weights were read from (one, or the shards).
  int num_files() const { return static_cast<int>(files_.size()); }

 private:
  [[nodiscard]] absl::StatusOr<const SafetensorsFile*> FileOf(
      const std::string& name) const;

  std::string path_;
  nlohmann::json config_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, int> where_;  // Tensor name -> files_ index.
};

// Whether `path` names a directory (following symbolic links).
bool IsDirectory(const std::string& path);

// Writes `tensors` and `config_json` into `dir` (see above). InvalidArgument
// for shard_bytes < 1 or no tensors; file errors name the file.
[[nodiscard]] absl::Status WritePretrainedDirectory(
    const std::string& dir, const std::string& config_json,
    const std::vector<std::pair<std::string, Tensor>>& tensors,
    int64_t shard_bytes);

}  // namespace chunkzero

#endif  // CHUNKZERO_IO_PRETRAINED_PRETRAINED_DIRECTORY_H_
