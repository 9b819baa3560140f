#include "io/pretrained/pretrained_export.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "base/file.h"
#include "base/file_lock.h"
#include "base/status_macros.h"
#include "io/json/json_text.h"
#include "io/pretrained/pretrained_directory.h"
#include "io/safetensors/safetensors.h"
#include "nlohmann/json.hpp"

namespace chunkzero {
namespace {

using OrderedJson = nlohmann::ordered_json;

// Inside the staging directory: what undoing step 1 and step 2 needs.
constexpr char kPreviousIndex[] = "previous-index.json";
constexpr char kProtectedIndex[] = "protected-index.json";
constexpr char kPreviousConfig[] = "previous-config.json";

// FailCommitOperationForTesting's countdown.
std::atomic<int> g_fail_at{0};

// An injected failure, when the countdown reaches this operation.
absl::Status Injected(absl::string_view what) {
  if (g_fail_at.load() <= 0 || g_fail_at.fetch_sub(1) != 1) {
    return absl::OkStatus();
  }
  return absl::DataLossError(absl::StrCat("injected failure: ", what));
}

std::string ShardName(int i, int n) {
  return absl::StrFormat("model-%05d-of-%05d.safetensors", i, n);
}

// The tensors of each weights file, as indexes into the tensors: a new
// shard when the next tensor would pass shard_bytes (a tensor larger than
// that alone).
// Whether `file` is a name ShardName gives (model-00001-of-00002...).
bool IsShardName(absl::string_view file) {
  int i = 0, n = 0;
  return file.size() == 32 && absl::SimpleAtoi(file.substr(6, 5), &i) &&
         absl::SimpleAtoi(file.substr(15, 5), &n) && ShardName(i, n) == file;
}

std::vector<std::vector<size_t>> ShardGroups(
    const std::vector<int64_t>& tensor_bytes, int64_t shard_bytes) {
  std::vector<std::vector<size_t>> groups(1);
  int64_t in_shard = 0;
  for (size_t i = 0; i < tensor_bytes.size(); ++i) {
    if (in_shard > 0 && in_shard + tensor_bytes[i] > shard_bytes) {
      groups.emplace_back();
      in_shard = 0;
    }
    groups.back().push_back(i);
    in_shard += tensor_bytes[i];
  }
  return groups;
}

std::vector<std::string> FileNames(size_t weight_files) {
  std::vector<std::string> files;
  if (weight_files == 1) {
    files.push_back(kPretrainedWeightsName);
  } else {
    const int n = static_cast<int>(weight_files);
    for (int i = 1; i <= n; ++i) files.push_back(ShardName(i, n));
    files.push_back(kPretrainedIndexName);
  }
  files.push_back(kPretrainedConfigName);
  return files;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// The export a reader would load from `dir` now: model.safetensors if it is
// there, else the index; and the shards the index lists (live or not).
struct LiveExport {
  bool single = false;
  bool index = false;
  std::optional<OrderedJson> index_json;  // When it parses.
  std::vector<std::string> shards;        // Plain file names only.

  bool index_live() const { return !single && index; }
  bool lists(const std::string& shard) const {
    for (const std::string& s : shards) {
      if (s == shard) return true;
    }
    return false;
  }
};
LiveExport ReadLiveExport(const std::string& dir) {
  LiveExport live;
  live.single = Exists(JoinPath(dir, kPretrainedWeightsName));
  const std::string index_path = JoinPath(dir, kPretrainedIndexName);
  live.index = Exists(index_path);
  if (!live.index) return live;
  absl::StatusOr<std::string> text =
      ReadFileToString(index_path, int64_t{64} << 20);
  if (!text.ok()) return live;
  absl::StatusOr<OrderedJson> json = ParseJsonText<OrderedJson>(*text);
  if (!json.ok() || !json->is_object()) return live;
  auto map = json->find("weight_map");
  if (map == json->end() || !map->is_object()) return live;
  std::set<std::string> seen;
  for (const auto& [name, file] : map->items()) {
    if (!file.is_string()) continue;
    const std::string& shard = file.get_ref<const std::string&>();
    if (IsPlainFileName(shard) && seen.insert(shard).second) {
      live.shards.push_back(shard);
    }
  }
  live.index_json = *std::move(json);
  return live;
}

// Removes `path` if it is a regular file or a link; anything else (a FIFO
// an index happens to name) is left alone.
absl::Status RemoveFileIfPresent(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? absl::OkStatus() : ErrnoError("cannot stat", path);
  }
  if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) return absl::OkStatus();
  if (::unlink(path.c_str()) == 0 || errno == ENOENT) return absl::OkStatus();
  return ErrnoError("removing", path);
}

absl::Status Rename(const std::string& from, const std::string& to) {
  CZ_RETURN_IF_ERROR(Injected(to));
  if (::rename(from.c_str(), to.c_str()) == 0) return absl::OkStatus();
  return ErrnoError("moving the export into place as", to);
}

// A second name for the file `from` at `to` (replacing what is there): a
// hard link, or where the file system or its rules refuse one, a copy.
absl::Status LinkOrCopy(const std::string& from, const std::string& to) {
  CZ_RETURN_IF_ERROR(Injected(to));
  CZ_RETURN_IF_ERROR(RemoveFileIfPresent(to));
  if (::link(from.c_str(), to.c_str()) == 0) return absl::OkStatus();
  std::error_code error;
  std::filesystem::copy_file(
      from, to, std::filesystem::copy_options::overwrite_existing, error);
  if (!error) return absl::OkStatus();
  ::unlink(to.c_str());
  return absl::Status(
      absl::ErrnoToStatusCode(error.value()),
      absl::StrCat("copying ", from, " to ", to, ": ", error.message()));
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  return WriteFileAtomically(path, [&](int fd, const std::string& tmp) {
    return WriteAll(fd, text.data(), text.size(), tmp);
  });
}

// A staging directory in `dir`, locked while this object lives and removed
// with it.
class Staging {
 public:
  static absl::StatusOr<std::unique_ptr<Staging>> Create(
      const std::string& dir) {
    std::string path =
        JoinPath(dir, absl::StrCat(kExportStagingPrefix, "XXXXXX"));
    if (::mkdtemp(path.data()) == nullptr) {
      return ErrnoError("cannot create a staging directory in", dir);
    }
    absl::StatusOr<std::unique_ptr<FileLock>> lock = FileLock::AcquireDirectory(
        path, LockMode::kExclusive, absl::ZeroDuration());
    if (!lock.ok()) {
      ::rmdir(path.c_str());
      return lock.status();
    }
    return std::unique_ptr<Staging>(new Staging(path, *std::move(lock)));
  }
  ~Staging() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string File(absl::string_view name) const {
    return JoinPath(path_, name);
  }

