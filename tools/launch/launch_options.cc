#include "tools/launch/launch_options.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"

namespace chunkzero {
namespace launch {
namespace {

// The flags the launcher gives every rank (StartRank): among ARGS they
// would come later and win, and the ranks would not meet.
struct OwnedFlag {
  absl::string_view name;
  absl::string_view refusal;
};
constexpr OwnedFlag kOwnedFlags[] = {
    {"rank",
     "--rank is set by the launcher (--node_rank x NPROC + the local rank); "
     "drop it from the rank arguments"},
    {"world_size",
     "--world_size is set by the launcher (NPROC x --nnodes); drop it from "
     "the rank arguments"},
    {"rendezvous",
     "--rendezvous is set by the launcher; drop it from the rank arguments "
     "(the launcher's own --rendezvous, before NPROC, chooses it)"},
};

// The name of the flag `arg` gives as Abseil's and gflags' parsers read it
// (-NAME, --NAME, -NAME=VALUE, --NAME=VALUE); "" if it is no flag.
absl::string_view FlagName(absl::string_view arg) {
  if (!absl::ConsumePrefix(&arg, "-")) return "";
  absl::ConsumePrefix(&arg, "-");
  return arg.substr(0, arg.find('='));
}

// InvalidArgument naming the first of kOwnedFlags among the rank arguments,
// in any spelling; what follows "--" is not flags.
absl::Status CheckRankArgs(absl::Span<const std::string> args) {
  for (const std::string& arg : args) {
    if (arg == "--") break;
    const absl::string_view name = FlagName(arg);
    for (const OwnedFlag& owned : kOwnedFlags) {
      if (name == owned.name) {
        return absl::InvalidArgumentError(owned.refusal);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckHosts(const LaunchOptions& o) {
  if (o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--node_rank=", o.node_rank,
                     " is not in [0, --nnodes=", o.nnodes, ")"));
  }
  if (!o.master_addr.empty() && !o.rendezvous.empty()) {
    return absl::InvalidArgumentError(
        "--master_addr and --rendezvous both say where the ranks meet: give "
        "one");
  }
  if (o.nnodes > 1 && o.master_addr.empty() && o.rendezvous.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nnodes=", o.nnodes,
        ": the hosts need a place to meet: give --master_addr (node 0's "
        "address) or --rendezvous"));
  }
  if (o.store == StoreKind::kRedis && o.master_addr.empty()) {
    return absl::InvalidArgumentError(
        "--store=redis: node 0 starts redis-server at --master_addr and "
        "--master_port; give --master_addr");
  }
  if (int64_t{o.nnodes} * o.nproc > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nnodes=", o.nnodes, " hosts of ", o.nproc,
        " ranks each is more than the 1048576 ranks a job may have"));
  }
  if (o.master_port < 1 || o.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--master_port=", o.master_port, " is not in [1, 65535]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LaunchOptions> ParseLaunchArgs(
    absl::Span<const std::string> args) {
  LaunchOptions options;
  size_t i = 0;
  // "--name=N" with N a whole number in [min, max].
  auto whole = [](absl::string_view flag, absl::string_view value, int min,
                  int max, int* out) -> absl::Status {
    if (!absl::SimpleAtoi(value, out) || *out < min || *out > max) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, " takes a whole number from ", min, " to ",
                       max, ", not \"", value, "\""));
    }
    return absl::OkStatus();
  };
  for (; i < args.size() && absl::StartsWith(args[i], "--"); ++i) {
    absl::string_view value = args[i];
    if (absl::ConsumePrefix(&value, "--nnodes=")) {
      CZ_RETURN_IF_ERROR(whole("nnodes", value, 1, 65536, &options.nnodes));
      continue;
    }
    if (absl::ConsumePrefix(&value, "--node_rank=")) {
      CZ_RETURN_IF_ERROR(
          whole("node_rank", value, 0, 65535, &options.node_rank));
      continue;
    }
    if (absl::ConsumePrefix(&value, "--master_port=")) {
      CZ_RETURN_IF_ERROR(
          whole("master_port", value, 1, 65535, &options.master_port));
      continue;
    }
    if (absl::ConsumePrefix(&value, "--master_addr=")) {
      options.master_addr = std::string(value);
      if (value.empty()) {
        return absl::InvalidArgumentError("--master_addr is empty");
      }
      continue;
    }
    if (absl::ConsumePrefix(&value, "--store=")) {
      if (value == "tcp") {
        options.store = StoreKind::kTcp;
      } else if (value == "redis") {
        options.store = StoreKind::kRedis;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("--store takes tcp or redis, not \"", value, "\""));
      }
      continue;
    }
    if (absl::ConsumePrefix(&value, "--run_id=")) {
      if (value.empty() || value.find_first_of(" \t\n/") != value.npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("--run_id takes a name without spaces or '/', not \"",
                         value, "\""));
      }
      options.run_id = std::string(value);
      continue;
    }
    if (absl::ConsumePrefix(&value, "--rendezvous=")) {
      if (value.empty()) {
        return absl::InvalidArgumentError("--rendezvous is empty");
      }
      options.rendezvous = std::string(value);
      continue;
    }
    if (absl::ConsumePrefix(&value, "--redis_server=")) {
      options.redis_server = std::string(value);
      continue;
    }
    if (absl::ConsumePrefix(&value, "--grace_period_s=")) {
      double seconds = 0;
      if (!absl::SimpleAtod(value, &seconds) || !(seconds >= 0) ||
          seconds > 86400) {
        return absl::InvalidArgumentError(
            absl::StrCat("--grace_period_s takes seconds from 0 to 86400, "
                         "not \"",
                         value, "\""));
      }
      options.grace_period =
          std::chrono::milliseconds(std::llround(seconds * 1000));
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown flag ", args[i], " (the launcher's flags come before NPROC)"));
  }
  if (i == args.size()) return absl::InvalidArgumentError("missing NPROC");
  if (!absl::SimpleAtoi(args[i], &options.nproc) || options.nproc < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NPROC must be a whole number >= 1, not \"", args[i], "\""));
  }
  ++i;
  if (i == args.size() || args[i].empty()) {
    return absl::InvalidArgumentError("missing BINARY");
  }
  options.binary = args[i++];
  options.args.assign(args.begin() + i, args.end());
  CZ_RETURN_IF_ERROR(CheckRankArgs(options.args));
  CZ_RETURN_IF_ERROR(CheckHosts(options));
  return options;
}

}  // namespace launch
}  // namespace chunkzero
