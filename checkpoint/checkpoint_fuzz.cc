// Fuzzes the checkpoint reader (manifest and shard files): any bytes must
// read as a checkpoint whose every piece was verified, or fail with an
// error; never a crash, a hang or an allocation the file cannot back.
//
// Input: a little-endian uint32 n, then n bytes of manifest.pb, then the
// bytes of every shard file the manifest names. The seeds are real
// checkpoints made by checkpoint_fuzz_seed.cc.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/file.h"
#include "checkpoint/checkpoint.h"

namespace {

const std::string& Dir() {
  static const std::string* dir = [] {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr ? tmp : "/tmp") + "/ckpt_fuzz_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    return new std::string(pattern);
  }();
  return *dir;
}

void Write(const std::string& path, const std::string& bytes) {
  const absl::Status written =
      chunkzero::WriteFileAtomically(path, [&](int fd, const std::string& tmp) {
        return chunkzero::WriteAll(fd, bytes.data(), bytes.size(), tmp);
      });
  if (!written.ok()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t n = 0;
  std::memcpy(&n, data, 4);
  if (n > size - 4) return 0;
  const std::string manifest(reinterpret_cast<const char*>(data) + 4, n);
  const std::string shard(reinterpret_cast<const char*>(data) + 4 + n,
                          size - 4 - n);
  const std::string& dir = Dir();
  Write(chunkzero::JoinPath(dir, chunkzero::kCheckpointManifestName), manifest);
  absl::StatusOr<std::vector<std::string>> files =
      chunkzero::CheckpointShardFiles(dir);
  if (!files.ok()) return 0;
  std::vector<std::string> written;
  for (const std::string& file : *files) {
    Write(chunkzero::JoinPath(dir, file), shard);
    written.push_back(chunkzero::JoinPath(dir, file));
  }
  (void)chunkzero::ReadCheckpointMeta(dir);
  absl::StatusOr<chunkzero::Checkpoint> ckpt = chunkzero::ReadCheckpoint(dir);
  if (ckpt.ok()) {
    for (const chunkzero::StatePiece& piece : ckpt->state.pieces) {
      // Every piece read lies in the file it came from.
      if (piece.values.nbytes() > shard.size()) __builtin_trap();
    }
  }
  for (const std::string& path : written) ::unlink(path.c_str());
  return 0;
}
