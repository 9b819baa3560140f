#include "base/file_lock.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

std::string LockPath(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

TEST(FileLock, SecondHolderIsRefusedNamingThePid) {
  const std::string path = LockPath("a.lock");
  absl::StatusOr<std::unique_ptr<FileLock>> first = FileLock::TryAcquire(path);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<FileLock>> second = FileLock::TryAcquire(path);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.status().message(),
            absl::StrCat(path, " is locked by another process (pid ",
                         ::getpid(), ")"));
}

// A holder that removes its lock file leaves nothing; the next job makes a
// new one and locks that, while the first still holds the old.
TEST(FileLock, RemoveLeavesNothingAndTheNextHolderStartsAfresh) {
  const std::string path = ::testing::TempDir() + "/removed.lock";
  absl::StatusOr<std::unique_ptr<FileLock>> first = FileLock::TryAcquire(path);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->Remove().ok());
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
  EXPECT_TRUE((*first)->Remove().ok());  // Gone already: nothing to do.
  absl::StatusOr<std::unique_ptr<FileLock>> second = FileLock::TryAcquire(path);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(FileLock::TryAcquire(path).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A directory's lock removes nothing.
  const std::string dir = ::testing::TempDir() + "/removed_dir";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  absl::StatusOr<std::unique_ptr<FileLock>> held = FileLock::AcquireDirectory(
      dir, LockMode::kExclusive, absl::ZeroDuration());
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_TRUE((*held)->Remove().ok());
  EXPECT_EQ(::access(dir.c_str(), F_OK), 0);
}

TEST(FileLock, ReleasedWhenDestroyed) {
  const std::string path = LockPath("b.lock");
  {
    absl::StatusOr<std::unique_ptr<FileLock>> lock = FileLock::TryAcquire(path);
    ASSERT_TRUE(lock.ok());
  }
  EXPECT_TRUE(FileLock::TryAcquire(path).ok());
}

// Another process holds it; when that process dies the lock is free
// again, whatever it left in the file.
TEST(FileLock, AnotherProcessHoldsItUntilItExits) {
  const std::string path = LockPath("c.lock");
  int ready[2], release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    absl::StatusOr<std::unique_ptr<FileLock>> lock = FileLock::TryAcquire(path);
    const char ok = lock.ok() ? '1' : '0';
    (void)!::write(ready[1], &ok, 1);
    char c;
    (void)!::read(release[0], &c, 1);
    ::_exit(0);
  }
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1);
  ASSERT_EQ(ok, '1');
  absl::StatusOr<std::unique_ptr<FileLock>> refused =
      FileLock::TryAcquire(path);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      refused.status().message(),
      absl::StrCat(path, " is locked by another process (pid ", child, ")"));
  (void)!::write(release[1], "x", 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(FileLock::TryAcquire(path).ok());
}

TEST(FileLock, UnopenablePathCarriesErrnoText) {
  absl::StatusOr<std::unique_ptr<FileLock>> lock =
      FileLock::TryAcquire("/nonexistent_dir/lock");
  EXPECT_EQ(lock.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(lock.status().message(),
            "cannot open lock file /nonexistent_dir/lock: No such file or "
            "directory");
}

TEST(FileLock, SharedHoldersCoexistAndExcludeAnExclusiveOne) {
  const std::string path = LockPath("d.lock");
  absl::StatusOr<std::unique_ptr<FileLock>> a =
      FileLock::TryAcquire(path, LockMode::kShared);
  absl::StatusOr<std::unique_ptr<FileLock>> b =
      FileLock::TryAcquire(path, LockMode::kShared);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*a)->mode(), LockMode::kShared);
  EXPECT_EQ(FileLock::TryAcquire(path).status().code(),
            absl::StatusCode::kFailedPrecondition);
  a->reset();
  EXPECT_EQ(FileLock::TryAcquire(path).status().code(),
            absl::StatusCode::kFailedPrecondition);
  b->reset();
  absl::StatusOr<std::unique_ptr<FileLock>> alone = FileLock::TryAcquire(path);
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ(FileLock::TryAcquire(path, LockMode::kShared).status().message(),
            absl::StrCat(path, " is locked by another process (pid ",
                         ::getpid(), ")"));
}

// A directory is locked itself: nothing is created in it, and an exclusive
// holder records no pid.
TEST(FileLock, ADirectoryIsLockedWithoutCreatingAnything) {
  const std::string dir = LockPath("locked_dir");
  std::filesystem::create_directories(dir);
  absl::StatusOr<std::unique_ptr<FileLock>> reader =
      FileLock::AcquireDirectory(dir, LockMode::kShared, absl::ZeroDuration());
  ASSERT_TRUE(reader.ok()) << reader.status();
  const absl::StatusOr<std::unique_ptr<FileLock>> writer =
      FileLock::AcquireDirectory(dir, LockMode::kExclusive,
                                 absl::ZeroDuration());
  EXPECT_EQ(writer.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(writer.status().message(),
            absl::StrCat(dir, " is locked by another process"));
  reader->reset();
  EXPECT_TRUE(
      FileLock::AcquireDirectory(dir, LockMode::kExclusive, absl::Seconds(1))
          .ok());
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  // A missing directory is not created, and a directory is no lock file.
  const absl::StatusOr<std::unique_ptr<FileLock>> missing =
      FileLock::AcquireDirectory(dir + "/missing", LockMode::kShared,
                                 absl::ZeroDuration());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(dir + "/missing"));
  EXPECT_EQ(FileLock::TryAcquire(dir).status().message(),
            absl::StrCat("cannot open lock file ", dir, ": Is a directory"));
}

// Acquire waits while the holder holds, and returns once it lets go.
TEST(FileLock, AcquireWaitsForTheHolderToRelease) {
  const std::string path = LockPath("e.lock");
  absl::StatusOr<std::unique_ptr<FileLock>> holder = FileLock::TryAcquire(path);
  ASSERT_TRUE(holder.ok()) << holder.status();
  std::promise<absl::Status> acquired;
  std::thread waiter([&] {
    acquired.set_value(
        FileLock::Acquire(path, LockMode::kShared, absl::Minutes(5)).status());
  });
  std::future<absl::Status> done = acquired.get_future();
  // The lock is held: the waiter cannot have returned, however long it runs.
  EXPECT_EQ(done.wait_for(std::chrono::milliseconds(200)),
            std::future_status::timeout);
  holder->reset();
  EXPECT_EQ(done.get(), absl::OkStatus());
  waiter.join();
}

TEST(FileLock, AcquireGivesUpAtItsDeadlineNamingTheHolder) {
  const std::string path = LockPath("f.lock");
  absl::StatusOr<std::unique_ptr<FileLock>> holder = FileLock::TryAcquire(path);
  ASSERT_TRUE(holder.ok()) << holder.status();
  const absl::Time start = absl::Now();
  const absl::StatusOr<std::unique_ptr<FileLock>> late =
      FileLock::Acquire(path, LockMode::kShared, absl::Milliseconds(30));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(30));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(late.status().message(),
            absl::StrCat(path, " is still locked by another process (pid ",
                         ::getpid(), ") after 30ms"));
}

}  // namespace
}  // namespace chunkzero
