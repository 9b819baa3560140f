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
// Writing is pretrained_export.h's.
//
// Reading checks config.json is a JSON object, every shard the index names
// (or the single file) with the safetensors checks, and that the index and
// the shards agree: every tensor of the weight map is in the shard it names,
// no tensor is in two shards, no shard holds a tensor the map does not
// list. Errors name the directory and the file (and the tensor): NotFound
// for a missing directory, config.json or weights, DataLoss for corrupt or
// disagreeing files. Every shard is held in memory (a model's weights).
//
// Only what config.json and the entry point name is read: other files in the
// directory (a tokenizer, pytorch_model.bin, a FIFO or a directory named
// backup.safetensors) are never opened. JSON is read within
// io/json/json_text.h's bounds; a shard name that is empty, holds a '/' or
// a NUL byte, or is "." or ".." is DataLoss.
#ifndef CHUNKZERO_IO_PRETRAINED_PRETRAINED_DIRECTORY_H_
#define CHUNKZERO_IO_PRETRAINED_PRETRAINED_DIRECTORY_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
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

// The files a directory's weights are read from, found without reading any
// weights: model.safetensors if it is there (from_pretrained reads it before
// an index), else the shards model.safetensors.index.json names, in the
// order the weight map first names them. Paths, joined to the directory.
struct PretrainedFiles {
  std::string config;                // config.json
  std::string index;                 // The index; empty for one file.
  std::vector<std::string> weights;  // model.safetensors, or the shards.
};
// NotFound for a missing directory or neither entry point, the index's
// errors (ParseWeightIndex) naming it.
[[nodiscard]] absl::StatusOr<PretrainedFiles> ListPretrainedFiles(
    const std::string& dir);

// An index's weight map: every tensor's shard, and the shards in the order
// the map first names them.
struct WeightIndex {
  std::vector<std::string> shards;
  std::map<std::string, std::string> shard_of;  // Tensor name -> shard.
};
// `text`, the index at `index_path` (which starts each error): DataLoss for
// JSON that is not an object (json_text.h's checks), no "weight_map" object
// of tensors, a shard that is not a string, or a shard name that is not a
// file in the directory (empty, ".", "..", or holding '/' or NUL).
[[nodiscard]] absl::StatusOr<WeightIndex> ParseWeightIndex(
    absl::string_view text, const std::string& index_path);

// config.json's `text` (at `path`, which starts each error) as a JSON
// object: DataLoss for anything else, saying what and where
// ("...config.json: not valid JSON at byte 37 (line 3, column 15): number
// overflow parsing '1e999'", "...: not a JSON object but an array").
[[nodiscard]] absl::StatusOr<nlohmann::json> ParseConfigJson(
    absl::string_view text, const std::string& path);

// Whether `name` can name a file in the directory: not empty, "." or "..",
// and without '/' or NUL.
bool IsPlainFileName(absl::string_view name);

// Whether `path` names a directory (following symbolic links).
bool IsDirectory(const std::string& path);

}  // namespace chunkzero

#endif  // CHUNKZERO_IO_PRETRAINED_PRETRAINED_DIRECTORY_H_
