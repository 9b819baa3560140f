#include "io/nvme/io_engine.h"

#include <sys/resource.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/nvme/aligned_buffer.h"
#include "io/nvme/scratch_file.h"

namespace chunkzero {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string TestDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/io_engine_test");
  fs::create_directories(dir);
  return dir;
}

// Both engines, whatever kAuto would pick here.
class IoEngineTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<IoEngine>> engine = MakeIoEngine(GetParam());
    if (!engine.ok() && GetParam() == IoEngineKind::kUring) {
      GTEST_SKIP() << engine.status();
    }
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
    file_ = *ScratchFile::Create(TestDir(), 4 << 20);
  }
  std::unique_ptr<IoEngine> engine_;
  std::unique_ptr<ScratchFile> file_;
  const std::string what_ = "the test's bytes";
};

AlignedBuffer Pattern(size_t bytes, int seed) {
  AlignedBuffer b = *AlignedBuffer::Create(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    b.data()[i] = static_cast<char>((i * 131 + seed) % 251);
  }
  return b;
}

// The disk's time is counted while pieces are in flight, and ends when
// they finish, not when someone waits: a batch done long before its Wait
// counts its transfer only, and nothing is counted while idle.
TEST_P(IoEngineTest, BusyTimeEndsWhenThePiecesFinishNotAtTheWait) {
  EXPECT_EQ(engine_->busy_seconds(), 0);
  AlignedBuffer out = Pattern(4 << 20, 7);
  const absl::Time start = absl::Now();
  absl::StatusOr<IoBatch> batch = engine_->Submit(
      {{IoKind::kWrite, file_->fd(), 0, out.data(), out.size(), &what_}});
  ASSERT_TRUE(batch.ok()) << batch.status();
  absl::SleepFor(absl::Milliseconds(600));  // The caller computes.
  ASSERT_TRUE(engine_->Wait(*batch).ok());
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  const double busy = engine_->busy_seconds();
  EXPECT_GT(busy, 0);
  // 4 MiB take milliseconds; the margin is for a loaded machine.
  EXPECT_LT(busy, 0.4) << "of " << elapsed << " s from submit to wait";
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(engine_->busy_seconds(), busy);  // Idle: no more.
}

TEST_P(IoEngineTest, WritesAndReadsBackBatchesInAnyOrder) {
  // 4 KiB, 1.5 MiB (two pieces) and 8 KiB at scattered offsets.
  const std::vector<std::pair<int64_t, size_t>> spans = {
      {0, 4096}, {1 << 20, 3 << 19}, {3 << 20, 8192}};
  std::vector<AlignedBuffer> out, in;
  std::vector<IoRequest> writes, reads;
  for (size_t i = 0; i < spans.size(); ++i) {
    out.push_back(Pattern(spans[i].second, static_cast<int>(i)));
    in.push_back(*AlignedBuffer::Create(spans[i].second));
    writes.push_back({IoKind::kWrite, file_->fd(), spans[i].first,
                      out[i].data(), spans[i].second, &what_});
    reads.push_back({IoKind::kRead, file_->fd(), spans[i].first, in[i].data(),
                     spans[i].second, &what_});
  }
  // The first write alone, the rest in a second batch; waited in reverse.
  absl::StatusOr<IoBatch> first = engine_->Submit({writes[0]});
  absl::StatusOr<IoBatch> rest = engine_->Submit({writes[1], writes[2]});
  ASSERT_TRUE(first.ok() && rest.ok());
  EXPECT_TRUE(engine_->Wait(*rest).ok());
  EXPECT_TRUE(engine_->Wait(*first).ok());
  absl::StatusOr<IoBatch> read = engine_->Submit(reads);
  ASSERT_TRUE(read.ok());
  ASSERT_TRUE(engine_->Wait(*read).ok());
  for (size_t i = 0; i < spans.size(); ++i) {
    EXPECT_EQ(std::memcmp(in[i].data(), out[i].data(), spans[i].second), 0)
        << i;
  }
  // A batch is waited for once.
  EXPECT_EQ(engine_->Wait(*read).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine_->Wait(IoBatch{12345}).code(), absl::StatusCode::kNotFound);
}

