// The train job's enumerated flags, as the command line spells them:
//
//   CZ_ASSIGN_OR_RETURN(o.storage, ParseStorageFlag("sharded"));
//   PrecisionFlagValue(DType::kBF16);  // "bf16"
//
// Parse* return InvalidArgument naming the flag and the values it takes;
// train_main parses every flag once, and nothing below it compares strings.
#ifndef CHUNKZERO_TOOLS_TRAIN_TRAIN_FLAGS_H_
#define CHUNKZERO_TOOLS_TRAIN_TRAIN_FLAGS_H_

#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "chunk/chunk_layout.h"
#include "engine/activation_checkpointing.h"
#include "io/nvme/io_engine.h"
#include "optim/zero_optimizer.h"
#include "tensor/dtype.h"
#include "tools/train/train_options.h"

namespace chunkzero {

// --backend: "inproc", "gloo" or "nccl" (which PlanTraining accepts only
// with --device=cuda).
[[nodiscard]] absl::StatusOr<Backend> ParseBackendFlag(absl::string_view value);
absl::string_view BackendFlagValue(Backend backend);

// --device: "cpu" or "cuda".
[[nodiscard]] absl::StatusOr<ComputeDevice> ParseDeviceFlag(
    absl::string_view value);
absl::string_view DeviceFlagValue(ComputeDevice device);

// --precision: "fp32", "fp16" or "bf16" (the compute dtype).
[[nodiscard]] absl::StatusOr<DType> ParsePrecisionFlag(absl::string_view value);
// "fp32", "fp16" or "bf16"; "" for a dtype that is not a compute dtype.
absl::string_view PrecisionFlagValue(DType dtype);

// --storage: "replicated", "owner" or "sharded" (ChunkLayoutName).
[[nodiscard]] absl::StatusOr<ChunkLayout> ParseStorageFlag(
    absl::string_view value);

// --optimizer: "adamw", "adam" or "sgd" (OptimizerKindName).
[[nodiscard]] absl::StatusOr<OptimizerKind> ParseOptimizerFlag(
    absl::string_view value);

// --offload: "none", "optimizer", "params" or "auto".
[[nodiscard]] absl::StatusOr<OffloadPolicy> ParseOffloadFlag(
    absl::string_view value);
absl::string_view OffloadFlagValue(OffloadPolicy offload);

// --nvme_io: auto (io_uring, else threads), io_uring or threads.
[[nodiscard]] absl::StatusOr<IoEngineKind> ParseNvmeIoFlag(
    absl::string_view value);
absl::string_view NvmeIoFlagValue(IoEngineKind kind);

// --param_order: "layers" or "record".
// --token_dtype: "u16" or "u32".
[[nodiscard]] absl::StatusOr<TokenDType> ParseTokenDTypeFlag(
    absl::string_view value);
absl::string_view TokenDTypeFlagValue(TokenDType dtype);

[[nodiscard]] absl::StatusOr<ParamOrder> ParseParamOrderFlag(
    absl::string_view value);
absl::string_view ParamOrderFlagValue(ParamOrder order);

// --activation_checkpointing: "none", "layers" or "every:K".
[[nodiscard]] absl::StatusOr<ActivationCheckpointing>
ParseActivationCheckpointingFlag(absl::string_view value);

// A byte count for --`flag`: digits, then optionally a binary unit (K, M,
// G, T or KiB, MiB, GiB, TiB: powers of 1024), e.g. "1073741824", "512MiB",
// "4G". InvalidArgument naming the flag for anything else, or a count past
// 2^63 - 1.
[[nodiscard]] absl::StatusOr<int64_t> ParseByteCountFlag(
    absl::string_view flag, absl::string_view value);

// The names of the flags a command line sets (argv[0] is the program):
// "--name=v", "--name v", "-name", "--noname" (a false bool) each give
// "name"; nothing after "--" counts; the flags in each --flagfile count as
// given on the command line, as Abseil reads them. What the environment
// may fill in depends on it (launch_environment.h).
std::set<std::string> FlagsOnCommandLine(int argc, const char* const* argv);

}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_TRAIN_TRAIN_FLAGS_H_
