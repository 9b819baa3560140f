#include "io/pretrained/pretrained_export.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/file_lock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/pretrained/pretrained_directory.h"

namespace chunkzero {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp",
                                       "/pretrained_export_test/", name);
  fs::remove_all(dir);
  fs::create_directories(fs::path(dir).parent_path());
  return dir;
}

// 16, 24 and 4 bytes; every value is `version` + its index.
std::vector<std::pair<std::string, Tensor>> Tensors(float version = 0) {
  auto values = [&](int n, int from) {
    std::vector<float> v;
    for (int i = 0; i < n; ++i)
      v.push_back(version + static_cast<float>(from + i));
    return v;
  };
  return {{"a", *Tensor::FromFloats(values(4, 1), {2, 2})},
          {"b", *Tensor::FromFloats(values(6, 5), {6})},
          {"c", *Tensor::FromFloats(values(2, 11), {2}, DType::kBF16)}};
}

std::string Config(int version) {
  return absl::StrCat("{\"version\": ", version, "}");
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    out.push_back(entry.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void WriteText(const std::string& path, const std::string& text) {
  ASSERT_TRUE(WriteFileAtomically(path, [&](int fd, const std::string& p) {
                return WriteAll(fd, text.data(), text.size(), p);
              }).ok());
}

// The version a directory holds, wholly: its config's and every tensor's
// (-1 when it does not load or mixes versions).
int LoadedVersion(const std::string& dir) {
  absl::StatusOr<PretrainedDirectory> read = PretrainedDirectory::Read(dir);
  if (!read.ok() || read->names() != std::vector<std::string>{"a", "b", "c"}) {
    return -1;
  }
  const int version = read->config().value("version", -1);
  for (const auto& [name, tensor] : Tensors(static_cast<float>(version))) {
    absl::StatusOr<Tensor> got = read->Get(name);
    if (!got.ok() || *got->ToFloats() != *tensor.ToFloats()) return -1;
  }
  return version;
}

TEST(PretrainedExportFiles, NamesWhatTheExportCreates) {
  EXPECT_THAT(PretrainedExportFiles({16, 24, 4}, 1000),
              ElementsAre("model.safetensors", "config.json"));
  EXPECT_THAT(PretrainedExportFiles({16, 24, 4}, 40),
              ElementsAre("model-00001-of-00002.safetensors",
                          "model-00002-of-00002.safetensors",
                          "model.safetensors.index.json", "config.json"));
  EXPECT_EQ(PretrainedExportFiles({16, 24, 4}, 10).size(), 5u);
  // What the writer then writes.
  const std::string dir = TestDir("names");
  ASSERT_TRUE(WritePretrainedDirectory(dir, "{}", Tensors(), 40).ok());
  EXPECT_THAT(Entries(dir),
              ElementsAre("config.json", "model-00001-of-00002.safetensors",
                          "model-00002-of-00002.safetensors",
                          "model.safetensors.index.json"));
}

// Files in the directory after an export: the shards of an earlier export
// that the new one does not overwrite are gone, staging leaves nothing,
// and what else the directory holds (a tokenizer) stays.
TEST(WritePretrainedDirectory, AReExportRemovesTheEarlierShardsOnly) {
  const std::string dir = TestDir("again");
  ASSERT_TRUE(WritePretrainedDirectory(dir, Config(1), Tensors(1), 10).ok());
  WriteText(dir + "/tokenizer.json", "{}");
  ASSERT_TRUE(WritePretrainedDirectory(dir, Config(2), Tensors(2), 40).ok());
  EXPECT_THAT(Entries(dir),
              ElementsAre("config.json", "model-00001-of-00002.safetensors",
                          "model-00002-of-00002.safetensors",
                          "model.safetensors.index.json", "tokenizer.json"));
  EXPECT_EQ(LoadedVersion(dir), 2);
  ASSERT_TRUE(WritePretrainedDirectory(dir, Config(3), Tensors(3), 40).ok());
  EXPECT_EQ(LoadedVersion(dir), 3);
  ASSERT_TRUE(WritePretrainedDirectory(dir, Config(4), Tensors(4), 1000).ok());
  EXPECT_THAT(Entries(dir), ElementsAre("config.json", "model.safetensors",
                                        "tokenizer.json"));
  EXPECT_EQ(LoadedVersion(dir), 4);
  ASSERT_TRUE(WritePretrainedDirectory(dir, Config(5), Tensors(5), 40).ok());
  EXPECT_EQ(LoadedVersion(dir), 5);
  EXPECT_EQ(Entries(dir).size(), 5u);
}

// A write that fails half way (here: past the process's file size limit,
// as a full disk would) leaves the earlier export as it was, and a
// directory made for it goes again.
TEST(WritePretrainedDirectory, AFailedWriteLeavesTheEarlierExportWhole) {
  const std::string dir = TestDir("failed");
  ASSERT_TRUE(WritePretrainedDirectory(dir, Config(1), Tensors(1), 40).ok());
  const std::vector<std::string> before = Entries(dir);
  std::vector<std::pair<std::string, Tensor>> large = Tensors(2);
  large.push_back(
      {"d", *Tensor::FromFloats(std::vector<float>(1024, 1.f), {1024})});
  const std::string fresh = TestDir("fresh") + "/new/export";
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 2048;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const absl::Status s = WritePretrainedDirectory(dir, Config(2), large, 40);
  const absl::Status into_fresh =
      WritePretrainedDirectory(fresh, Config(2), large, 40);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("model-00003-of-00003.safetensors"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("File too large"));
  EXPECT_EQ(Entries(dir), before);
  EXPECT_EQ(LoadedVersion(dir), 1);
  ASSERT_FALSE(into_fresh.ok());
  EXPECT_FALSE(fs::exists(fresh));
}

// The adversary's case: a directory stands where a new shard goes. Found
// before anything is written or removed.
TEST(WritePretrainedDirectory, ANameThatCannotBeReplacedIsFoundFirst) {
  const std::string dir = TestDir("blocked");
  ASSERT_TRUE(WritePretrainedDirectory(dir, Config(1), Tensors(1), 1000).ok());
  fs::create_directories(dir + "/model-00001-of-00002.safetensors");
  const std::vector<std::string> files = PretrainedExportFiles({16, 24, 4}, 40);
  const absl::Status check = CheckCanWritePretrainedDirectory(dir, files);
  EXPECT_EQ(check.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(check.message(),
            dir +
                "/model-00001-of-00002.safetensors is a directory, not a "
                "regular file; refusing to replace or remove it");
  const absl::Status s =
      WritePretrainedDirectory(dir, Config(2), Tensors(2), 40);
  EXPECT_EQ(s, check);
  EXPECT_EQ(LoadedVersion(dir), 1);
  EXPECT_THAT(Entries(dir),
              ElementsAre("config.json", "model-00001-of-00002.safetensors",
                          "model.safetensors"));
}

// One rule for a directory export and a file export: a FIFO is never
// replaced or unlinked, wherever it stands.
TEST(WritePretrainedDirectory, AFifoIsRefusedAndKept) {
  const std::string dir = TestDir("fifo");
  fs::create_directories(dir);
  ASSERT_EQ(::mkfifo((dir + "/model.safetensors").c_str(), 0644), 0);
  const absl::Status s = WritePretrainedDirectory(dir, "{}", Tensors(), 40);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), dir +
                             "/model.safetensors is a FIFO (named pipe), not "
                             "a regular file; refusing to replace or remove "
                             "it");
  struct stat st;
  ASSERT_EQ(::lstat((dir + "/model.safetensors").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_THAT(Entries(dir), ElementsAre("model.safetensors"));
}

TEST(CheckCanWritePretrainedDirectory, WritesNothing) {
  const std::string parent = TestDir("check");
  fs::create_directories(parent);
  const std::vector<std::string> files = PretrainedExportFiles({4}, 40);
  EXPECT_TRUE(CheckCanWritePretrainedDirectory(parent + "/new/", files).ok());
  EXPECT_FALSE(fs::exists(parent + "/new"));
  EXPECT_TRUE(Entries(parent).empty());
  EXPECT_EQ(CheckCanWritePretrainedDirectory(parent + "/a/b", files).code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(CheckCanWritePretrainedDirectory(parent, files).ok());
  EXPECT_TRUE(Entries(parent).empty());
}

// Every operation of the commit fails in turn, for each pair of earlier and
// new layouts: after each failure the directory loads, whole, as the
// earlier export or (once the entry point has switched) as the new one;
// what stays beside it is the earlier or the new export's files, and the
// next export leaves nothing of the failed one.
TEST(WritePretrainedDirectory, EveryFailureLeavesOneWholeExport) {
  const struct {
    int64_t before, after;  // Shard sizes: 1000 one file, 40 two, 10 three.
  } layouts[] = {{40, 40},     {10, 10}, {1000, 40}, {40, 1000},
                 {1000, 1000}, {10, 40}, {40, 10}};
  for (const auto& layout : layouts) {
    // Plain copies: clang (C++17) does not capture structured bindings.
    const int64_t before = layout.before, after = layout.after;
    int switched_at = 0;
    for (int n = 1; n < 30; ++n) {
      SCOPED_TRACE(absl::StrCat(before, " -> ", after, ", operation ", n));
      const std::string dir = TestDir("every");
      ASSERT_TRUE(
          WritePretrainedDirectory(dir, Config(1), Tensors(1), before).ok());
      WriteText(dir + "/tokenizer.json", "{}");
      pretrained_export_internal::FailCommitOperationForTesting(n);
      const absl::Status s =
          WritePretrainedDirectory(dir, Config(2), Tensors(2), after);
      pretrained_export_internal::FailCommitOperationForTesting(0);
      const int loaded = LoadedVersion(dir);
      if (s.ok()) {
        EXPECT_EQ(loaded, 2);
        EXPECT_GT(n, switched_at);
        break;  // Fewer operations than n: done with this layout.
      }
      EXPECT_THAT(std::string(s.message()), HasSubstr("injected failure"));
      ASSERT_TRUE(loaded == 1 || loaded == 2) << loaded;
      if (loaded == 1) {
        EXPECT_EQ(switched_at, 0) << "the old export came back";
        EXPECT_EQ(Entries(dir), [&] {
          const std::string clean = TestDir("clean");
          EXPECT_TRUE(
              WritePretrainedDirectory(clean, Config(1), Tensors(1), before)
                  .ok());
          WriteText(clean + "/tokenizer.json", "{}");
          return Entries(clean);
        }());
      } else if (switched_at == 0) {
        switched_at = n;
      }
      for (const std::string& name : Entries(dir)) {
        EXPECT_FALSE(absl::StartsWith(name, kExportStagingPrefix)) << name;
      }
      // The next export tidies what the failed one left.
      ASSERT_TRUE(
          WritePretrainedDirectory(dir, Config(3), Tensors(3), after).ok());
      EXPECT_EQ(LoadedVersion(dir), 3);
      const std::string clean = TestDir("clean");
      ASSERT_TRUE(
          WritePretrainedDirectory(clean, Config(3), Tensors(3), after).ok());
      WriteText(clean + "/tokenizer.json", "{}");
      EXPECT_EQ(Entries(dir), Entries(clean));
    }
  }
}

// A killed export's staging directory (nobody holds its lock) goes with the
// next export; one a live export holds stays.
TEST(WritePretrainedDirectory, RemovesStagingThatNoProcessHolds) {
  const std::string dir = TestDir("staging");
  fs::create_directories(dir + "/.chunkzero-export-killed");
  WriteText(dir + "/.chunkzero-export-killed/model-00001-of-00002.safetensors",
            std::string(4096, 'x'));
  fs::create_directories(dir + "/.chunkzero-export-live");
  absl::StatusOr<std::unique_ptr<FileLock>> live =
      FileLock::AcquireDirectory(dir + "/.chunkzero-export-live",
                                 LockMode::kExclusive, absl::ZeroDuration());
  ASSERT_TRUE(live.ok()) << live.status();
  // A copy from step 1 that the live index no longer names.
  WriteText(dir + "/.chunkzero-old-model-00001-of-00002.safetensors", "x");
  ASSERT_TRUE(WritePretrainedDirectory(dir, Config(1), Tensors(1), 40).ok());
  EXPECT_THAT(Entries(dir),
              ElementsAre(".chunkzero-export-live",
                          ".chunkzero-old-model-00001-of-00002.safetensors",
                          "config.json", "model-00001-of-00002.safetensors",
                          "model-00002-of-00002.safetensors",
                          "model.safetensors.index.json"));
  live->reset();
  ASSERT_TRUE(WritePretrainedDirectory(dir, Config(2), Tensors(2), 40).ok());
  EXPECT_THAT(Entries(dir),
              ElementsAre("config.json", "model-00001-of-00002.safetensors",
                          "model-00002-of-00002.safetensors",
                          "model.safetensors.index.json"));
  EXPECT_EQ(LoadedVersion(dir), 2);
}

}  // namespace
}  // namespace chunkzero
