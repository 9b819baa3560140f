#include "io/pretrained/pretrained_directory.h"

#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp",
                                       "/pretrained_directory_test/", name);
  fs::remove_all(dir);
  return dir;
}

std::vector<std::pair<std::string, Tensor>> Tensors() {
  // 16, 24 and 4 bytes.
  return {{"a", *Tensor::FromFloats({1, 2, 3, 4}, {2, 2})},
          {"b", *Tensor::FromFloats({5, 6, 7, 8, 9, 10}, {6})},
          {"c", *Tensor::FromFloats({11, 12}, {2}, DType::kBF16)}};
}

TEST(PretrainedDirectory, OneFileRoundTrips) {
  const std::string dir = TestDir("one");
  ASSERT_TRUE(
      WritePretrainedDirectory(dir, R"({"model_type": "toy"})", Tensors(), 1000)
          .ok());
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors.index.json"));
  absl::StatusOr<PretrainedDirectory> read = PretrainedDirectory::Read(dir);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->config()["model_type"], "toy");
  EXPECT_EQ(read->num_files(), 1);
  EXPECT_THAT(read->names(), ElementsAre("a", "b", "c"));
  EXPECT_EQ(*read->dtype("c"), "BF16");
  EXPECT_THAT(*read->Get("b")->ToFloats(), ElementsAre(5, 6, 7, 8, 9, 10));
}

TEST(PretrainedDirectory, ShardsSplitAtTheSizeAndReplaceASingleFile) {
  const std::string dir = TestDir("shards");
  ASSERT_TRUE(WritePretrainedDirectory(dir, "{}", Tensors(), 1000).ok());
  // 40 bytes a shard: a and b (16 + 24), then c.
  ASSERT_TRUE(WritePretrainedDirectory(dir, "{}", Tensors(), 40).ok());
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors"));
  EXPECT_TRUE(fs::exists(dir + "/model-00001-of-00002.safetensors"));
  EXPECT_TRUE(fs::exists(dir + "/model-00002-of-00002.safetensors"));
  const std::string index =
      *ReadFileToString(dir + "/model.safetensors.index.json");
  EXPECT_THAT(index, HasSubstr(R"("total_size": 44)"));
  EXPECT_THAT(index, HasSubstr(R"("c": "model-00002-of-00002.safetensors")"));
  absl::StatusOr<PretrainedDirectory> read = PretrainedDirectory::Read(dir);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->num_files(), 2);
  EXPECT_THAT(*read->Get("c")->ToFloats(), ElementsAre(11, 12));
  EXPECT_THAT(*read->Get("a")->ToFloats(), ElementsAre(1, 2, 3, 4));
  // A tensor larger than a shard is alone in its own: three shards.
  ASSERT_TRUE(WritePretrainedDirectory(dir, "{}", Tensors(), 10).ok());
  EXPECT_EQ(PretrainedDirectory::Read(dir)->num_files(), 3);
}

// Files in the directory after an export: the shards of an earlier export
// that the new one does not overwrite are gone, staging leaves nothing,
// and what else the directory holds (a tokenizer) stays.
std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    out.push_back(entry.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(PretrainedDirectory, AReExportRemovesTheEarlierShardsOnly) {
  const std::string dir = TestDir("again");
  ASSERT_TRUE(WritePretrainedDirectory(dir, "{}", Tensors(), 10).ok());
  ASSERT_TRUE(
      WriteFileAtomically(dir + "/tokenizer.json", [](int fd,
                                                      const std::string& p) {
        return WriteAll(fd, "{}", 2, p);
      }).ok());
  ASSERT_TRUE(WritePretrainedDirectory(dir, "{}", Tensors(), 40).ok());
  EXPECT_THAT(Entries(dir),
              ElementsAre("config.json", "model-00001-of-00002.safetensors",
                          "model-00002-of-00002.safetensors",
                          "model.safetensors.index.json", "tokenizer.json"));
  ASSERT_TRUE(WritePretrainedDirectory(dir, "{}", Tensors(), 1000).ok());
  EXPECT_THAT(Entries(dir), ElementsAre("config.json", "model.safetensors",
                                        "tokenizer.json"));
}

// A write that fails half way (here: past the process's file size limit,
// as a full disk would) leaves the earlier export as it was.
TEST(PretrainedDirectory, AFailedExportLeavesTheEarlierOneWhole) {
  const std::string dir = TestDir("failed");
  ASSERT_TRUE(WritePretrainedDirectory(dir, R"({"v": 1})", Tensors(), 40).ok());
  const std::vector<std::string> before = Entries(dir);
  std::vector<std::pair<std::string, Tensor>> large = Tensors();
  large.push_back(
      {"d", *Tensor::FromFloats(std::vector<float>(1024, 1.f), {1024})});
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 2048;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const absl::Status s =
      WritePretrainedDirectory(dir, R"({"v": 2})", large, 40);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("model-00003-of-00003.safetensors"));
  EXPECT_EQ(Entries(dir), before);
  absl::StatusOr<PretrainedDirectory> read = PretrainedDirectory::Read(dir);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->config()["v"], 1);
  EXPECT_THAT(read->names(), ElementsAre("a", "b", "c"));
}

TEST(PretrainedDirectory, RefusesWhatDoesNotAgreeNamingTheFile) {
  const std::string dir = TestDir("bad");
  EXPECT_EQ(PretrainedDirectory::Read(dir).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(WritePretrainedDirectory(dir, "{}", Tensors(), 40).ok());
  const std::string index_path = dir + "/model.safetensors.index.json";
  ASSERT_TRUE(
      WriteFileAtomically(index_path, [](int fd, const std::string& p) {
        const std::string text =
            R"({"weight_map": {"a": "model-00001-of-00002.safetensors",)"
            R"( "c": "model-00001-of-00002.safetensors"}})";
        return WriteAll(fd, text.data(), text.size(), p);
      }).ok());
  absl::Status s = PretrainedDirectory::Read(dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("model-00001-of-00002.safetensors holds "
                                     "tensor 'b', which "
                                     "model.safetensors.index.json does not "
                                     "list"));
  fs::remove(index_path);
  s = PretrainedDirectory::Read(dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("has neither model.safetensors nor"));
  fs::remove(dir + "/config.json");
  EXPECT_THAT(PretrainedDirectory::Read(dir).status().message(),
              HasSubstr("config.json"));
  ASSERT_TRUE(
      WriteFileAtomically(dir + "/config.json", [](int fd,
                                                   const std::string& p) {
        return WriteAll(fd, "[1]", 3, p);
      }).ok());
  EXPECT_THAT(PretrainedDirectory::Read(dir).status().message(),
              HasSubstr("config.json: not a JSON object"));
  EXPECT_EQ(WritePretrainedDirectory(dir, "{}", Tensors(), 0).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace chunkzero
