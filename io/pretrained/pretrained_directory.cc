#include "io/pretrained/pretrained_directory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "io/json/json_text.h"

namespace chunkzero {
namespace {

// What a JSON value is, for "not a JSON object but ...".
const char* JsonKind(const nlohmann::json& j) {
  if (j.is_array()) return "an array";
  if (j.is_string()) return "a string";
  if (j.is_number()) return "a number";
  if (j.is_boolean()) return "a boolean";
  return "null";
}

// The largest JSON file read (a config or an index).
constexpr int64_t kMaxJsonBytes = int64_t{64} << 20;

}  // namespace

absl::StatusOr<nlohmann::json> ParseConfigJson(absl::string_view text,
                                               const std::string& path) {
  absl::StatusOr<nlohmann::json> json = ParseJsonText<nlohmann::json>(text);
  if (!json.ok()) {
    return absl::DataLossError(
        absl::StrCat(path, ": ", json.status().message()));
  }
  if (!json->is_object()) {
    return absl::DataLossError(absl::StrCat(path, ": not a JSON object but ",
                                            JsonKind(*json), " (", text.size(),
                                            " bytes)"));
  }
  return json;
}

absl::StatusOr<WeightIndex> ParseWeightIndex(absl::string_view text,
                                             const std::string& index_path) {
  CZ_ASSIGN_OR_RETURN(const nlohmann::json index,
                      ParseConfigJson(text, index_path));
  auto map = index.find("weight_map");
  if (map == index.end() || !map->is_object() || map->empty()) {
    return absl::DataLossError(
        absl::StrCat(index_path, ": no \"weight_map\" object of tensors"));
  }
  WeightIndex out;
  std::set<std::string> seen;
  for (const auto& [name, file] : map->items()) {
    if (!file.is_string()) {
      return absl::DataLossError(absl::StrCat(index_path, ": the shard of ",
                                              QuoteForMessage(name),
                                              " is not a file name"));
    }
    const std::string& shard = file.get_ref<const std::string&>();
    if (!IsPlainFileName(shard)) {
      return absl::DataLossError(absl::StrCat(
          index_path, ": shard ", QuoteForMessage(shard), " of ",
          QuoteForMessage(name), " is not a file in the directory"));
    }
    out.shard_of.emplace(name, shard);
    if (seen.insert(shard).second) out.shards.push_back(shard);
  }
  return out;
}

bool IsPlainFileName(absl::string_view name) {
  // A NUL would cut the name short wherever it meets the file system.
  return !name.empty() && name != "." && name != ".." &&
         name.find('/') == absl::string_view::npos &&
         name.find('\0') == absl::string_view::npos;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

absl::StatusOr<PretrainedFiles> ListPretrainedFiles(const std::string& dir) {
  if (!IsDirectory(dir)) {
    return absl::NotFoundError(absl::StrCat(dir, " is not a directory"));
  }
  PretrainedFiles out;
  out.config = JoinPath(dir, kPretrainedConfigName);
  const std::string single = JoinPath(dir, kPretrainedWeightsName);
  struct stat st;
  if (::lstat(single.c_str(), &st) == 0) {
    out.weights.push_back(single);
    return out;
  }
  const std::string index_path = JoinPath(dir, kPretrainedIndexName);
  if (::lstat(index_path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(dir, " has neither ",
                                            kPretrainedWeightsName, " nor ",
                                            kPretrainedIndexName));
  }
  out.index = index_path;
  CZ_ASSIGN_OR_RETURN(const std::string text,
                      ReadFileToString(index_path, kMaxJsonBytes));
  CZ_ASSIGN_OR_RETURN(const WeightIndex index,
                      ParseWeightIndex(text, index_path));
  for (const std::string& shard : index.shards) {
    out.weights.push_back(JoinPath(dir, shard));
  }
  return out;
}

absl::StatusOr<PretrainedDirectory> PretrainedDirectory::Read(
    const std::string& dir) {
  if (!IsDirectory(dir)) {
    return absl::NotFoundError(absl::StrCat(dir, " is not a directory"));
  }
  PretrainedDirectory out;
  out.path_ = dir;
  const std::string config_path = JoinPath(dir, kPretrainedConfigName);
  CZ_ASSIGN_OR_RETURN(const std::string config_text,
                      ReadFileToString(config_path, kMaxJsonBytes));
  CZ_ASSIGN_OR_RETURN(out.config_, ParseConfigJson(config_text, config_path));
  CZ_ASSIGN_OR_RETURN(const PretrainedFiles files, ListPretrainedFiles(dir));
  if (files.index.empty()) {
    CZ_ASSIGN_OR_RETURN(SafetensorsFile file,
                        SafetensorsFile::Read(files.weights[0]));
    for (const std::string& name : file.names()) out.where_[name] = 0;
    out.files_.push_back(std::move(file));
    return out;
  }
  CZ_ASSIGN_OR_RETURN(const std::string index_text,
                      ReadFileToString(files.index, kMaxJsonBytes));
  CZ_ASSIGN_OR_RETURN(const WeightIndex index,
                      ParseWeightIndex(index_text, files.index));
  for (const std::string& shard : index.shards) {
    CZ_ASSIGN_OR_RETURN(SafetensorsFile file,
                        SafetensorsFile::Read(JoinPath(dir, shard)));
    const int at = static_cast<int>(out.files_.size());
    for (const std::string& name : file.names()) {
      auto it = index.shard_of.find(name);
      if (it == index.shard_of.end() || it->second != shard) {
        return absl::DataLossError(absl::StrCat(
            file.path(), " holds tensor ", QuoteForMessage(name),
            it == index.shard_of.end()
                ? absl::StrCat(", which ", kPretrainedIndexName,
                               " does not list")
                : absl::StrCat(", which ", kPretrainedIndexName, " puts in ",
                               QuoteForMessage(it->second))));
      }
      out.where_[name] = at;
    }
    out.files_.push_back(std::move(file));
  }
  for (const auto& [name, shard] : index.shard_of) {
    if (!out.where_.count(name)) {
      return absl::DataLossError(absl::StrCat(
          files.index, " puts tensor ", QuoteForMessage(name), " in ",
          QuoteForMessage(shard), ", which does not hold it"));
    }
  }
  return out;
}

std::vector<std::string> PretrainedDirectory::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : where_) out.push_back(name);
  return out;
}

absl::StatusOr<const SafetensorsFile*> PretrainedDirectory::FileOf(
    const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) {
    return absl::NotFoundError(
        absl::StrCat(path_, " has no tensor ", QuoteForMessage(name)));
  }
  return &files_[it->second];
}

absl::StatusOr<std::string> PretrainedDirectory::dtype(
    const std::string& name) const {
  CZ_ASSIGN_OR_RETURN(const SafetensorsFile* file, FileOf(name));
  return file->dtype(name);
}

absl::StatusOr<Shape> PretrainedDirectory::shape(
    const std::string& name) const {
  CZ_ASSIGN_OR_RETURN(const SafetensorsFile* file, FileOf(name));
  return file->shape(name);
}

absl::StatusOr<Tensor> PretrainedDirectory::Get(const std::string& name) const {
  CZ_ASSIGN_OR_RETURN(const SafetensorsFile* file, FileOf(name));
  return file->Get(name);
}

}  // namespace chunkzero
