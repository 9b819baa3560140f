#include "io/pretrained/pretrained_directory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <set>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file.h"
#include "base/status_macros.h"

namespace chunkzero {
namespace {

// A JSON file's object; NotFound / DataLoss naming the file.
absl::StatusOr<nlohmann::json> ReadJsonObject(const std::string& path) {
  CZ_ASSIGN_OR_RETURN(const std::string text,
                      ReadFileToString(path, int64_t{64} << 20));
  nlohmann::json json = nlohmann::json::parse(text, /*cb=*/nullptr,
                                              /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::DataLossError(
        absl::StrCat(path, ": not a JSON object (", text.size(), " bytes)"));
  }
  return json;
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  return WriteFileAtomically(path, [&](int fd, const std::string& tmp) {
    return WriteAll(fd, text.data(), text.size(), tmp);
  });
}

// Removes `path` if it is there; errno's error otherwise.
absl::Status RemoveIfPresent(const std::string& path) {
  if (::unlink(path.c_str()) == 0 || errno == ENOENT) {
    return absl::OkStatus();
  }
  return ErrnoError("removing", path);
}

std::string ShardName(int i, int n) {
  return absl::StrFormat("model-%05d-of-%05d.safetensors", i, n);
}

// Whether `file` is a name ShardName gives (model-00001-of-00002...).
bool IsShardName(absl::string_view file) {
  int i = 0, n = 0;
  return file.size() == 32 && absl::SimpleAtoi(file.substr(6, 5), &i) &&
         absl::SimpleAtoi(file.substr(15, 5), &n) && ShardName(i, n) == file;
}

}  // namespace

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

absl::StatusOr<PretrainedDirectory> PretrainedDirectory::Read(
    const std::string& dir) {
  if (!IsDirectory(dir)) {
    return absl::NotFoundError(absl::StrCat(dir, " is not a directory"));
  }
  PretrainedDirectory out;
  out.path_ = dir;
  CZ_ASSIGN_OR_RETURN(out.config_,
                      ReadJsonObject(JoinPath(dir, kPretrainedConfigName)));
  const std::string single = JoinPath(dir, kPretrainedWeightsName);
  const std::string index_path = JoinPath(dir, kPretrainedIndexName);
  if (::access(single.c_str(), F_OK) == 0) {
    CZ_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Read(single));
    for (const std::string& name : file.names()) out.where_[name] = 0;
    out.files_.push_back(std::move(file));
    return out;
  }
  if (::access(index_path.c_str(), F_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(dir, " has neither ",
                                            kPretrainedWeightsName, " nor ",
                                            kPretrainedIndexName));
  }
  CZ_ASSIGN_OR_RETURN(const nlohmann::json index, ReadJsonObject(index_path));
  auto map = index.find("weight_map");
  if (map == index.end() || !map->is_object() || map->empty()) {
    return absl::DataLossError(
        absl::StrCat(index_path, ": no \"weight_map\" object of tensors"));
  }
  // The shards in the order the map first names them.
  std::map<std::string, int> shard_index;
  std::vector<std::string> shards;
  std::map<std::string, std::string> wanted;  // Tensor -> shard.
  for (const auto& [name, file] : map->items()) {
    if (!file.is_string()) {
      return absl::DataLossError(absl::StrCat(index_path, ": the shard of ",
                                              QuoteForMessage(name),
                                              " is not a file name"));
    }
    const std::string shard = file.get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." ||
        shard == "..") {
      return absl::DataLossError(absl::StrCat(
          index_path, ": shard ", QuoteForMessage(shard), " of ",
          QuoteForMessage(name), " is not a file in the directory"));
    }
    if (shard_index.emplace(shard, static_cast<int>(shards.size())).second) {
      shards.push_back(shard);
    }
    wanted[name] = shard;
  }
  for (const std::string& shard : shards) {
    CZ_ASSIGN_OR_RETURN(SafetensorsFile file,
                        SafetensorsFile::Read(JoinPath(dir, shard)));
    const int at = static_cast<int>(out.files_.size());
    for (const std::string& name : file.names()) {
      auto it = wanted.find(name);
      if (it == wanted.end() || it->second != shard) {
        return absl::DataLossError(absl::StrCat(
            file.path(), " holds tensor ", QuoteForMessage(name),
            it == wanted.end()
                ? absl::StrCat(", which ", kPretrainedIndexName,
                               " does not list")
                : absl::StrCat(", which ", kPretrainedIndexName, " puts in ",
                               QuoteForMessage(it->second))));
      }
      out.where_[name] = at;
    }
    out.files_.push_back(std::move(file));
  }
  for (const auto& [name, shard] : wanted) {
    if (!out.where_.count(name)) {
      return absl::DataLossError(absl::StrCat(
          index_path, " puts tensor ", QuoteForMessage(name), " in ",
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

absl::Status WritePretrainedDirectory(
    const std::string& dir, const std::string& config_json,
    const std::vector<std::pair<std::string, Tensor>>& tensors,
    int64_t shard_bytes) {
  if (shard_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a shard of ", shard_bytes, " bytes holds nothing"));
  }
  if (tensors.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no tensors to write to ", dir));
  }
  CZ_RETURN_IF_ERROR(CreateDirectories(dir));
  // Tensors into shards in order: a new shard when the next would pass
  // shard_bytes (a tensor larger than that alone).
  std::vector<std::vector<std::pair<std::string, Tensor>>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (const auto& [name, tensor] : tensors) {
    const int64_t bytes = static_cast<int64_t>(tensor.nbytes());
    if (in_shard > 0 && in_shard + bytes > shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back({name, tensor});
    in_shard += bytes;
    total += bytes;
  }
  // Everything is written into a staging directory inside `dir` first, so
  // that a failure (a full disk) leaves the earlier export whole; only
  // renames follow once every byte is down.
  std::string staging = JoinPath(dir, ".chunkzero-export-XXXXXX");
  if (::mkdtemp(staging.data()) == nullptr) {
    return ErrnoError("cannot create a staging directory in", dir);
  }
  auto discard_staging = [&staging] {
    std::error_code ignored;
    std::filesystem::remove_all(staging, ignored);
  };
  std::vector<std::string> files;  // Weights, then the index, config last.
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  const int n = static_cast<int>(shards.size());
  absl::Status written;
  if (n == 1) {
    files.push_back(kPretrainedWeightsName);
    written =
        WriteSafetensors(JoinPath(staging, files[0]), shards[0], metadata);
  } else {
    nlohmann::ordered_json index;
    index["metadata"]["total_size"] = total;
    nlohmann::ordered_json map = nlohmann::ordered_json::object();
    for (int i = 0; i < n && written.ok(); ++i) {
      files.push_back(ShardName(i + 1, n));
      written = WriteSafetensors(JoinPath(staging, files.back()), shards[i],
                                 metadata);
      for (const auto& [name, tensor] : shards[i]) map[name] = files.back();
    }
    index["weight_map"] = std::move(map);
    files.push_back(kPretrainedIndexName);
    if (written.ok()) {
      written =
          WriteText(JoinPath(staging, files.back()), index.dump(2) + "\n");
    }
  }
  files.push_back(kPretrainedConfigName);
  if (written.ok()) {
    written = WriteText(JoinPath(staging, files.back()), config_json + "\n");
  }
  if (!written.ok()) {
    discard_staging();
    return written;
  }
  // The shards an earlier sharded export listed: those the new set does
  // not overwrite are removed once it is in place.
  std::set<std::string> stale;
  if (absl::StatusOr<nlohmann::json> old =
          ReadJsonObject(JoinPath(dir, kPretrainedIndexName));
      old.ok() && old->contains("weight_map") &&
      (*old)["weight_map"].is_object()) {
    for (const auto& [name, file] : (*old)["weight_map"].items()) {
      if (file.is_string() && IsShardName(file.get<std::string>())) {
        stale.insert(file.get<std::string>());
      }
    }
  }
  // Both weight entry points go first (from_pretrained reads a
  // model.safetensors before an index), so that the directory never pairs
  // an old index with new shards; config.json moves last.
  absl::Status moved = RemoveIfPresent(JoinPath(dir, kPretrainedIndexName));
  if (moved.ok()) {
    moved = RemoveIfPresent(JoinPath(dir, kPretrainedWeightsName));
  }
  for (const std::string& file : files) {
    if (!moved.ok()) break;
    stale.erase(file);
    if (::rename(JoinPath(staging, file).c_str(),
                 JoinPath(dir, file).c_str()) != 0) {
      moved =
          ErrnoError("moving the export into place as", JoinPath(dir, file));
    }
  }
  discard_staging();
  CZ_RETURN_IF_ERROR(moved);
  for (const std::string& file : stale) {
    CZ_RETURN_IF_ERROR(RemoveIfPresent(JoinPath(dir, file)));
  }
  return FsyncDir(dir);
}

}  // namespace chunkzero
