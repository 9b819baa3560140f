// The train binary is never ended by SIGPIPE: a standard output whose
// reader has gone (`train | head`) is an error it reports, as is a peer
// rank's closed connection (Gloo writes to it with writev, which raises
// SIGPIPE; thread_limit_test's limits make such peers).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::testing::HasSubstr;

TEST(Sigpipe, AClosedStandardOutputIsAnErrorNotASignal) {
  const std::string binary =
      absl::StrCat(std::getenv("TEST_SRCDIR"), "/chunkzero/tools/train/train");
  const std::string err_path =
      JoinPath(std::getenv("TEST_TMPDIR"), "sigpipe_stderr");
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  close(out[0]);  // Nobody will read the summary.
  const pid_t pid = fork();
  if (pid == 0) {
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err < 0 || dup2(out[1], 1) < 0 || dup2(err, 2) < 0) _exit(120);
    // As a shell would start it: SIGPIPE at its default.
    signal(SIGPIPE, SIG_DFL);
    execl(binary.c_str(), binary.c_str(), "--layers=1", "--d_model=32",
          "--heads=2", "--seq_len=16", "--steps=1", "--world_size=1",
          "--batch=1", nullptr);
    _exit(121);
  }
  close(out[1]);
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_FALSE(WIFSIGNALED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  absl::StatusOr<std::string> err = ReadFileToString(err_path);
  ASSERT_TRUE(err.ok()) << err.status();
  EXPECT_THAT(*err,
              HasSubstr("error: cannot write the summary to standard output"));
}

}  // namespace
}  // namespace chunkzero
