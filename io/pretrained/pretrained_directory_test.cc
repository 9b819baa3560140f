#include "io/pretrained/pretrained_directory.h"

#include <sys/resource.h>
#include <sys/stat.h>

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
#include "io/pretrained/pretrained_export.h"

namespace chunkzero {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
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
  EXPECT_THAT(std::string(PretrainedDirectory::Read(dir).status().message()),
              HasSubstr("config.json: not a JSON object but an array (3 "
                        "bytes)"));
  EXPECT_EQ(WritePretrainedDirectory(dir, "{}", Tensors(), 0).code(),
            absl::StatusCode::kInvalidArgument);
}

void WriteText(const std::string& path, const std::string& text) {
  ASSERT_TRUE(WriteFileAtomically(path, [&](int fd, const std::string& p) {
                return WriteAll(fd, text.data(), text.size(), p);
              }).ok());
}

// NaN, 1e999 and a nesting 100,000 deep: what and where, never a crash or a
// message that quotes the file whole.
TEST(PretrainedDirectory, BadConfigJsonSaysWhatAndWhere) {
  const std::string dir = TestDir("bad_json");
  ASSERT_TRUE(WritePretrainedDirectory(dir, "{}", Tensors(), 1000).ok());
  const struct {
    std::string text;
    std::string says;
  } cases[] = {
      {"{\"n_layer\": NaN}",
       "config.json: not valid JSON at byte 12 (line 1, column 13): syntax "
       "error while parsing value - invalid literal"},
      {"{\"rope_theta\": 1e999}",
       "config.json: not valid JSON at byte 19 (line 1, column 20): number "
       "overflow parsing '1e999'"},
      {"{\"model_type\": " + std::string(100000, '[') +
           std::string(100000, ']') + "}",
       "config.json: not valid JSON: nested too deeply (more than 32 levels "
       "of arrays and objects)"},
      {"{\"a\": 1, \"a\": 2}",
       "config.json: not valid JSON: an object lists the key \"a\" twice"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.says);
    WriteText(dir + "/config.json", c.text);
    const absl::Status s = PretrainedDirectory::Read(dir).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(s.message()),
                ::testing::StartsWith(dir + "/" + c.says));
  }
}

TEST(PretrainedDirectory, ShardNamesThatAreNoFileAreRefused) {
  for (const std::string& shard :
       {std::string("a\\u0000b.safetensors"), std::string("../x.safetensors"),
        std::string(".."), std::string("")}) {
    SCOPED_TRACE(shard);
    const absl::StatusOr<WeightIndex> index = ParseWeightIndex(
        "{\"weight_map\": {\"t\": \"" + shard + "\"}}", "i.json");
    ASSERT_FALSE(index.ok());
    EXPECT_EQ(index.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(index.status().message()),
                HasSubstr("is not a file in the directory"));
  }
  // An embedded NUL would have been cut to "a" at the file system.
  EXPECT_EQ(
      ParseWeightIndex(R"({"weight_map": {"t": "a\u0000b.safetensors"}})",
                       "i.json")
          .status()
          .message(),
      "i.json: shard 'a\\x00\\x62.safetensors' of 't' is not a file in the "
      "directory");
  // Long names are cut (found by the fuzzer: a 4 KiB tensor name of \f
  // and a 4 KiB shard name made a message of 33 KiB).
  std::string name_json;
  for (int i = 0; i < 4098; ++i) name_json += "\\f";
  const std::string long_shard = "x/" + std::string(4094, 'y');
  const absl::Status long_names =
      ParseWeightIndex(
          "{\"weight_map\": {\"" + name_json + "\": \"" + long_shard + "\"}}",
          "i.json")
          .status();
  EXPECT_EQ(long_names.code(), absl::StatusCode::kDataLoss);
  EXPECT_LT(long_names.message().size(), 1024u);
  EXPECT_THAT(std::string(long_names.message()),
              AllOf(HasSubstr("...' (a name of 4096 bytes) of '"),
                    HasSubstr("...' (a name of 4098 bytes) is not a file")));
  absl::StatusOr<WeightIndex> index = ParseWeightIndex(
      R"({"weight_map": {"x": "s2", "y": "s1", "z": "s2"}})", "i.json");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_THAT(index->shards, ElementsAre("s2", "s1"));
  EXPECT_EQ(index->shard_of.at("y"), "s1");
}

// Only what the index names is read: a FIFO and a directory named like
// shards beside it never block the import (nor are they opened).
TEST(PretrainedDirectory, ReadsOnlyWhatTheIndexNames) {
  const std::string dir = TestDir("unrelated");
  ASSERT_TRUE(WritePretrainedDirectory(dir, "{}", Tensors(), 40).ok());
  ASSERT_EQ(::mkfifo((dir + "/old.safetensors").c_str(), 0644), 0);
  fs::create_directories(dir + "/backup.safetensors");
  absl::StatusOr<PretrainedFiles> files = ListPretrainedFiles(dir);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->config, dir + "/config.json");
  EXPECT_EQ(files->index, dir + "/model.safetensors.index.json");
  EXPECT_THAT(files->weights,
              ElementsAre(dir + "/model-00001-of-00002.safetensors",
                          dir + "/model-00002-of-00002.safetensors"));
  absl::StatusOr<PretrainedDirectory> read = PretrainedDirectory::Read(dir);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(read->names(), ElementsAre("a", "b", "c"));
}

}  // namespace
}  // namespace chunkzero
