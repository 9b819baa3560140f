#include "tools/launch/rendezvous.h"

#include <signal.h>
#include <stdlib.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "base/tcp_probe.h"

namespace chunkzero {
namespace launch {

std::string NamedRendezvous(const LaunchOptions& o) {
  if (!o.rendezvous.empty()) return o.rendezvous;
  if (o.master_addr.empty()) return "";
  const std::string host = absl::StrContains(o.master_addr, ':') &&
                                   !absl::StartsWith(o.master_addr, "[")
                               ? absl::StrCat("[", o.master_addr, "]")
                               : o.master_addr;
  if (o.store == StoreKind::kRedis) {
    return absl::StrCat("redis://", host, ":", o.master_port, "/", o.run_id);
  }
  return absl::StrCat("tcp://", host, ":", o.master_port);
}

absl::StatusOr<std::string> MakeRendezvousDir() {
  const char* tmpdir = std::getenv("TMPDIR");
  const std::string pattern =
      absl::StrCat(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp",
                   "/chunkzero-rendezvous.XXXXXX");
  std::string dir = pattern;
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("mkdtemp ", pattern));
  }
  return dir;
}

absl::StatusOr<RedisServerProcess> StartRedisStore(
    const LaunchOptions& options) {
  // RedisServerProcess::Start checks this too; here the message can say
  // which flag to change.
  if (AcceptsTcpOnLoopback(options.master_port)) {
    return absl::UnavailableError(
        absl::StrCat("--store=redis: something already answers on port ",
                     options.master_port,
                     " (another job's store?); choose another --master_port"));
  }
  const std::string bind_host(
      absl::StripSuffix(absl::StripPrefix(options.master_addr, "["), "]"));
  RedisServerOptions redis;
  redis.binary = options.redis_server;
  redis.port = options.master_port;
  redis.bind = {bind_host};
  if (bind_host != "127.0.0.1" && bind_host != "localhost") {
    redis.bind.push_back("127.0.0.1");
  }
  redis.stop_grace = absl::Seconds(2);
  redis.new_process_group = true;
  redis.parent_death_signal = SIGKILL;
  redis.exit_hint = absl::StrCat(
      ": is the port taken, or is --master_addr=", options.master_addr,
      " not an address of this host (node 0 runs the store)?");
  absl::StatusOr<RedisServerProcess> server = RedisServerProcess::Start(redis);
  if (!server.ok()) {
    return absl::UnavailableError(
        absl::StrCat("--store=redis: ", server.status().message()));
  }
  return server;
}

}  // namespace launch
}  // namespace chunkzero
