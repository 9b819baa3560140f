#include "checkpoint/testing/edit_manifest.h"

#include "absl/strings/str_cat.h"
#include "base/crc32c.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "checkpoint/checkpoint.h"

namespace chunkzero {
namespace checkpoint_testing {

absl::Status EditManifest(
    const std::string& dir,
    const std::function<void(CheckpointManifest&)>& edit) {
  const std::string path = JoinPath(dir, kCheckpointManifestName);
  CZ_ASSIGN_OR_RETURN(const std::string bytes, ReadFileToString(path));
  ManifestFile file;
  CheckpointManifest manifest;
  if (!file.ParseFromString(bytes) ||
      !manifest.ParseFromString(file.manifest())) {
    return absl::DataLossError(absl::StrCat(path, " does not parse"));
  }
  edit(manifest);
  manifest.SerializeToString(file.mutable_manifest());
  file.set_crc32c(Crc32c(file.manifest().data(), file.manifest().size()));
  const std::string edited = file.SerializeAsString();
  return WriteFileAtomically(path, [&](int fd, const std::string& tmp) {
    return WriteAll(fd, edited.data(), edited.size(), tmp);
  });
}

}  // namespace checkpoint_testing
}  // namespace chunkzero
