// A stand-in for a rank of a real job, for the launcher's tests. It prints
// `fake_rank R: ARGS...` (all its arguments) on stdout and then misbehaves
// as its flags ask. Flags it does not know (--backend, --rendezvous, ...)
// are ignored.
//
//   --rank=R          this process's rank (the launcher sets it)
//   --world_size=N    the number of ranks (the launcher sets it)
//   --ignore_term     ignore SIGTERM (before the pid file is written)
//   --print_env=NAME  print `fake_rank R: NAME=VALUE` (or `=(unset)`) after
//                     the arguments; repeatable
//   --probe_port=P    then print `fake_rank R: port P answers` or `port P
//                     refuses` (a TCP connect to 127.0.0.1:P)
//   --print_process   then print `fake_rank R: leads its process group: yes`
//                     (or `no`), `fake_rank R: stdin: N bytes` (what it reads
//                     from stdin until EOF, or until nothing comes for 1 s)
//                     and `fake_rank R: SIGTTOU: ignored` (or `default`,
//                     `handled`)
//   --pid_dir=D       first write this process's pid to D/rank<R>.pid
//   --await_all       with --pid_dir: wait (at most 10 s) until all N ranks
//                     have written their pid files
//   --stop_rank=R     rank R raises SIGSTOP
//   --fail_rank=R     rank R waits --fail_after_s=S seconds (default 0),
//                     writes --spew_bytes=B bytes (default 0) of numbered
//                     lines on stdout, says so on stderr and exits with
//                     --exit_code=C (default 1)
//   --signal_rank=R   rank R raises SIGUSR1
//   --sleep_s=S       then sleep S seconds (default 0) and exit 0
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "base/tcp_probe.h"

namespace {

void SleepSeconds(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// The bytes read from stdin until EOF, an error, or 1 s without any.
long StdinBytes() {
  long total = 0;
  char buffer[4096];
  while (true) {
    pollfd fd = {STDIN_FILENO, POLLIN, 0};
    if (poll(&fd, 1, 1000) <= 0) return total;
    const ssize_t n = read(STDIN_FILENO, buffer, sizeof(buffer));
    if (n <= 0) return total;
    total += n;
  }
}

const char* Disposition(int sig) {
  struct sigaction action {};
  sigaction(sig, nullptr, &action);
  if (action.sa_handler == SIG_IGN) return "ignored";
  if (action.sa_handler == SIG_DFL) return "default";
  return "handled";
}

}  // namespace

int main(int argc, char** argv) {
  int rank = -1;
  int world_size = 1;
  std::string pid_dir;
  bool ignore_term = false;
  bool await_all = false;
  int stop_rank = -1;
  int fail_rank = -1;
  int exit_code = 1;
  long spew_bytes = 0;
  double fail_after_s = 0;
  int signal_rank = -1;
  double sleep_s = 0;
  std::vector<std::string> print_env;
  int probe_port = -1;
  bool print_process = false;
  std::string all_args;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    absl::StrAppend(&all_args, " ", arg);
    bool ok = true;
    if (absl::ConsumePrefix(&arg, "--rank=")) {
      ok = absl::SimpleAtoi(arg, &rank);
    } else if (absl::ConsumePrefix(&arg, "--world_size=")) {
      ok = absl::SimpleAtoi(arg, &world_size);
    } else if (absl::ConsumePrefix(&arg, "--pid_dir=")) {
      pid_dir = std::string(arg);
    } else if (arg == "--ignore_term") {
      ignore_term = true;
    } else if (arg == "--await_all") {
      await_all = true;
    } else if (absl::ConsumePrefix(&arg, "--stop_rank=")) {
      ok = absl::SimpleAtoi(arg, &stop_rank);
    } else if (absl::ConsumePrefix(&arg, "--fail_rank=")) {
      ok = absl::SimpleAtoi(arg, &fail_rank);
    } else if (absl::ConsumePrefix(&arg, "--exit_code=")) {
      ok = absl::SimpleAtoi(arg, &exit_code);
    } else if (absl::ConsumePrefix(&arg, "--spew_bytes=")) {
      ok = absl::SimpleAtoi(arg, &spew_bytes);
    } else if (absl::ConsumePrefix(&arg, "--fail_after_s=")) {
      ok = absl::SimpleAtod(arg, &fail_after_s);
    } else if (absl::ConsumePrefix(&arg, "--signal_rank=")) {
      ok = absl::SimpleAtoi(arg, &signal_rank);
    } else if (absl::ConsumePrefix(&arg, "--print_env=")) {
      print_env.emplace_back(arg);
    } else if (absl::ConsumePrefix(&arg, "--probe_port=")) {
      ok = absl::SimpleAtoi(arg, &probe_port);
    } else if (arg == "--print_process") {
      print_process = true;
    } else if (absl::ConsumePrefix(&arg, "--sleep_s=")) {
      ok = absl::SimpleAtod(arg, &sleep_s);
    }
    if (!ok) {
      std::fprintf(stderr, "fake_rank: bad flag %s\n", argv[i]);
      return 64;
    }
  }

  if (ignore_term) signal(SIGTERM, SIG_IGN);
  if (!pid_dir.empty()) {
    // Written whole, then renamed, so that a reader never sees half of it.
    const std::string path = absl::StrCat(pid_dir, "/rank", rank, ".pid");
    {
      std::ofstream out(path + ".tmp");
      out << getpid() << "\n";
    }
    if (std::rename((path + ".tmp").c_str(), path.c_str()) != 0) {
      std::perror("fake_rank: rename");
      return 65;
    }
  }
  std::printf("fake_rank %d:%s\n", rank, all_args.c_str());
  for (const std::string& name : print_env) {
    const char* value = std::getenv(name.c_str());
    std::printf("fake_rank %d: %s=%s\n", rank, name.c_str(),
                value != nullptr ? value : "(unset)");
  }
  if (probe_port >= 0) {
    std::printf(
        "fake_rank %d: port %d %s\n", rank, probe_port,
        chunkzero::AcceptsTcpOnLoopback(probe_port) ? "answers" : "refuses");
  }
  if (print_process) {
    std::printf("fake_rank %d: leads its process group: %s\n", rank,
                getpgrp() == getpid() ? "yes" : "no");
    std::printf("fake_rank %d: stdin: %ld bytes\n", rank, StdinBytes());
    std::printf("fake_rank %d: SIGTTOU: %s\n", rank, Disposition(SIGTTOU));
  }
  std::fflush(stdout);

  if (await_all && !pid_dir.empty()) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (int r = 0; r < world_size; ++r) {
      while (!Exists(absl::StrCat(pid_dir, "/rank", r, ".pid")) &&
             std::chrono::steady_clock::now() < deadline) {
        SleepSeconds(0.01);
      }
    }
  }
  if (rank == stop_rank) raise(SIGSTOP);
  if (rank == fail_rank) {
    SleepSeconds(fail_after_s);
    for (long i = 0; i * 12 < spew_bytes; ++i) {
      // 12 bytes a line: "line 000000\n"; the last one may be cut short.
      char text[32];
      std::snprintf(text, sizeof(text), "line %06ld\n", i);
      std::fwrite(text, 1, std::min<long>(12, spew_bytes - i * 12), stdout);
    }
    std::fflush(stdout);
    std::fprintf(stderr, "fake_rank %d: exiting with code %d\n", rank,
                 exit_code);
    return exit_code;
  }
  if (rank == signal_rank) raise(SIGUSR1);
  SleepSeconds(sleep_s);
  return 0;
}
