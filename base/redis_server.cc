#include "base/redis_server.h"

#include <signal.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/tcp_probe.h"

namespace chunkzero {

absl::StatusOr<RedisServerProcess> RedisServerProcess::Start(
    const RedisServerOptions& options) {
  if (options.port < 1 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "redis-server port ", options.port, " is not in [1, 65535]"));
  }
  if (options.bind.empty()) {
    return absl::InvalidArgumentError("redis-server needs a bind address");
  }
  const std::string port = absl::StrCat(options.port);
  if (AcceptsTcpOnLoopback(options.port)) {
    return absl::UnavailableError(
        absl::StrCat("something already answers on port ", port));
  }
  SpawnOptions spawn;
  spawn.argv = {options.binary,
                "--port",
                port,
                "--bind",
                absl::StrJoin(options.bind, " "),
                "--protected-mode",
                "no",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no"};
  spawn.stdin_from = Stdio::Null();
  spawn.stdout_to = Stdio::Null();
  spawn.stderr_to = Stdio::SameAsStdout();
  spawn.new_process_group = options.new_process_group;
  spawn.parent_death_signal = options.parent_death_signal;
  spawn.close_other_fds = true;
  absl::StatusOr<Subprocess> spawned = Subprocess::Spawn(spawn);
  if (!spawned.ok()) {
    const absl::Status& s = spawned.status();
    const bool missing = absl::IsNotFound(s) || absl::IsPermissionDenied(s);
    return absl::UnavailableError(absl::StrCat(
        s.message(),
        missing ? " (Debian's redis-server package; tools/setup.sh installs it)"
                : ""));
  }
  RedisServerProcess server(*std::move(spawned), options.port,
                            options.stop_grace);
  const absl::Time deadline = absl::Now() + options.start_timeout;
  while (!AcceptsTcpOnLoopback(options.port)) {
    absl::StatusOr<bool> exited = server.process_.HasExited();
    if (!exited.ok()) return absl::UnavailableError(exited.status().message());
    if (*exited) {
      absl::StatusOr<ExitStatus> end = server.process_.Reap();
      return absl::UnavailableError(absl::StrCat(
          options.binary, " on port ", port, " exited (",
          end.ok() ? end->ToString() : std::string(end.status().message()),
          ") before answering", options.exit_hint));
    }
    if (absl::Now() > deadline) {
      server.process_.Kill().IgnoreError();
      return absl::UnavailableError(absl::StrCat(
          options.binary, " did not answer on port ", port, " within ",
          absl::FormatDuration(options.start_timeout)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return server;
}

RedisServerProcess::~RedisServerProcess() { Stop(); }

absl::Status RedisServerProcess::Send(int sig) const {
  return process_.leads_group() ? process_.SignalGroup(sig)
                                : process_.Signal(sig);
}

void RedisServerProcess::Stop() {
  if (!process_.running()) return;
  if (stop_grace_ > absl::ZeroDuration()) {
    Send(SIGTERM).IgnoreError();
    Send(SIGCONT).IgnoreError();
    if (process_.Wait(stop_grace_).ok()) return;
  }
  process_.Kill().IgnoreError();
}

absl::Status RedisServerProcess::Pause() { return Send(SIGSTOP); }
absl::Status RedisServerProcess::Resume() { return Send(SIGCONT); }

}  // namespace chunkzero
