#include "comm/rendezvous/store_wait.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/rendezvous/timed_file_store.h"
#include "gloo/common/error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace {

using ::testing::HasSubstr;

// The message PollForKeys threw, or "" if it returned.
std::string Thrown(const std::vector<std::string>& keys,
                   std::chrono::milliseconds timeout, const std::string& who,
                   const std::function<bool()>& all_set) {
  try {
    PollForKeys(keys, timeout, who, all_set);
  } catch (const gloo::IoException& e) {
    return e.what();
  }
  return "";
}

TEST(PollForKeys, ReturnsOnceTheKeysAreSet) {
  int looks = 0;
  EXPECT_EQ(Thrown({"a"}, std::chrono::milliseconds(5000), "s",
                   [&] { return ++looks == 3; }),
            "");
  EXPECT_EQ(looks, 3);
}

TEST(PollForKeys, AKeySetAlreadyIsLookedAtOnceEvenWithNoTimeLeft) {
  int looks = 0;
  EXPECT_EQ(Thrown({"a"}, std::chrono::milliseconds(1), "s",
                   [&] { return ++looks > 0; }),
            "");
  EXPECT_EQ(looks, 1);
}

TEST(PollForKeys, TimesOutToTheMillisecondNamingTheKeys) {
  const absl::Time start = absl::Now();
  const std::string what = Thrown({"a", "b"}, std::chrono::milliseconds(30),
                                  "rendezvous store x", [] { return false; });
  const absl::Duration took = absl::Now() - start;
  EXPECT_THAT(what, HasSubstr("rendezvous store x: Wait timeout for key(s): "
                              "a, b"));
  EXPECT_GE(took, absl::Milliseconds(30));
  EXPECT_LT(took, absl::Milliseconds(500));
  // No "WHO: " without a who.
  EXPECT_EQ(
      Thrown({"k"}, std::chrono::milliseconds(1), "", [] { return false; }),
      "Wait timeout for key(s): k");
}

TEST(PollForKeys, NoTimeoutWaitsAsLongAsItTakes) {
  std::atomic<bool> set{false};
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    set = true;
  });
  EXPECT_EQ(Thrown({"a"}, gloo::kNoTimeout, "s", [&] { return set.load(); }),
            "");
  setter.join();
}

// Gloo's own FileStore counted whole seconds: a 1 ms probe took 1 s.
TEST(TimedFileStore, AProbeOfAMissingKeyTakesMilliseconds) {
  const std::string dir =
      absl::StrCat(testing::TempDir(), "/timed_file_store_", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  TimedFileStore store(dir);
  store.set("here", {'1'});
  store.wait({"here"}, std::chrono::milliseconds(1));
  EXPECT_EQ(store.get("here"), std::vector<char>{'1'});
  const absl::Time start = absl::Now();
  std::string what;
  try {
    store.wait({"here", "missing"}, std::chrono::milliseconds(1));
  } catch (const gloo::IoException& e) {
    what = e.what();
  }
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(300));
  // Gloo keeps the directory's real path.
  EXPECT_THAT(what, HasSubstr("rendezvous directory "));
  EXPECT_THAT(what, HasSubstr(absl::StrCat("/timed_file_store_", getpid(),
                                           ": Wait timeout for key(s): here, "
                                           "missing")));
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
