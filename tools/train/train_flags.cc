#include "tools/train/train_flags.h"

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file.h"

namespace chunkzero {
namespace {

absl::Status Bad(absl::string_view flag, absl::string_view value,
                 absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", value, ": ", want));
}

}  // namespace

absl::StatusOr<Backend> ParseBackendFlag(absl::string_view value) {
  for (Backend b : {Backend::kInProcess, Backend::kGloo, Backend::kNccl}) {
    if (value == BackendFlagValue(b)) return b;
  }
  return Bad("backend", value, "want inproc, gloo or nccl");
}

absl::string_view BackendFlagValue(Backend backend) {
  switch (backend) {
    case Backend::kInProcess:
      return "inproc";
    case Backend::kGloo:
      return "gloo";
    case Backend::kNccl:
      return "nccl";
  }
  return "";
}

absl::StatusOr<ComputeDevice> ParseDeviceFlag(absl::string_view value) {
  for (ComputeDevice d : {ComputeDevice::kCpu, ComputeDevice::kCuda}) {
    if (value == DeviceFlagValue(d)) return d;
  }
  return Bad("device", value, "want cpu or cuda");
}

absl::string_view DeviceFlagValue(ComputeDevice device) {
  switch (device) {
    case ComputeDevice::kCpu:
      return "cpu";
    case ComputeDevice::kCuda:
      return "cuda";
  }
  return "";
}

absl::StatusOr<DType> ParsePrecisionFlag(absl::string_view value) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    if (value == PrecisionFlagValue(d)) return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--precision=", value, " is not one of fp32, fp16, bf16"));
}

absl::string_view PrecisionFlagValue(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "fp32";
    case DType::kF16:
      return "fp16";
    case DType::kBF16:
      return "bf16";
    default:
      return "";
  }
}

absl::StatusOr<ChunkLayout> ParseStorageFlag(absl::string_view value) {
  absl::StatusOr<ChunkLayout> layout = ParseChunkLayout(value);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--storage: ", layout.status().message()));
  }
  return *layout;
}

absl::StatusOr<OptimizerKind> ParseOptimizerFlag(absl::string_view value) {
  absl::StatusOr<OptimizerKind> kind = ParseOptimizerKind(value);
  if (!kind.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--optimizer: ", kind.status().message()));
  }
  return *kind;
}

absl::StatusOr<OffloadPolicy> ParseOffloadFlag(absl::string_view value) {
  for (OffloadPolicy p :
       {OffloadPolicy::kNone, OffloadPolicy::kOptimizer, OffloadPolicy::kParams,
        OffloadPolicy::kAuto, OffloadPolicy::kNvme}) {
    if (value == OffloadFlagValue(p)) return p;
  }
  return Bad("offload", value, "want none, optimizer, params, auto or nvme");
}

absl::string_view OffloadFlagValue(OffloadPolicy offload) {
  return OffloadPolicyName(offload);
}

absl::StatusOr<IoEngineKind> ParseNvmeIoFlag(absl::string_view value) {
  for (IoEngineKind k :
       {IoEngineKind::kAuto, IoEngineKind::kUring, IoEngineKind::kThreads}) {
    if (value == NvmeIoFlagValue(k)) return k;
  }
  return Bad("nvme_io", value, "want auto, io_uring or threads");
}

absl::string_view NvmeIoFlagValue(IoEngineKind kind) {
  switch (kind) {
    case IoEngineKind::kAuto:
      return "auto";
    case IoEngineKind::kUring:
      return "io_uring";
    case IoEngineKind::kThreads:
      return "threads";
  }
  return "";
}

absl::string_view TokenDTypeFlagValue(TokenDType dtype) {
  return dtype == TokenDType::kU32 ? "u32" : "u16";
}

absl::StatusOr<TokenDType> ParseTokenDTypeFlag(absl::string_view value) {
  for (TokenDType dtype : {TokenDType::kU16, TokenDType::kU32}) {
    if (value == TokenDTypeFlagValue(dtype)) return dtype;
  }
  return Bad("token_dtype", value, "want u16 or u32");
}

