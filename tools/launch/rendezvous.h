// Where a job's ranks meet (launcher.h): the rendezvous the launcher names
// for them, the fresh directory of a one-host job, and node 0's Redis
// server for --store=redis.
#ifndef CHUNKZERO_TOOLS_LAUNCH_RENDEZVOUS_H_
#define CHUNKZERO_TOOLS_LAUNCH_RENDEZVOUS_H_

#include <string>

#include "absl/status/statusor.h"
#include "base/redis_server.h"
#include "tools/launch/launch_options.h"

namespace chunkzero {
namespace launch {

// The rendezvous the ranks get when the options name one: --rendezvous, or
// redis://MASTER_ADDR:MASTER_PORT/RUN_ID or tcp://MASTER_ADDR:MASTER_PORT
// (an IPv6 address bracketed); "" for a fresh directory.
std::string NamedRendezvous(const LaunchOptions& options);

// A fresh directory (mkdtemp under $TMPDIR, else /tmp) for the ranks of one
// host to meet in; the caller removes it.
absl::StatusOr<std::string> MakeRendezvousDir();

// Node 0's Redis server for --store=redis, on MASTER_PORT: started (and
// answering) before the ranks, stopped after them (SIGTERM, SIGKILL 2 s
// later) when destroyed, and gone with the launcher (PR_SET_PDEATHSIG) if
// that dies first. It listens only on the address the ranks dial and
// loopback (for the readiness check): the store has no password, so it
// listens no wider than it must. Errors are Unavailable, start with
// "--store=redis: " and name the port or options.redis_server.
absl::StatusOr<RedisServerProcess> StartRedisStore(
    const LaunchOptions& options);

}  // namespace launch
}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_LAUNCH_RENDEZVOUS_H_
