// The train binary under a limit on threads (ulimit -u) as an unprivileged
// user: every limit fails the job with an error naming the limit, in time,
// and never aborts. (Root is not held to RLIMIT_NPROC, so the test runs the
// binary as the user nobody; it skips where it cannot.)
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

struct Outcome {
  int exit_code = -1;
  std::string err;
  double seconds = 0;
};

// Runs `binary` with `args` as `user` (uid, gid) under RLIMIT_NPROC `limit`,
// its stderr in `dir`/err.
Outcome RunLimited(const std::string& binary,
                   const std::vector<std::string>& args, const passwd& user,
                   int limit, const std::string& dir) {
  const std::string err_path = dir + "/err";
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
    const int null = open("/dev/null", O_RDWR);
    if (err < 0 || null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 ||
        dup2(err, 2) < 0 || chdir(dir.c_str()) != 0 ||
        setgroups(0, nullptr) != 0 || setgid(user.pw_gid) != 0 ||
        setuid(user.pw_uid) != 0) {
      _exit(120);
    }
    const rlimit nproc = {static_cast<rlim_t>(limit),
                          static_cast<rlim_t>(limit)};
    if (setrlimit(RLIMIT_NPROC, &nproc) != 0) _exit(121);
    std::vector<char*> argv = {const_cast<char*>(binary.c_str())};
    for (const std::string& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(122);
  }
  Outcome out;
  if (pid < 0) return out;
  int status = 0;
  const auto deadline = start + std::chrono::minutes(2);
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "hung: killed after 2 minutes";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  out.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  out.exit_code =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  absl::StatusOr<std::string> err = ReadFileToString(err_path);
  out.err = err.ok() ? *err : "";
  return out;
}

TEST(ThreadLimit, EveryLimitFailsTheJobNamingItInTime) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run as nobody";
  const passwd* nobody = getpwnam("nobody");
  if (nobody == nullptr) GTEST_SKIP() << "no user nobody";
  // The binary where nobody can run it: the runfiles are under root's home.
  std::string dir = "/tmp/cz_thread_limit_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  const std::string binary = dir + "/train";
  fs::copy_file(
      absl::StrCat(std::getenv("TEST_SRCDIR"), "/chunkzero/tools/train/train"),
      binary);
  ASSERT_EQ(chmod(binary.c_str(), 0755), 0);
  const std::vector<std::string> args = {
      "--layers=1",   "--d_model=64",   "--heads=4",
      "--seq_len=32", "--steps=3",      "--world_size=16",
      "--batch=1",    "--backend=gloo", "--comm_timeout_s=30"};
  // Limits that stop the rank threads, Gloo's network threads and the Gloo
  // workers (which thread is refused first depends on the limit).
  for (int limit : {8, 12, 20, 30, 40}) {
    SCOPED_TRACE(absl::StrCat("ulimit -u ", limit));
    const Outcome out = RunLimited(binary, args, *nobody, limit, dir);
    EXPECT_EQ(out.exit_code, 1) << out.err;
    EXPECT_THAT(out.err, HasSubstr("error: RESOURCE_EXHAUSTED: rank "));
    EXPECT_THAT(out.err,
                HasSubstr(absl::StrCat("(this user may run ", limit,
                                       " processes and threads: ulimit -u)")));
    EXPECT_THAT(out.err, Not(HasSubstr("terminate called")));
    // Failing ranks tell the others: nobody waits out the 30 s timeout.
    EXPECT_LT(out.seconds, 20) << out.err;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace chunkzero
