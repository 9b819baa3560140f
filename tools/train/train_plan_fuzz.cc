// Fuzzes the train job's option checks and planning (PlanTraining): any
// combination of flag values, input files included, must plan or fail with
// an error, quickly; never a crash, an overflow, an abort or a huge
// allocation. The memory the plan may use is capped at 8 MiB, so only small
// jobs get as far as building their parameter lists.
//
// Input: the fields of TrainOptions in order, decoded from the bytes (ints
// and doubles raw, so NaN, Inf and extremes occur; names and paths picked
// from short lists that include bad ones).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/file.h"
#include "models/gpt2/gpt_checkpoint.h"
#include "models/gpt2/gpt_model.h"
#include "tools/train/train_flags.h"
#include "tools/train/train_plan.h"

namespace {

using chunkzero::JoinPath;

// Reads fields from the input; past its end every read is zero.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  template <typename T>
  T Raw() {
    T value{};
    const size_t n = std::min(sizeof(T), size_ - std::min(size_, at_));
    if (n > 0) std::memcpy(&value, data_ + at_, n);
    at_ += sizeof(T);
    return value;
  }
  // A small int, often in a sensible range, sometimes any int.
  int Int() {
    const uint8_t kind = Raw<uint8_t>();
    if (kind < 200) return static_cast<int>(Raw<uint8_t>()) - 2;
    return Raw<int32_t>();
  }
  const std::string& Pick(const std::vector<std::string>& choices) {
    return choices[Raw<uint8_t>() % choices.size()];
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

// The flag's value, or (for a spelling train_main would refuse) an enum
// value outside the enum, as a library caller might pass: PlanTraining must
// refuse it without crashing.
template <typename T>
T ParsedOr(const absl::StatusOr<T>& parsed, int invalid) {
  return parsed.ok() ? *parsed : static_cast<T>(invalid);
}

struct Fixtures {
  std::string dir, text, tokens, init, missing;
};

const Fixtures& Files() {
  static const Fixtures* files = [] {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string dir =
        std::string(tmp != nullptr ? tmp : "/tmp") + "/plan_fuzz_XXXXXX";
    if (::mkdtemp(dir.data()) == nullptr) std::abort();
    auto* f = new Fixtures;
    f->dir = dir;
    f->text = JoinPath(dir, "text.txt");
    f->tokens = JoinPath(dir, "tokens.bin");
    f->init = JoinPath(dir, "init.safetensors");
    f->missing = JoinPath(dir, "missing");
    std::string text, tokens;
    for (int i = 0; i < 3000; ++i) {
      text += static_cast<char>('a' + i % 26);
      tokens += static_cast<char>(i % 251);
      tokens += '\0';
    }
    auto write = [](const std::string& path, const std::string& bytes) {
      if (!chunkzero::WriteFileAtomically(path, [&](int fd, const auto& p) {
             return chunkzero::WriteAll(fd, bytes.data(), bytes.size(), p);
           }).ok()) {
        std::abort();
      }
    };
    write(f->text, text);
    write(f->tokens, tokens);
    chunkzero::GptConfig config;
    config.layers = 1;
    config.d_model = 8;
    config.heads = 2;
    config.seq_len = 16;
    config.vocab = 256;
    auto model = chunkzero::GptModel::Create(config, 1);
    if (!model.ok() || !chunkzero::SaveGptModel(**model, f->init).ok()) {
      std::abort();
    }
    return f;
  }();
  return *files;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  Files();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Fixtures& files = Files();
  const std::vector<std::string> paths = {
      "",           "",         "",        files.text,
      files.tokens, files.init, files.dir, files.missing,
      "/dev/zero",  "/"};
  Reader in(data, size);
  chunkzero::TrainOptions o;
  o.world_size = in.Int();
  o.backend = ParsedOr(
      chunkzero::ParseBackendFlag(in.Pick({"inproc", "gloo", "nccl", "bogus"})),
      9);
  o.model.layers = in.Int();
  o.model.d_model = in.Int();
  o.model.heads = in.Int();
  o.model.seq_len = in.Int();
  o.seq_len = in.Int();
  o.model.vocab = in.Int();
  o.batch = in.Int();
  o.grad_accum = in.Int();
  o.steps = in.Int();
  o.lr = in.Raw<double>();
  o.min_lr = in.Raw<double>();
  o.warmup = in.Int();
  o.weight_decay = in.Raw<double>();
  o.optimizer = ParsedOr(
      chunkzero::ParseOptimizerFlag(in.Pick({"adamw", "adam", "sgd", ""})), 9);
  o.clip = in.Raw<double>();
  o.chunk_size = in.Raw<uint8_t>() < 128 ? in.Int() : in.Raw<int64_t>();
  o.storage = ParsedOr(chunkzero::ParseStorageFlag(
                           in.Pick({"sharded", "owner", "replicated", "x"})),
                       9);
  // A bad spelling becomes i64: a DType that is not a compute dtype.
  o.precision = ParsedOr(
      chunkzero::ParsePrecisionFlag(in.Pick({"fp16", "bf16", "fp32", "fp8"})),
      static_cast<int>(chunkzero::DType::kI64));
  o.offload = ParsedOr(chunkzero::ParseOffloadFlag(in.Pick(
                           {"none", "optimizer", "params", "auto", "disk"})),
                       9);
  o.param_order = ParsedOr(
      chunkzero::ParseParamOrderFlag(in.Pick({"layers", "record", "random"})),
      9);
  o.max_prefetch = in.Int();
  o.data = in.Pick(paths);
  o.tokens = in.Pick(paths);
  o.init = in.Pick(paths);
  o.resume = in.Pick({"", "", files.dir, files.missing});
  o.save_every = in.Int();
  o.save = in.Pick({"", files.dir});
  o.rank = in.Int();
  o.rendezvous = in.Pick({"", files.dir});
  o.comm_timeout_s = in.Raw<double>();
  o.memory_limit_bytes = 8 << 20;
  (void)chunkzero::PlanTraining(o);
  return 0;
}