 private:
  Staging(std::string path, std::unique_ptr<FileLock> lock)
      : path_(std::move(path)), lock_(std::move(lock)) {}
  const std::string path_;
  const std::unique_ptr<FileLock> lock_;  // Released after the removal.
};

// Removes what earlier exports into `dir` left: staging directories no live
// process holds (a killed export's), and, when no export is in progress,
// step 1's copies and files named as shards are (model-0000i-of-0000n,
// what save_pretrained also removes) that the live export does not use.
// Best effort: what cannot be removed stays for the next export.
void RemoveLeftovers(const std::string& dir) {
  std::error_code error;
  std::vector<std::string> staging, unused;
  for (std::filesystem::directory_iterator it(dir, error), end;
       !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (absl::StartsWith(name, kExportStagingPrefix)) staging.push_back(name);
    if (absl::StartsWith(name, kExportBackupPrefix) || IsShardName(name)) {
      unused.push_back(name);
    }
  }
  bool busy = false;
  for (const std::string& name : staging) {
    const std::string path = JoinPath(dir, name);
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    absl::StatusOr<std::unique_ptr<FileLock>> lock = FileLock::AcquireDirectory(
        path, LockMode::kExclusive, absl::ZeroDuration());
    if (!lock.ok()) {
      busy = true;
      continue;
    }
    std::filesystem::remove_all(path, error);
  }
  if (busy || unused.empty()) return;
  const LiveExport live = ReadLiveExport(dir);
  // Without an entry point nothing here is known to be an export's.
  if (!live.single && !live.index_live()) return;
  for (const std::string& name : unused) {
    if (!(live.index_live() && live.lists(name))) {
      (void)RemoveFileIfPresent(JoinPath(dir, name));
    }
  }
}

// Steps 1 to 4 of the header, for `files` (FileNames) written into
// `staging`.
absl::Status Commit(const std::string& dir, const Staging& staging,
                    const std::vector<std::string>& files) {
  const bool sharded = files.size() > 2;
  auto in_dir = [&](absl::string_view name) { return JoinPath(dir, name); };
  auto backup = [](const std::string& shard) {
    return absl::StrCat(kExportBackupPrefix, shard);
  };
  const std::string index_path = in_dir(kPretrainedIndexName);
  const std::string config_path = in_dir(kPretrainedConfigName);
  const LiveExport live = ReadLiveExport(dir);
  // The new shards (none for one file: model.safetensors is the entry).
  std::vector<std::string> shards;
  if (sharded) shards.assign(files.begin(), files.end() - 2);

  // What has been done, for undoing it before the switch.
  std::vector<std::string> protected_shards, moved;
  bool index_protected = false, index_placed = false, config_placed = false;
  const bool had_config = Exists(config_path);
  auto undo = [&](const absl::Status& why) {
    for (const std::string& name : moved) ::unlink(in_dir(name).c_str());
    if (config_placed) {
      if (had_config) {
        ::rename(staging.File(kPreviousConfig).c_str(), config_path.c_str());
      } else {
        ::unlink(config_path.c_str());
      }
    }
    if (index_protected) {
      for (const std::string& shard : protected_shards) {
        const std::string copy = in_dir(backup(shard));
        // A rename between two links of one file does nothing: the copy
        // then goes by unlink.
        ::rename(copy.c_str(), in_dir(shard).c_str());
        struct stat a, b;
        if (::lstat(copy.c_str(), &a) == 0 &&
            ::lstat(in_dir(shard).c_str(), &b) == 0 && a.st_ino == b.st_ino &&
            a.st_dev == b.st_dev) {
          ::unlink(copy.c_str());
        }
      }
      ::rename(staging.File(kPreviousIndex).c_str(), index_path.c_str());
    } else {
      for (const std::string& shard : protected_shards) {
        ::unlink(in_dir(backup(shard)).c_str());
      }
      if (index_placed) ::unlink(index_path.c_str());
    }
    (void)FsyncDir(dir);
    return why;
  };

  // 1. The live index's shards that new ones would replace get a second
  // name, and the live index names those instead.
  if (sharded && live.index_live()) {
    for (const std::string& shard : shards) {
      if (live.lists(shard)) protected_shards.push_back(shard);
    }
  }
  if (!protected_shards.empty()) {
    for (const std::string& shard : protected_shards) {
      if (absl::Status s = LinkOrCopy(in_dir(shard), in_dir(backup(shard)));
          !s.ok()) {
        return undo(s);
      }
    }
    OrderedJson index = *live.index_json;
    for (auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string()) continue;
      const std::string shard = file.get<std::string>();
      for (const std::string& p : protected_shards) {
        if (p == shard) file = backup(shard);
      }
    }
    absl::Status written = Injected(kProtectedIndex);
    if (written.ok()) {
      written = WriteText(staging.File(kProtectedIndex), index.dump(2) + "\n");
    }
    if (!written.ok()) return undo(written);
    if (absl::Status s = LinkOrCopy(index_path, staging.File(kPreviousIndex));
        !s.ok()) {
      return undo(s);
    }
    if (absl::Status s = Rename(staging.File(kProtectedIndex), index_path);
        !s.ok()) {
      return undo(s);
    }
    index_protected = true;
    if (absl::Status s = FsyncDir(dir); !s.ok()) return undo(s);
  }

