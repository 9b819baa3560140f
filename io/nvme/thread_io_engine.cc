// The IoEngine of threads: pieces go on a queue that a few threads drain
// with pread/pwrite, for kernels (or containers) that refuse io_uring.
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "base/thread.h"
#include "io/nvme/busy_clock.h"
#include "io/nvme/io_pieces.h"

namespace chunkzero {
namespace io_internal {
namespace {

// Moves all of the piece's bytes, retrying EINTR and partial transfers; the
// bytes moved, or -errno. A read that meets the end of the file stops
// short.
int64_t Transfer(const Piece& p) {
  size_t done = 0;
  while (done < p.bytes) {
    const ssize_t n = p.kind == IoKind::kRead
                          ? ::pread(p.fd, p.buffer + done, p.bytes - done,
                                    p.offset + static_cast<off_t>(done))
                          : ::pwrite(p.fd, p.buffer + done, p.bytes - done,
                                     p.offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<int64_t>(done);
}

class ThreadIoEngine final : public IoEngine {
 public:
  ThreadIoEngine() = default;
  ~ThreadIoEngine() override {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    work_.SignalAll();
    for (std::thread& t : threads_) t.join();
  }

  absl::Status Start(int threads) {
    for (int i = 0; i < threads; ++i) {
      absl::StatusOr<std::thread> t =
          StartThread(absl::StrCat("I/O thread ", i, " of the NVMe tier"),
                      [this] { Loop(); });
      if (!t.ok()) return t.status();
      threads_.push_back(*std::move(t));
    }
    return absl::OkStatus();
  }

  absl::string_view name() const override { return "pread/pwrite threads"; }

  absl::StatusOr<IoBatch> Submit(
      const std::vector<IoRequest>& requests) override {
    for (const IoRequest& r : requests) {
      if (absl::Status s = CheckRequest(r); !s.ok()) return s;
    }
    MutexLock lock(&mu_);
    const int64_t id = next_id_++;
    auto [unused, pieces] = batches_.Add(Split(requests, id), id);
    for (Piece& p : *pieces) queue_.push_back(&p);
    busy_.Started(static_cast<int>(pieces->size()), absl::Now());
    work_.SignalAll();
    return IoBatch{id};
  }

  double busy_seconds() const override {
    MutexLock lock(&mu_);
    return busy_.Seconds(absl::Now());
  }

  absl::Status Wait(IoBatch batch) override {
    MutexLock lock(&mu_);
    if (!batches_.Has(batch.id)) {
      return absl::NotFoundError(
          absl::StrCat("no I/O batch ", batch.id, " is in flight"));
    }
    while (batches_.Outstanding(batch.id) > 0) done_.Wait(&mu_);
    return batches_.Take(batch.id);
  }

 private:
  void Loop() {
    for (;;) {
      Piece* p;
      {
        MutexLock lock(&mu_);
        while (queue_.empty() && !stopping_) work_.Wait(&mu_);
        if (queue_.empty()) return;  // Stopping, with nothing left.
        p = queue_.front();
        queue_.pop_front();
      }
      const absl::Status status = PieceStatus(*p, Transfer(*p));
      {
        MutexLock lock(&mu_);
        batches_.Done(p->batch, status);
        busy_.Finished(absl::Now());
      }
      done_.SignalAll();
    }
  }

  mutable Mutex mu_;
  CondVar work_, done_;
  BusyClock busy_ ABSL_GUARDED_BY(mu_);
  std::deque<Piece*> queue_ ABSL_GUARDED_BY(mu_);
  Batches batches_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<IoEngine>> MakeThreadIoEngine(int threads) {
  auto engine = std::make_unique<ThreadIoEngine>();
  if (absl::Status s = engine->Start(threads); !s.ok()) return s;
  return std::unique_ptr<IoEngine>(std::move(engine));
}

}  // namespace io_internal
}  // namespace chunkzero