absl::StatusOr<ParamOrder> ParseParamOrderFlag(absl::string_view value) {
  for (ParamOrder order : {ParamOrder::kLayers, ParamOrder::kRecord}) {
    if (value == ParamOrderFlagValue(order)) return order;
  }
  return Bad("param_order", value, "want layers or record");
}

absl::StatusOr<ActivationCheckpointing> ParseActivationCheckpointingFlag(
    absl::string_view value) {
  absl::StatusOr<ActivationCheckpointing> parsed =
      ActivationCheckpointing::Parse(value);
  if (parsed.ok()) return parsed;
  return Bad("activation_checkpointing", value,
             "want none, layers or every:K (K a positive integer)");
}

absl::string_view ParamOrderFlagValue(ParamOrder order) {
  switch (order) {
    case ParamOrder::kLayers:
      return "layers";
    case ParamOrder::kRecord:
      return "record";
  }
  return "";
}

absl::StatusOr<int64_t> ParseByteCountFlag(absl::string_view flag,
                                           absl::string_view value) {
  const auto bad = [&] {
    return Bad(flag, value,
               "want a byte count such as 1073741824, 512MiB or 4GiB");
  };
  size_t digits = 0;
  while (digits < value.size() && absl::ascii_isdigit(value[digits])) {
    ++digits;
  }
  if (digits == 0) return bad();
  const absl::string_view unit = value.substr(digits);
  int shift = -1;
  const std::pair<absl::string_view, int> units[] = {
      {"", 0},   {"K", 10},   {"KiB", 10}, {"M", 20},  {"MiB", 20},
      {"G", 30}, {"GiB", 30}, {"T", 40},   {"TiB", 40}};
  for (const auto& [name, bits] : units) {
    if (unit == name) shift = bits;
  }
  if (shift < 0) return bad();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t count = 0;
  for (size_t i = 0; i < digits; ++i) {
    const int digit = value[i] - '0';
    if (count > (kMax - digit) / 10) return bad();
    count = count * 10 + digit;
  }
  if (count > (kMax >> shift)) return bad();
  return count << shift;
}

namespace {

// Files nested deeper than this are not read (a flagfile that names itself
// would otherwise never end); Abseil has read them all by now anyway.
constexpr int kMaxFlagfileDepth = 8;

void AddFlagNames(const std::vector<std::string>& args, int depth,
                  std::set<std::string>* given) {
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) {
      continue;
    }
    const size_t eq = arg.find('=');
    absl::string_view name = arg.substr(0, eq);
    if (name.empty()) continue;
    if (name == "flagfile") {
      // Its value: after '=' or the next argument; a comma-separated list
      // of files of one flag per line ('#' starts a comment line).
      absl::string_view files;
      if (eq != absl::string_view::npos) {
        files = arg.substr(eq + 1);
      } else if (i + 1 < args.size()) {
        files = args[++i];
      }
      if (depth >= kMaxFlagfileDepth) continue;
      for (absl::string_view file :
           absl::StrSplit(files, ',', absl::SkipEmpty())) {
        absl::StatusOr<std::string> text = ReadFileToString(std::string(file));
        if (!text.ok()) continue;  // Abseil has already refused it.
        std::vector<std::string> lines;
        for (absl::string_view line : absl::StrSplit(*text, '\n')) {
          line = absl::StripAsciiWhitespace(line);
          if (!line.empty() && line[0] != '#') lines.emplace_back(line);
        }
        AddFlagNames(lines, depth + 1, given);
      }
      continue;
    }
    given->emplace(name);
    // "--noname" sets the bool "name" (absl accepts both spellings, and a
    // flag named "no..." is not one of ours).
    if (absl::StartsWith(name, "no")) given->emplace(name.substr(2));
  }
}

}  // namespace

std::set<std::string> FlagsOnCommandLine(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  std::set<std::string> given;
  AddFlagNames(args, 0, &given);
  return given;
}

}  // namespace chunkzero
