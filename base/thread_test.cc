#include "base/thread.h"

#include <sys/resource.h>

#include <atomic>
#include <string>
#include <system_error>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

TEST(StartThread, RunsTheFunction) {
  std::atomic<int> ran{0};
  absl::StatusOr<std::thread> t = StartThread("a test thread", [&] { ++ran; });
  ASSERT_TRUE(t.ok()) << t.status();
  t->join();
  EXPECT_EQ(ran.load(), 1);
}

TEST(StartThread, RefusalIsResourceExhaustedNamingTheThreadAndTheLimit) {
  struct rlimit limit;
  ASSERT_EQ(::getrlimit(RLIMIT_NPROC, &limit), 0);
  const std::string expected_limit =
      limit.rlim_cur == RLIM_INFINITY
          ? ""
          : absl::StrCat(" (this user may run ", limit.rlim_cur,
                         " processes and threads: ulimit -u)");
  FailThreadStartsForTesting(/*skip=*/1, /*fail=*/2);
  std::atomic<int> ran{0};
  absl::StatusOr<std::thread> first = StartThread("first", [&] { ++ran; });
  absl::StatusOr<std::thread> second = StartThread("second", [&] { ++ran; });
  absl::StatusOr<std::thread> third = StartThread("third", [&] { ++ran; });
  absl::StatusOr<std::thread> fourth = StartThread("fourth", [&] { ++ran; });
  FailThreadStartsForTesting(0, 0);
  ASSERT_TRUE(first.ok());
  first->join();
  ASSERT_TRUE(fourth.ok());
  fourth->join();
  EXPECT_EQ(ran.load(), 2);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(second.status().message(),
            absl::StrCat("cannot start second: Resource temporarily "
                         "unavailable",
                         expected_limit));
  EXPECT_FALSE(third.ok());
}

TEST(ThreadStartError, QuotesTheErrorCode) {
  const absl::Status status = ThreadStartError(
      "the pool",
      std::system_error(std::make_error_code(std::errc::not_enough_memory)));
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StartsWith(status.message(),
                               "cannot start the pool: Cannot allocate memory"))
      << status;
}

}  // namespace
}  // namespace chunkzero
