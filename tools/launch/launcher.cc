#include "tools/launch/launcher.h"

#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/redis_server.h"
#include "base/status_macros.h"
#include "base/subprocess.h"
#include "tools/launch/job.h"
#include "tools/launch/rendezvous.h"
#include "tools/launch/signal_scope.h"

namespace chunkzero {
namespace launch {

absl::StatusOr<int> RunJob(const LaunchOptions& options) {
  if (options.nproc < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("nproc must be >= 1, not ", options.nproc));
  }
  if (options.binary.empty()) {
    return absl::InvalidArgumentError("no binary to run");
  }
  if (options.grace_period.count() < 0) {
    return absl::InvalidArgumentError("the grace period is negative");
  }
  CZ_RETURN_IF_ERROR(CheckHosts(options));
  // Handlers first, so that no signal can end the launcher between creating
  // the rendezvous directory and removing it.
  SignalScope signals;
  CZ_RETURN_IF_ERROR(signals.Install());
  std::string dir;
  std::string rendezvous = NamedRendezvous(options);
  if (rendezvous.empty()) {
    CZ_ASSIGN_OR_RETURN(dir, MakeRendezvousDir());
    rendezvous = dir + "/store";
  }
  absl::Status status;
  int exit_code = 0;
  {
    // Node 0's Redis server, for the whole job.
    std::optional<RedisServerProcess> redis;
    if (options.store == StoreKind::kRedis && options.node_rank == 0 &&
        options.rendezvous.empty()) {
      absl::StatusOr<RedisServerProcess> started = StartRedisStore(options);
      if (started.ok()) {
        redis.emplace(*std::move(started));
      } else {
        status = started.status();
      }
    }
    if (status.ok()) {
      Job job(options, rendezvous, signals);
      status = job.Start();
      if (!status.ok()) job.Abort();
      const absl::Status waited = job.Wait();
      if (status.ok()) status = waited;
      exit_code = job.exit_code();
    }
  }
  if (!dir.empty()) {
    std::error_code error;
    std::filesystem::remove_all(dir, error);
    if (error) {
      const std::string report =
          absl::StrCat("launch: could not remove the rendezvous directory ",
                       dir, ": ", error.message(), "\n");
      WriteAll(options.report_fd, report.data(), report.size(), "the report")
          .IgnoreError();
    }
  }
  if (!status.ok()) return status;
  return exit_code;
}

int ExitCodeOf(int wait_status) { return ExitStatus{wait_status}.ShellCode(); }

std::string DescribeWaitStatus(int wait_status) {
  return ExitStatus{wait_status}.ToString();
}

}  // namespace launch
}  // namespace chunkzero
