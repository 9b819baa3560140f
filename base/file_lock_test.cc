#include "base/file_lock.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
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

}  // namespace
}  // namespace chunkzero
