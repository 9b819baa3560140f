// The io_uring IoEngine: one ring, every piece of a batch queued on it and
// submitted together; completions are reaped as Wait (or a full ring)
// needs them, whichever batch they belong to, and those already there at
// every Submit and Wait (so that the busy clock sees them soon).
#include <liburing.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "io/nvme/busy_clock.h"
#include "io/nvme/io_pieces.h"
#include "io/nvme/uring_post_times.h"

namespace chunkzero {
namespace io_internal {
namespace {

class UringIoEngine final : public IoEngine {
 public:
  UringIoEngine() = default;
  ~UringIoEngine() override {
    if (!initialized_) return;
    // Nothing may still write into buffers the callers are about to free.
    for (int64_t id : batches_.Ids()) Wait(IoBatch{id}).IgnoreError();
    post_times_.Stop();
    io_uring_queue_exit(&ring_);
  }

  absl::Status Init(int depth) {
    const int made =
        io_uring_queue_init(static_cast<unsigned>(depth), &ring_, 0);
    if (made < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("io_uring refused: ", std::strerror(-made)));
    }
    depth_ = depth;
    initialized_ = true;
    // Without it, completions are timed when reaped.
    post_times_.Start(&ring_).IgnoreError();
    return absl::OkStatus();
  }

  absl::string_view name() const override { return "io_uring"; }

  absl::StatusOr<IoBatch> Submit(
      const std::vector<IoRequest>& requests) override {
    if (!broken_.ok()) return broken_;
    for (const IoRequest& r : requests) {
      if (absl::Status s = CheckRequest(r); !s.ok()) return s;
    }
    if (absl::Status s = ReapReady(); !s.ok()) Break(s);
    if (!broken_.ok()) return broken_;
    const int64_t id = next_id_++;
    auto [unused, pieces] = batches_.Add(Split(requests, id), id);
    int queued = 0;
    for (Piece& p : *pieces) {
      // At most depth_ pieces with the kernel at once: its completion
      // ring (twice as deep) can never overflow.
      while (inflight_ >= depth_ && broken_.ok()) {
        if (absl::Status s = SubmitQueued(); !s.ok()) Break(s);
        if (absl::Status s = ReapOne(); !s.ok()) Break(s);
      }
      if (!broken_.ok()) break;
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) {
        if (absl::Status s = SubmitQueued(); !s.ok()) Break(s);
        sqe = broken_.ok() ? io_uring_get_sqe(&ring_) : nullptr;
        if (sqe == nullptr) {
          Break(absl::InternalError("io_uring: no submission entry free"));
          break;
        }
      }
      Prepare(sqe, &p);
      ++inflight_;
      ++queued;
      busy_.Started(1, absl::Now());
    }
    if (broken_.ok()) {
      if (absl::Status s = SubmitQueued(); !s.ok()) Break(s);
    }
    const int never_started = static_cast<int>(pieces->size()) - queued;
    if (never_started > 0) {
      batches_.Abandon(
          id, never_started,
          broken_.ok() ? absl::InternalError("io_uring") : broken_);
    }
    if (!broken_.ok()) return broken_;
    return IoBatch{id};
  }

  absl::Status Wait(IoBatch batch) override {
    if (!batches_.Has(batch.id)) {
      return absl::NotFoundError(
          absl::StrCat("no I/O batch ", batch.id, " is in flight"));
    }
    if (broken_.ok()) {
      if (absl::Status s = ReapReady(); !s.ok()) Break(s);
    }
    while (batches_.Outstanding(batch.id) > 0) {
      // A ring that failed cannot account for its pieces: they stay (the
      // kernel may still hold their addresses), and so does the error.
      if (!broken_.ok()) return broken_;
      if (absl::Status s = ReapOne(); !s.ok()) Break(s);
    }
    return batches_.Take(batch.id);
  }

  double busy_seconds() const override { return busy_.Seconds(absl::Now()); }

 private:
  static void Prepare(io_uring_sqe* sqe, Piece* p) {
    if (p->kind == IoKind::kRead) {
      io_uring_prep_read(sqe, p->fd, p->buffer, static_cast<unsigned>(p->bytes),
                         static_cast<__u64>(p->offset));
    } else {
      io_uring_prep_write(sqe, p->fd, p->buffer,
                          static_cast<unsigned>(p->bytes),
                          static_cast<__u64>(p->offset));
    }
    io_uring_sqe_set_data(sqe, p);
  }

  // The ring failed (the kernel refused an enter): every later call fails.
  void Break(const absl::Status& status) {
    if (broken_.ok()) broken_ = status;
  }

  absl::Status SubmitQueued() {
    for (;;) {
      const int submitted = io_uring_submit(&ring_);
      if (submitted >= 0) return absl::OkStatus();
      if (submitted == -EBUSY && inflight_ > 0) {
        // Completions first (not expected: the bound above prevents it).
        CZ_RETURN_IF_ERROR(ReapOne());
        continue;
      }
      if (submitted != -EINTR && submitted != -EAGAIN) {
        return absl::InternalError(
            absl::StrCat("io_uring submit: ", std::strerror(-submitted)));
      }
    }
  }

  // Waits for one completion and records it.
  absl::Status ReapOne() {
    io_uring_cqe* cqe = nullptr;
    int waited;
    do {
      waited = io_uring_wait_cqe(&ring_, &cqe);
    } while (waited == -EINTR);
    if (waited < 0) {
      return absl::InternalError(
          absl::StrCat("io_uring wait: ", std::strerror(-waited)));
    }
    return Record(cqe);
  }

  // Records the completions already on the ring, without waiting.
  absl::Status ReapReady() {
    io_uring_cqe* cqe = nullptr;
    while (inflight_ > 0 && io_uring_peek_cqe(&ring_, &cqe) == 0) {
      CZ_RETURN_IF_ERROR(Record(cqe));
    }
    return absl::OkStatus();
  }

  // Records one completion; a piece the kernel asked to retry (EAGAIN)
  // goes back on the ring.
  absl::Status Record(io_uring_cqe* cqe) {
    Piece* p = static_cast<Piece*>(io_uring_cqe_get_data(cqe));
    const int64_t result = cqe->res;
    const absl::Time posted =
        post_times_.PostedAt(*ring_.cq.khead, absl::Now());
    io_uring_cqe_seen(&ring_, cqe);
    --inflight_;
    if (result == -EAGAIN || result == -EINTR) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe != nullptr) {
        Prepare(sqe, p);
        ++inflight_;
        const absl::Status again = SubmitQueued();
        if (again.ok()) return again;
        --inflight_;
        batches_.Done(p->batch, again);
        busy_.Finished(posted);
        return again;
      }
    }
    batches_.Done(p->batch, PieceStatus(*p, result));
    busy_.Finished(posted);
    return absl::OkStatus();
  }

  io_uring ring_{};
  bool initialized_ = false;
  int depth_ = 0;
  int inflight_ = 0;  // Pieces queued or with the kernel, not yet reaped.
  BusyClock busy_;
  UringPostTimes post_times_;
  absl::Status broken_;
  Batches batches_;
  int64_t next_id_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<IoEngine>> MakeUringIoEngine(int depth) {
  auto engine = std::make_unique<UringIoEngine>();
  if (absl::Status s = engine->Init(depth); !s.ok()) return s;
  return std::unique_ptr<IoEngine>(std::move(engine));
}

}  // namespace io_internal
}  // namespace chunkzero
