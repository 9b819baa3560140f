#include "tools/train/train_flags.h"

#include "absl/status/status.h"
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
  for (OffloadPolicy p : {OffloadPolicy::kNone, OffloadPolicy::kOptimizer}) {
    EXPECT_EQ(*ParseOffloadFlag(OffloadFlagValue(p)), p);
  }
  EXPECT_EQ(*ParseStorageFlag("owner"), ChunkLayout::kOwner);
  EXPECT_EQ(*ParseOptimizerFlag("sgd"), OptimizerKind::kSgd);
}

TEST(TrainFlags, SpellingsAreTheCommandLines) {
  EXPECT_EQ(BackendFlagValue(Backend::kInProcess), "inproc");
  EXPECT_EQ(PrecisionFlagValue(DType::kBF16), "bf16");
  EXPECT_EQ(PrecisionFlagValue(DType::kI64), "");
  EXPECT_EQ(OffloadFlagValue(OffloadPolicy::kOptimizer), "optimizer");
}

TEST(TrainFlags, UnknownValuesNameTheFlagAndWhatItTakes) {
  struct Case {
    absl::Status status;
    const char* message;
  };
  for (const Case& c : {
           Case{ParseBackendFlag("mpi").status(),
                "--backend=mpi: want inproc or gloo"},
           Case{ParsePrecisionFlag("fp8").status(),
                "--precision=fp8 is not one of fp32, fp16, bf16"},
           Case{ParseOffloadFlag("params").status(),
                "--offload=params: want none or optimizer"},
           Case{ParseStorageFlag("x").status(), "--storage: "},
           Case{ParseOptimizerFlag("").status(), "--optimizer: "},
       }) {
    EXPECT_EQ(c.status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(c.status.message()), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace chunkzero
