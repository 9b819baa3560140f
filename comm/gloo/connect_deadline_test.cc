// A peer that stops while the ranks connect (after it joined and published
// its pairs' addresses) must fail the others within their timeout. Gloo
// alone waits five times the timeout for a pair whose peer dialed and then
// said nothing; a stop at that instant cannot be arranged from a store
// hook, so this stops the peer just before it dials, where the store waits
// inside Gloo's connect (now bounded by the deadline, not by a fifth of
// it) are what must end in time.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/gloo/gloo_process_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

extern char** environ;

namespace chunkzero {
namespace comm {
namespace {

std::string Runfile(const std::string& path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/chunkzero/", path);
}

TEST(GlooConnect, APeerThatStopsWhileConnectingFailsTheOthersInTime) {
  const std::string dir =
      absl::StrCat(testing::TempDir(), "/connect_deadline_", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string binary = Runfile("comm/gloo/testing/stopping_peer");
  char rank[] = "1", size[] = "2";
  char* argv[] = {const_cast<char*>(binary.c_str()), rank, size,
                  const_cast<char*>(dir.c_str()), nullptr};
  pid_t peer = -1;
  ASSERT_EQ(posix_spawn(&peer, binary.c_str(), nullptr, nullptr, argv, environ),
            0)
      << binary;

  GlooOptions options;
  options.timeout = absl::Seconds(3);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<GlooProcessGroup>> group =
      GlooProcessGroup::CreateWithFileStore(0, 2, dir, options);
  const absl::Duration took = absl::Now() - start;
  // The peer must have stopped, not exited: else this tests nothing.
  int status = 0;
  const pid_t waited = waitpid(peer, &status, WNOHANG | WUNTRACED);
  kill(peer, SIGKILL);
  kill(peer, SIGCONT);
  waitpid(peer, nullptr, 0);
  ASSERT_EQ(waited, peer) << "the peer neither stopped nor exited";
  ASSERT_TRUE(WIFSTOPPED(status)) << "the peer exited with status " << status;

  ASSERT_EQ(group.status().code(), absl::StatusCode::kDeadlineExceeded)
      << group.status();
  EXPECT_THAT(group.status().message(),
              testing::HasSubstr("GlooProcessGroup::Create: rank 0 of 2"));
  EXPECT_THAT(group.status().message(), testing::HasSubstr("Wait timeout"));
  // Within the timeout (3 s), not before it nor five times it; the margin
  // is for a loaded machine (sanitizers).
  EXPECT_GE(took, absl::Seconds(3)) << group.status();
  EXPECT_LT(took, absl::Seconds(5)) << group.status();
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