TEST_P(IoEngineTest, AReadPastTheEndIsShortAndSaysSo) {
  AlignedBuffer in = *AlignedBuffer::Create(8192);
  const int64_t offset = (4 << 20) - 4096;  // The file's last 4 KiB.
  absl::StatusOr<IoBatch> b = engine_->Submit(
      {{IoKind::kRead, file_->fd(), offset, in.data(), 8192, &what_}});
  ASSERT_TRUE(b.ok());
  const absl::Status s = engine_->Wait(*b);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrCat("short read of the test's bytes at "
                                     "offset ",
                                     offset, ": 4096 of 8192 bytes")));
}

TEST_P(IoEngineTest, RefusesWhatDirectIoCannotTake) {
  AlignedBuffer buf = *AlignedBuffer::Create(8192);
  absl::StatusOr<IoBatch> b = engine_->Submit(
      {{IoKind::kWrite, file_->fd(), 100, buf.data(), 4096, &what_}});
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(),
              HasSubstr("writing the test's bytes: offset 100, 4096 bytes"));
  b = engine_->Submit(
      {{IoKind::kRead, file_->fd(), 0, buf.data() + 512, 4096, &what_}});
  EXPECT_THAT(b.status().message(), HasSubstr("not aligned"));
  b = engine_->Submit({{IoKind::kRead, -1, 0, buf.data(), 4096, &what_}});
  EXPECT_THAT(b.status().message(), HasSubstr("no file descriptor"));
}

// A disk that takes no more (here the process's file size limit, which
// the kernel enforces on every write past it) fails the batch, naming the
// bytes, after every piece has finished.
TEST_P(IoEngineTest, AWriteTheDiskRefusesFailsTheBatch) {
  AlignedBuffer out = Pattern(1 << 20, 3);
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 2 << 20;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  absl::StatusOr<IoBatch> b = engine_->Submit(
      {{IoKind::kWrite, file_->fd(), 0, out.data(), 1 << 20, &what_},
       {IoKind::kWrite, file_->fd(), 3 << 20, out.data(), 1 << 20, &what_}});
  const absl::Status s = b.ok() ? engine_->Wait(*b) : b.status();
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(
                               "writing the test's bytes at offset ", 3 << 20,
                               " (1048576 bytes): File too large")));
}

INSTANTIATE_TEST_SUITE_P(Engines, IoEngineTest,
                         ::testing::Values(IoEngineKind::kUring,
                                           IoEngineKind::kThreads),
                         [](const auto& info) {
                           return info.param == IoEngineKind::kUring
                                      ? std::string("Uring")
                                      : std::string("Threads");
                         });

// A batch far larger than the ring (here 4 entries, 24 pieces) goes to the
// kernel a ring at a time, completions reaped as room is needed.
TEST(IoEngine, ABatchLargerThanTheRingCompletes) {
  absl::StatusOr<std::unique_ptr<IoEngine>> engine =
      MakeIoEngine(IoEngineKind::kUring, /*ring_depth=*/4);
  if (!engine.ok()) GTEST_SKIP() << engine.status();
  auto file = *ScratchFile::Create(TestDir(), 12 << 20);
  const std::string what = "the big batch";
  AlignedBuffer out = Pattern(12 << 20, 7);
  AlignedBuffer in = *AlignedBuffer::Create(12 << 20);
  absl::StatusOr<IoBatch> w = (*engine)->Submit(
      {{IoKind::kWrite, file->fd(), 0, out.data(), 12 << 20, &what}});
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*engine)->Wait(*w).ok());  // Reads may overtake writes.
  absl::StatusOr<IoBatch> r = (*engine)->Submit(
      {{IoKind::kRead, file->fd(), 0, in.data(), 6 << 20, &what},
       {IoKind::kRead, file->fd(), 6 << 20, in.data() + (6 << 20), 6 << 20,
        &what}});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE((*engine)->Wait(*r).ok());
  EXPECT_EQ(std::memcmp(in.data(), out.data(), 12 << 20), 0);
}

TEST(IoEngine, AutoSaysWhichItIsAndWhy) {
  absl::StatusOr<std::unique_ptr<IoEngine>> engine =
      MakeIoEngine(IoEngineKind::kAuto);
  ASSERT_TRUE(engine.ok()) << engine.status();
  if ((*engine)->name() == "io_uring") {
    EXPECT_EQ((*engine)->fallback_reason(), "");
  } else {
    EXPECT_EQ((*engine)->name(), "pread/pwrite threads");
    EXPECT_THAT((*engine)->fallback_reason(), HasSubstr("io_uring refused"));
  }
}

}  // namespace
}  // namespace chunkzero
