#include "tools/train/train_flags.h"

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::testing::HasSubstr;

TEST(TrainFlags, EveryValueRoundTrips) {
  for (Backend b : {Backend::kInProcess, Backend::kGloo, Backend::kNccl}) {
    EXPECT_EQ(*ParseBackendFlag(BackendFlagValue(b)), b);
  }
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    EXPECT_EQ(*ParsePrecisionFlag(PrecisionFlagValue(d)), d);
  }
  for (OffloadPolicy p :
       {OffloadPolicy::kNone, OffloadPolicy::kOptimizer, OffloadPolicy::kParams,
        OffloadPolicy::kAuto, OffloadPolicy::kNvme}) {
    EXPECT_EQ(*ParseOffloadFlag(OffloadFlagValue(p)), p);
  }
  for (IoEngineKind k :
       {IoEngineKind::kAuto, IoEngineKind::kUring, IoEngineKind::kThreads}) {
    EXPECT_EQ(*ParseNvmeIoFlag(NvmeIoFlagValue(k)), k);
  }
  for (ParamOrder o : {ParamOrder::kLayers, ParamOrder::kRecord}) {
    EXPECT_EQ(*ParseParamOrderFlag(ParamOrderFlagValue(o)), o);
  }
  for (const char* ac : {"none", "layers", "every:3"}) {
    EXPECT_EQ(ParseActivationCheckpointingFlag(ac)->ToString(), ac);
  }
  EXPECT_EQ(*ParseStorageFlag("owner"), ChunkLayout::kOwner);
  EXPECT_EQ(*ParseOptimizerFlag("sgd"), OptimizerKind::kSgd);
}

TEST(TrainFlags, SpellingsAreTheCommandLines) {
  EXPECT_EQ(BackendFlagValue(Backend::kInProcess), "inproc");
  EXPECT_EQ(PrecisionFlagValue(DType::kBF16), "bf16");
  EXPECT_EQ(PrecisionFlagValue(DType::kI64), "");
  EXPECT_EQ(OffloadFlagValue(OffloadPolicy::kOptimizer), "optimizer");
  EXPECT_EQ(ParamOrderFlagValue(ParamOrder::kRecord), "record");
  EXPECT_EQ(DeviceFlagValue(ComputeDevice::kCuda), "cuda");
  EXPECT_EQ(*ParseDeviceFlag("cpu"), ComputeDevice::kCpu);
}

TEST(TrainFlags, UnknownValuesNameTheFlagAndWhatItTakes) {
  struct Case {
    absl::Status status;
    const char* message;
  };
  for (const Case& c : {
           Case{ParseBackendFlag("mpi").status(),
                "--backend=mpi: want inproc, gloo or nccl"},
           Case{ParseDeviceFlag("tpu").status(),
                "--device=tpu: want cpu or cuda"},
           Case{ParsePrecisionFlag("fp8").status(),
                "--precision=fp8 is not one of fp32, fp16, bf16"},
           Case{ParseOffloadFlag("disk").status(),
                "--offload=disk: want none, optimizer, params, auto or nvme"},
           Case{ParseNvmeIoFlag("aio").status(),
                "--nvme_io=aio: want auto, io_uring or threads"},
           Case{ParseParamOrderFlag("random").status(),
                "--param_order=random: want layers or record"},
           Case{ParseActivationCheckpointingFlag("every:0").status(),
                "--activation_checkpointing=every:0: want none, layers or "
                "every:K (K a positive integer)"},
           Case{ParseActivationCheckpointingFlag("all").status(),
                "--activation_checkpointing=all: want none"},
           Case{ParseStorageFlag("x").status(), "--storage: "},
           Case{ParseOptimizerFlag("").status(), "--optimizer: "},
       }) {
    EXPECT_EQ(c.status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(c.status.message()), HasSubstr(c.message));
  }
}

TEST(TrainFlags, ByteCountsTakeBinaryUnits) {
  const struct {
    const char* text;
    int64_t bytes;
  } good[] = {{"0", 0},
              {"1073741824", int64_t{1} << 30},
              {"1K", 1024},
              {"512MiB", int64_t{512} << 20},
              {"4G", int64_t{4} << 30},
              {"3GiB", int64_t{3} << 30},
              {"8TiB", int64_t{8} << 40},
              {"8388607T", int64_t{8388607} << 40},
              {"9223372036854775807", INT64_MAX}};
  for (const auto& [text, bytes] : good) {
    absl::StatusOr<int64_t> parsed = ParseByteCountFlag("limit", text);
    ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status();
    EXPECT_EQ(*parsed, bytes) << text;
  }
  for (const char* text :
       {"", "abc", "-1", "1.5G", "12 MiB", "1GB", "MiB", "1k", "0x10",
        "9223372036854775808", "8388608T", "99999999999999999999"}) {
    const absl::Status status = ParseByteCountFlag("limit", text).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(status.message(),
              absl::StrCat("--limit=", text,
                           ": want a byte count such as 1073741824, 512MiB "
                           "or 4GiB"));
  }
}

}  // namespace
}  // namespace chunkzero

namespace chunkzero {
namespace {

TEST(FlagsOnCommandLine, NamesEachSpellingUpToTheSeparator) {
  const char* argv[] = {
      "train", "--world_size=6",      "-rank", "3",        "--backend",
      "gloo",  "--nofused_attention", "--",    "--steps=2"};
  EXPECT_EQ(FlagsOnCommandLine(9, argv),
            (std::set<std::string>{"world_size", "rank", "backend",
                                   "nofused_attention", "fused_attention"}));
  const char* none[] = {"train"};
  EXPECT_TRUE(FlagsOnCommandLine(1, none).empty());
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

TEST(FlagsOnCommandLine, CountsTheFlagsOfEachFlagfile) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string a = dir + "/a.flags", b = dir + "/b.flags",
                    c = dir + "/c.flags", self = dir + "/self.flags";
  WriteText(a, "# the cluster's\n--rank=2\n\n  --world_size=8  \n--flagfile=" +
                   c + "\n");
  WriteText(b, "--nofused_attention\n");
  WriteText(c, "--rendezvous=tcp://h:1\n");
  // A file that names itself is read a bounded number of times.
  WriteText(self, "--steps=3\n--flagfile=" + self + "\n");
  const std::string both = "--flagfile=" + a + "," + b;
  const char* args[] = {"train", both.c_str(), "--flagfile", self.c_str(),
                        "--seed=1"};
  EXPECT_EQ(FlagsOnCommandLine(5, args),
            (std::set<std::string>{"rank", "world_size", "rendezvous",
                                   "nofused_attention", "fused_attention",
                                   "steps", "seed"}));
  // A file that cannot be read adds nothing (Abseil has refused it).
  const std::string missing = "--flagfile=" + dir + "/missing.flags";
  const char* gone[] = {"train", missing.c_str(), "--rank=1"};
  EXPECT_EQ(FlagsOnCommandLine(3, gone), (std::set<std::string>{"rank"}));
}

}  // namespace
}  // namespace chunkzero
