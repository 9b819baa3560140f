// docs/ERRORS.md is checked against the train binary: every command in its
// tables runs (after a small model's flags, with $TMP a directory of
// fixtures made here) and must exit with the status and print the message
// the table gives; and every flag of the binary must appear in the file.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file.h"
#include "base/file_lock.h"
#include "checkpoint/testing/edit_manifest.h"
#include "gtest/gtest.h"
#include "io/safetensors/safetensors.h"
#include "models/gpt2/gpt_checkpoint.h"
#include "models/gpt2/gpt_model.h"
#include "nlohmann/json.hpp"
#include "tensor/tensor.h"
#include "tools/train/testing/run_train.h"

namespace chunkzero {
namespace {

namespace fs = std::filesystem;

constexpr char kBaseFlags[] =
    "--layers=1 --d_model=32 --heads=2 --seq_len=16 --steps=1 "
    "--world_size=2 --batch=2";

std::string Runfile(const std::string& path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/chunkzero/", path);
}

std::string Read(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

void Write(const std::string& path, const std::string& bytes) {
  ASSERT_TRUE(WriteFileAtomically(path, [&](int fd, const std::string& tmp) {
                return WriteAll(fd, bytes.data(), bytes.size(), tmp);
              }).ok());
}

using Outcome = train_testing::TrainOutcome;

// Runs the train binary with `args` and this process's environment plus
// `env` ("NAME=value").
Outcome RunTrain(const std::vector<std::string>& args,
                 const std::vector<std::string>& env, const std::string&) {
  train_testing::TrainRun run;
  run.args = args;
  run.env = env;
  return train_testing::RunTrainBinary(run);
}

struct Row {
  // The variables set before "train" ("RANK=0 train ..."), as NAME=value.
  std::vector<std::string> env;
  std::string command;  // Without the leading "train ".
  int exit_code = 0;
  std::string message;
};

// The table rows whose first cell is a `train ...` command, perhaps after
// environment assignments (`RANK=0 WORLD_SIZE=2 train ...`).
std::vector<Row> CommandRows(const std::string& doc) {
  const std::regex command(R"(^\| `((?:[A-Z][A-Z0-9_]*=\S* )*)train )");
  std::vector<Row> rows;
  for (absl::string_view line : absl::StrSplit(doc, '\n')) {
    std::cmatch match;
    if (!std::regex_search(line.begin(), line.end(), match, command)) continue;
    std::vector<std::string> cells = absl::StrSplit(line, " | ");
    if (cells.size() < 3) {
      ADD_FAILURE() << "a row of fewer than 3 cells: " << line;
      continue;
    }
    Row row;
    row.env = absl::StrSplit(match[1].str(), ' ', absl::SkipEmpty());
    row.command = cells[0].substr(match.length());
    row.command = std::string(absl::StripSuffix(row.command, "`"));
    EXPECT_TRUE(absl::SimpleAtoi(cells[1], &row.exit_code)) << line;
    row.message = std::string(absl::StripSuffix(
        absl::StripPrefix(absl::StripAsciiWhitespace(cells[2]), "`"), "`"));
    rows.push_back(row);
  }
  return rows;
}

// The fixtures the rows refer to as $TMP/...
void MakeFixtures(const std::string& tmp) {
  fs::create_directories(JoinPath(tmp, "dir"));
  fs::create_directories(JoinPath(tmp, "locked"));
  // Destinations that are not regular files.
  ASSERT_EQ(::mkfifo(JoinPath(tmp, "fifo").c_str(), 0644), 0);
  ASSERT_EQ(::symlink("/dev/null", JoinPath(tmp, "to_null").c_str()), 0);
  fs::create_directories(JoinPath(tmp, "fifo_save"));
  ASSERT_EQ(::mkfifo(JoinPath(tmp, "fifo_save/manifest.pb").c_str(), 0644), 0);
  std::string text;
  for (int i = 0; i < 2000; ++i) text += static_cast<char>('a' + i % 26);
  Write(JoinPath(tmp, "text.txt"), text);
  Write(JoinPath(tmp, "short.txt"), text.substr(0, 16));
  Write(JoinPath(tmp, "plain"), "x");
  Write(JoinPath(tmp, "odd.bin"), "abc");
  Write(JoinPath(tmp, "tokens.bin"), std::string("\x01\x00\x02\x00", 4));
  Write(JoinPath(tmp, "big_ids.bin"),
        std::string("\x00\x00\x01\x00\x2c\x01\x02\x00", 8));  // 0 1 300 2
  // Weights in F64, and an extra tensor whose name holds a newline and an
  // escape sequence.
  {
    GptConfig config;
    config.layers = 1;
    config.d_model = 32;
    config.heads = 2;
    config.seq_len = 16;
    config.vocab = 256;
    std::vector<std::pair<std::string, Tensor>> f64, badname;
    for (const auto& [param, shape] : GptParameterShapes(config)) {
      f64.emplace_back("transformer." + param,
                       *Tensor::Zeros(shape, DType::kF64));
      badname.emplace_back("transformer." + param,
                           *Tensor::Zeros(shape, DType::kF32));
    }
    badname.emplace_back("transformer.h.0.x\n\x1b[2J",
                         *Tensor::Zeros({4}, DType::kF32));
    ASSERT_TRUE(WriteSafetensors(JoinPath(tmp, "f64.safetensors"), f64).ok());
    ASSERT_TRUE(
        WriteSafetensors(JoinPath(tmp, "badname.safetensors"), badname).ok());
  }
  for (const auto& [name, positions, poison] :
       {std::tuple<std::string, int, bool>{"nan.safetensors", 16, true},
        {"p32.safetensors", 32, false}}) {
    GptConfig config;
    config.layers = 1;
    config.d_model = 32;
    config.heads = 2;
    config.seq_len = positions;
    config.vocab = 256;
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& [param, shape] : GptParameterShapes(config)) {
      Tensor t = *Tensor::Zeros(shape, DType::kF32);
      for (int64_t i = 0; i < t.numel(); ++i) {
        t.data<float>()[i] = 0.001f * static_cast<float>(i % 17);
      }
      if (poison && param == "h.0.mlp.c_fc.weight") {
        t.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
      }
      tensors.emplace_back("transformer." + param, std::move(t));
    }
    ASSERT_TRUE(WriteSafetensors(JoinPath(tmp, name), tensors).ok());
  }
  // Hugging Face directories of the base model, and hostile or unsupported
  // variants of it.
  {
    GptConfig config;
    config.layers = 1;
    config.d_model = 32;
    config.heads = 2;
    config.seq_len = 16;
    config.vocab = 256;
    std::map<std::string, Tensor> state;
    for (const auto& [param, shape] : GptParameterShapes(config)) {
      Tensor t = *Tensor::Zeros(shape, DType::kF32);
      for (int64_t i = 0; i < t.numel(); ++i) {
        t.data<float>()[i] = 0.001f * static_cast<float>(i % 13);
      }
      state[param] = std::move(t);
    }
    const std::string hf = JoinPath(tmp, "gpt2_hf");
    ASSERT_TRUE(WriteGptDirectory(hf, state, 2, 5'000'000'000).ok());
    const std::string config_json = Read(JoinPath(hf, "config.json"));
    auto variant = [&](const std::string& name, const std::string& config) {
      const std::string dir = JoinPath(tmp, name);
      fs::copy(hf, dir, fs::copy_options::recursive);
      Write(JoinPath(dir, "config.json"), config);
    };
    auto with_key = [&](const std::string& key, const std::string& value) {
      nlohmann::json j = nlohmann::json::parse(config_json);
      j.erase(key);
      std::string text = j.dump();
      text.insert(1, "\"" + key + "\": " + value + ", ");
      return text;
    };
    variant("deep_hf", with_key("model_type", std::string(100000, '[') +
                                                  std::string(100000, ']')));
    variant("nan_hf", R"({"model_type": "gpt2", "n_layer": NaN})");
    variant("overflow_hf", R"({"model_type": "gpt2", "n_layer": 1e999})");
    variant("untied_hf", with_key("tie_word_embeddings", "false"));
    variant("unscaled_hf", with_key("scale_attn_weights", "false"));
    // A saved untied model: its own lm_head beside wte.
    {
      const std::string dir = JoinPath(tmp, "head_hf");
      fs::copy(hf, dir, fs::copy_options::recursive);
      std::vector<std::pair<std::string, Tensor>> tensors;
      for (const auto& [param, shape] : GptParameterShapes(config)) {
        tensors.emplace_back("transformer." + param, state.at(param));
      }
      tensors.emplace_back("lm_head.weight",
                           *Tensor::Zeros({256, 32}, DType::kF32));
      ASSERT_TRUE(
          WriteSafetensors(JoinPath(dir, "model.safetensors"), tensors).ok());
    }
    // An index whose shard name hides a NUL.
    {
      const std::string dir = JoinPath(tmp, "nul_hf");
      fs::create_directories(dir);
      Write(JoinPath(dir, "config.json"), config_json);
      Write(JoinPath(dir, "model.safetensors.index.json"),
            R"({"weight_map": {"transformer.wte.weight": )"
            R"("model-00001-of-00002.safetensors\u0000x"}})");
    }
    // Export destinations: a directory where a shard goes, a FIFO where
    // the weights go.
    const std::string blocked = JoinPath(tmp, "blocked_export");
    fs::copy(hf, blocked, fs::copy_options::recursive);
    fs::create_directories(
        JoinPath(blocked, "model-00001-of-00002.safetensors"));
    fs::create_directories(JoinPath(tmp, "fifo_export"));
    ASSERT_EQ(
        ::mkfifo(JoinPath(tmp, "fifo_export/model.safetensors").c_str(), 0644),
        0);
  }
  // A checkpoint of the base model, and a damaged copy.
  const std::string ckpt = JoinPath(tmp, "ckpt");
  std::vector<std::string> save = absl::StrSplit(kBaseFlags, ' ');
  save.push_back("--save=" + ckpt);
  const Outcome saved = RunTrain(save, {}, tmp);
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  // A checkpoint whose manifest, checksum and all, holds a counter no save
  // writes.
  const std::string bad_counter = JoinPath(tmp, "bad_counter");
  fs::copy(ckpt, bad_counter, fs::copy_options::recursive);
  ASSERT_EQ(
      checkpoint_testing::EditManifest(
          bad_counter, [](CheckpointManifest& m) { m.set_iterations(-100); }),
      absl::OkStatus());
  const std::string damaged = JoinPath(tmp, "damaged");
  fs::copy(ckpt, damaged, fs::copy_options::recursive);
  for (const auto& entry : fs::directory_iterator(damaged)) {
    if (absl::StartsWith(entry.path().filename().string(), "shard-")) {
      fs::resize_file(entry.path(), fs::file_size(entry.path()) / 2);
    }
  }
}

TEST(ErrorsDoc, EveryCommandFailsAsDocumented) {
  const std::string tmp = JoinPath(std::getenv("TEST_TMPDIR"), "fixtures");
  fs::create_directories(tmp);
  MakeFixtures(tmp);
  // The lock another job would hold on --save=$TMP/locked.
  absl::StatusOr<std::unique_ptr<FileLock>> lock =
      FileLock::TryAcquire(JoinPath(tmp, "locked/lock"));
  ASSERT_TRUE(lock.ok()) << lock.status();

  const std::vector<Row> rows = CommandRows(Read(Runfile("docs/ERRORS.md")));
  EXPECT_GE(rows.size(), 50u) << "the tables were not parsed";
  for (const Row& row : rows) {
    SCOPED_TRACE(
        absl::StrCat(absl::StrJoin(row.env, " "), " train ", row.command));
    const std::string command =
        absl::StrReplaceAll(row.command, {{"$TMP", tmp}});
    std::vector<std::string> args = absl::StrSplit(kBaseFlags, ' ');
    for (absl::string_view arg :
         absl::StrSplit(command, ' ', absl::SkipEmpty())) {
      args.emplace_back(arg);
    }
    const Outcome out = RunTrain(args, row.env, tmp);
    EXPECT_EQ(out.exit_code, row.exit_code) << out.err;
    EXPECT_TRUE(absl::StrContains(
        out.err, absl::StrReplaceAll(row.message, {{"$TMP", tmp}})))
        << "documented: " << row.message << "\nprinted: " << out.err;
  }
}

TEST(ErrorsDoc, EveryFlagOfTheBinaryIsDocumented) {
  const std::string doc = Read(Runfile("docs/ERRORS.md"));
  const std::string main = Read(Runfile("tools/train/train_main.cc"));
  const std::regex flag(R"(ABSL_FLAG\(\s*[\w:]+\s*,\s*(\w+)\s*,)");
  int flags = 0;
  for (std::sregex_iterator it(main.begin(), main.end(), flag), end; it != end;
       ++it) {
    ++flags;
    const std::string name = (*it)[1].str();
    EXPECT_TRUE(absl::StrContains(doc, "--" + name))
        << "--" << name << " is a flag of the train binary but "
        << "docs/ERRORS.md never mentions it";
  }
  EXPECT_GE(flags, 30);
}

}  // namespace
}  // namespace chunkzero
