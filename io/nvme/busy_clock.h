// BusyClock: how long at least one piece of an IoEngine's I/O was in
// flight -- the time the disk worked for it, whether or not anyone was
// waiting. Less the time its callers waited, that is the I/O hidden behind
// their compute.
//
//   BusyClock busy;
//   busy.Started(2, t0);        // two pieces submitted at t0
//   busy.Finished(t1);          // one done
//   busy.Finished(t2);          // both: busy from t0 to t2
//   busy.Seconds(t3);           // absl::ToDoubleSeconds(t2 - t0)
//
// Times are the caller's, in order. Not thread-safe: an engine whose
// pieces finish on other threads guards it.
#ifndef CHUNKZERO_IO_NVME_BUSY_CLOCK_H_
#define CHUNKZERO_IO_NVME_BUSY_CLOCK_H_

#include "absl/time/time.h"

namespace chunkzero {

class BusyClock {
 public:
  // `pieces` (> 0) went to the disk at `now`.
  void Started(int pieces, absl::Time now) {
    if (pieces <= 0) return;
    if (in_flight_ == 0) since_ = now;
    in_flight_ += pieces;
  }
  // One piece came back (or was given up) at `now`.
  void Finished(absl::Time now) {
    if (in_flight_ == 0) return;
    // A time before the interval began (clocks of two threads) adds none.
    if (--in_flight_ == 0 && now > since_) busy_ += now - since_;
  }
  // Seconds busy up to `now`; pieces still in flight count until `now`.
  double Seconds(absl::Time now) const {
    return absl::ToDoubleSeconds(in_flight_ > 0 ? busy_ + (now - since_)
                                                : busy_);
  }
  int in_flight() const { return in_flight_; }

 private:
  int in_flight_ = 0;
  absl::Time since_;
  absl::Duration busy_;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_IO_NVME_BUSY_CLOCK_H_
