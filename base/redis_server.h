// RedisServerProcess: a redis-server child on a port the caller chooses,
// answering on 127.0.0.1 before Start returns and stopped when destroyed.
// The one way chunkzero starts redis-server: the launcher's --store=redis
// (tools/launch) and the tests' private servers (comm/testing) use it.
//
//   RedisServerOptions options;
//   options.port = 6400;
//   CZ_ASSIGN_OR_RETURN(RedisServerProcess redis,
//                       RedisServerProcess::Start(options));
//   ... redis://127.0.0.1:6400/job ...
//
// The server keeps nothing on disk (no RDB snapshots, no AOF), has no
// password and runs with protected mode off, so it listens on
// RedisServerOptions::bind and nowhere else. Its stdin, stdout and stderr
// are /dev/null, and it inherits no descriptor but those.
#ifndef CHUNKZERO_BASE_REDIS_SERVER_H_
#define CHUNKZERO_BASE_REDIS_SERVER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/subprocess.h"

namespace chunkzero {

struct RedisServerOptions {
  // A path, or a name looked up in $PATH.
  std::string binary = "redis-server";
  // In [1, 65535].
  int port = 0;
  // The addresses it listens on; readiness is checked on 127.0.0.1, so
  // that must be among them (or "localhost").
  std::vector<std::string> bind = {"127.0.0.1"};
  // How long it has to answer.
  absl::Duration start_timeout = absl::Seconds(10);
  // When stopped: SIGTERM (and SIGCONT, in case it is paused), and SIGKILL
  // if it has not exited this much later; zero: SIGKILL at once.
  absl::Duration stop_grace = absl::ZeroDuration();
  // As SpawnOptions: the server leads a process group of its own (signals
  // go to the group); it gets this signal when the thread that started it
  // exits (0: none; start it from a thread that outlives it).
  bool new_process_group = true;
  int parent_death_signal = 0;
  // Appended to the error when the server exits before answering: what the
  // caller's user should check (": is --master_addr an address of this
  // host?").
  std::string exit_hint;
};

class RedisServerProcess {
 public:
  // Starts the server and waits until it answers on 127.0.0.1:port.
  // InvalidArgument for a port out of range or no bind address; otherwise
  // every error is Unavailable and names the port or the binary:
  // "something already answers on port P" (checked first, else another
  // server would pass for this one), "cannot execute BINARY: ERRNO TEXT"
  // (with where to get redis-server when it is missing), "BINARY on port P
  // exited (exit code 1) before answering" + exit_hint, "BINARY did not
  // answer on port P within 10s" (it is then killed).
  [[nodiscard]] static absl::StatusOr<RedisServerProcess> Start(
      const RedisServerOptions& options);

  RedisServerProcess(RedisServerProcess&& other) = default;
  RedisServerProcess& operator=(RedisServerProcess&&) = delete;
  // Stop().
  ~RedisServerProcess();

  int port() const { return port_; }
  // -1 once stopped.
  pid_t pid() const { return process_.pid(); }
  bool running() const { return process_.running(); }

  // Stops it as RedisServerOptions::stop_grace says and reaps it; what it
  // held is gone. Does nothing if it has stopped already.
  void Stop();
  // SIGSTOP and SIGCONT: a server that stops answering without closing its
  // connections, for tests.
  absl::Status Pause();
  absl::Status Resume();

 private:
  RedisServerProcess(Subprocess process, int port, absl::Duration stop_grace)
      : process_(std::move(process)), port_(port), stop_grace_(stop_grace) {}
  absl::Status Send(int sig) const;

  Subprocess process_;
  int port_;
  absl::Duration stop_grace_;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_BASE_REDIS_SERVER_H_