  // 2. The new shards, then config.json.
  for (const std::string& shard : shards) {
    if (absl::Status s = Rename(staging.File(shard), in_dir(shard)); !s.ok()) {
      return undo(s);
    }
    moved.push_back(shard);
  }
  if (had_config) {
    if (absl::Status s = LinkOrCopy(config_path, staging.File(kPreviousConfig));
        !s.ok()) {
      return undo(s);
    }
  }
  if (absl::Status s = Rename(staging.File(kPretrainedConfigName), config_path);
      !s.ok()) {
    return undo(s);
  }
  config_placed = true;
  if (absl::Status s = FsyncDir(dir); !s.ok()) return undo(s);

  // 3. The switch.
  if (sharded) {
    if (absl::Status s = Rename(staging.File(kPretrainedIndexName), index_path);
        !s.ok()) {
      return undo(s);
    }
    // Over a protected index, undo puts back the original.
    index_placed = true;
    if (live.single) {
      const std::string single = in_dir(kPretrainedWeightsName);
      if (absl::Status s = Injected(single); !s.ok()) return undo(s);
      if (::unlink(single.c_str()) != 0 && errno != ENOENT) {
        return undo(ErrnoError("removing", single));
      }
    }
  } else {
    if (absl::Status s = Rename(staging.File(kPretrainedWeightsName),
                                in_dir(kPretrainedWeightsName));
        !s.ok()) {
      return undo(s);
    }
  }
  CZ_RETURN_IF_ERROR(FsyncDir(dir));

