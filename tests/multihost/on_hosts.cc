// on_hosts: runs one command on each of several hosts made of network
// namespaces on this machine (netns_testbed.h), so that a multi-host job
// can be tried without the hosts. Needs root.
//
//   on_hosts [--hosts=3] [--latency_ms=HOST:MS] -- COMMAND [ARGS...]
//
// Host i (0-based) runs COMMAND with "{host}" in its arguments replaced by
// i and "{addr0}" by host 0's address (10.233.0.1); host i's address is
// 10.233.0.(i+1). Each line a host prints is shown as "[host i] line". The
// exit status is the first failing host's (0 if none). The namespaces go
// when it ends; SIGINT, SIGTERM and SIGHUP end it too (130). The commands
// die with it even if it is SIGKILLed (PR_SET_PDEATHSIG; a launcher takes
// its ranks with it), and then the next on_hosts (any testbed's start)
// removes the namespaces and logs it left.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/multihost/netns_testbed.h"
#include "tests/multihost/subprocess.h"

namespace {

using chunkzero::multihost::Child;
using chunkzero::multihost::NetnsTestbed;
using chunkzero::multihost::ReadFileOrEmpty;
using chunkzero::multihost::TestbedOptions;

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

constexpr char kUsage[] =
    "usage: on_hosts [--hosts=N] [--latency_ms=HOST:MS] -- COMMAND "
    "[ARGS...]\n";

// Prints the complete lines of `log` past `*shown` bytes, prefixed.
void ShowNew(const std::string& log, int host, size_t* shown, bool all) {
  const std::string text = ReadFileOrEmpty(log);
  size_t end = all ? text.size() : text.rfind('\n');
  if (end == std::string::npos || end < *shown) return;
  if (!all) ++end;
  for (size_t start = *shown; start < end;) {
    size_t line_end = text.find('\n', start);
    if (line_end == std::string::npos || line_end >= end) line_end = end;
    std::printf("[host %d] %s\n", host,
                text.substr(start, line_end - start).c_str());
    start = line_end + 1;
  }
  *shown = end;
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  TestbedOptions options;
  int i = 1;
  for (; i < argc && std::string(argv[i]) != "--"; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--hosts=") &&
        absl::SimpleAtoi(arg, &options.hosts)) {
      continue;
    }
    if (absl::ConsumePrefix(&arg, "--latency_ms=")) {
      const size_t colon = arg.find(':');
      int host = 0, ms = 0;
      if (colon != absl::string_view::npos &&
          absl::SimpleAtoi(arg.substr(0, colon), &host) &&
          absl::SimpleAtoi(arg.substr(colon + 1), &ms)) {
        options.latency[host] = absl::Milliseconds(ms);
        continue;
      }
    }
    std::fprintf(stderr, "on_hosts: bad argument %s\n%s", argv[i], kUsage);
    return 2;
  }
  if (i + 1 >= argc) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  const std::string dir =
      n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string();
  options.delay_link = dir.substr(0, dir.rfind('/')) + "/delay_link";
  absl::StatusOr<std::unique_ptr<NetnsTestbed>> bed =
      NetnsTestbed::Create(options);
  if (!bed.ok()) {
    std::fprintf(stderr, "on_hosts: %s\n", bed.status().ToString().c_str());
    return 1;
  }
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  signal(SIGHUP, OnSignal);
  std::vector<Child> children;
  std::vector<std::string> logs;
  for (int host = 0; host < options.hosts; ++host) {
    std::vector<std::string> command;
    for (int a = i + 1; a < argc; ++a) {
      command.push_back(absl::StrReplaceAll(
          argv[a],
          {{"{host}", absl::StrCat(host)}, {"{addr0}", (*bed)->address(0)}}));
    }
    // Named after this process, so that the next testbed removes it if
    // this one is killed.
    std::string path = (*bed)->TempPath(absl::StrCat("host", host));
    const int fd = mkstemp(path.data());
    if (fd < 0) {
      std::perror("on_hosts: mkstemp");
      return 1;
    }
    close(fd);
    logs.push_back(path);
    absl::StatusOr<Child> child =
        Child::Start((*bed)->OnHost(host, command), logs.back());
    if (!child.ok()) {
      std::fprintf(stderr, "on_hosts: %s\n", child.status().ToString().c_str());
      return 1;
    }
    children.push_back(*std::move(child));
  }
  std::vector<size_t> shown(options.hosts, 0);
  std::vector<int> codes(options.hosts, -1);
  int running = options.hosts;
  while (running > 0 && !g_stop) {
    for (int host = 0; host < options.hosts; ++host) {
      ShowNew(logs[host], host, &shown[host], /*all=*/false);
      if (codes[host] >= 0) continue;
      absl::StatusOr<int> code = children[host].Wait(absl::ZeroDuration());
      if (code.ok()) {
        codes[host] = *code;
        --running;
      }
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  int status = g_stop ? 130 : 0;
  for (int host = 0; host < options.hosts; ++host) {
    ShowNew(logs[host], host, &shown[host], /*all=*/true);
    unlink(logs[host].c_str());
    if (status == 0 && codes[host] > 0) status = codes[host];
  }
  return status;
}