  // 4. What only the earlier export used.
  const std::set<std::string> keep(files.begin(), files.end());
  // The earlier index goes last: until then it names what is left to
  // remove, for the next export should this one fail here.
  std::vector<std::string> stale;
  for (const std::string& shard : protected_shards) {
    stale.push_back(backup(shard));
  }
  for (const std::string& shard : live.shards) {
    if (!keep.count(shard) && absl::EndsWith(shard, ".safetensors")) {
      stale.push_back(shard);
    }
  }
  if (!sharded) stale.push_back(kPretrainedIndexName);
  for (const std::string& name : stale) {
    absl::Status s = Injected(name);
    if (s.ok()) s = RemoveFileIfPresent(in_dir(name));
    if (!s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("the export into ", dir,
                                 " is complete, but what only the earlier "
                                 "export used could not be removed: ",
                                 s.message()));
    }
  }
  return FsyncDir(dir);
}

absl::Status WriteInto(
    const std::string& dir, const std::string& config_json,
    const std::vector<std::pair<std::string, Tensor>>& tensors,
    int64_t shard_bytes) {
  CZ_RETURN_IF_ERROR(CreateDirectories(dir));
  RemoveLeftovers(dir);
  std::vector<int64_t> bytes;
  int64_t total = 0;
  for (const auto& [name, tensor] : tensors) {
    bytes.push_back(static_cast<int64_t>(tensor.nbytes()));
    total += bytes.back();
  }
  const std::vector<std::vector<size_t>> groups =
      ShardGroups(bytes, shard_bytes);
  const std::vector<std::string> files = FileNames(groups.size());
  CZ_RETURN_IF_ERROR(CheckCanWritePretrainedDirectory(dir, files));
  CZ_ASSIGN_OR_RETURN(const std::unique_ptr<Staging> staging,
                      Staging::Create(dir));
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  OrderedJson map = OrderedJson::object();
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<std::pair<std::string, Tensor>> shard;
    for (size_t i : groups[g]) {
      shard.push_back(tensors[i]);
      map[tensors[i].first] = files[g];
    }
    CZ_RETURN_IF_ERROR(
        WriteSafetensors(staging->File(files[g]), shard, metadata));
  }
  if (groups.size() > 1) {
    OrderedJson index;
    index["metadata"]["total_size"] = total;
    index["weight_map"] = std::move(map);
    CZ_RETURN_IF_ERROR(
        WriteText(staging->File(kPretrainedIndexName), index.dump(2) + "\n"));
  }
  CZ_RETURN_IF_ERROR(
      WriteText(staging->File(kPretrainedConfigName), config_json + "\n"));
  return Commit(dir, *staging, files);
}

}  // namespace

std::vector<std::string> PretrainedExportFiles(
    const std::vector<int64_t>& tensor_bytes, int64_t shard_bytes) {
  return FileNames(ShardGroups(tensor_bytes, shard_bytes).size());
}

absl::Status CheckCanWritePretrainedDirectory(
    const std::string& dir, const std::vector<std::string>& files) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) return ErrnoError("cannot stat", dir);
    // Nothing there yet: its parent must take a new directory, whether the
    // path ends in a slash ("out/") or not.
    return CheckCanCreateFile(dir.substr(0, dir.find_last_not_of('/') + 1));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " is not a directory"));
  }
  // A probe file shows that files can be created there.
  CZ_RETURN_IF_ERROR(CheckCanCreateFile(JoinPath(dir, kPretrainedConfigName)));
  std::set<std::string> names(files.begin(), files.end());
  names.insert(kPretrainedWeightsName);
  names.insert(kPretrainedIndexName);
  for (const std::string& name : names) {
    CZ_RETURN_IF_ERROR(CheckCanReplaceOrRemove(JoinPath(dir, name)));
  }
  // The earlier export's shards, which step 4 removes (what is not a file
  // stays: it is never removed).
  for (const std::string& shard : ReadLiveExport(dir).shards) {
    if (names.count(shard) || !absl::EndsWith(shard, ".safetensors")) continue;
    const absl::Status s = CheckCanReplaceOrRemove(JoinPath(dir, shard));
    if (!s.ok() && !absl::IsFailedPrecondition(s)) return s;
  }
  return absl::OkStatus();
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
  struct stat st;
  const bool existed = ::stat(dir.c_str(), &st) == 0;
  const absl::Status written =
      WriteInto(dir, config_json, tensors, shard_bytes);
  // A directory made for an export that failed goes again (rmdir: only if
  // nothing else went into it meanwhile).
  if (!written.ok() && !existed) ::rmdir(dir.c_str());
  return written;
}

namespace pretrained_export_internal {

void FailCommitOperationForTesting(int n) { g_fail_at.store(n); }

}  // namespace pretrained_export_internal
}  // namespace chunkzero
