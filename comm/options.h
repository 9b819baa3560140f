// Per-collective options, in the c10d style: every collective takes its
// buffers plus one of these structs, so new settings never change signatures.
//
//   AllReduceOptions opts;              // op = kSum, timeout = 5 minutes
//   opts.op = ReduceOp::kAvg;
//   std::unique_ptr<Work> w = group.AllReduce(buf, opts);
//
// `tag` (optional) names what the collective is for, e.g. the chunk it
// moves. Backends that can check it (the in-process one) treat ranks whose
// tags differ as a mismatch, so two ranks that issue the same-sized
// collective for different purposes fail instead of silently exchanging
// the wrong data. Empty tags match each other.
//
// `timeout` bounds how long a rank waits for its peers to join the collective
// (see the backend's header for exactly when the clock starts); when it
// expires the op fails with DeadlineExceeded. It is separate from the deadline
// given to Work::Wait, which only bounds the caller's wait.
#ifndef CHUNKZERO_COMM_OPTIONS_H_
#define CHUNKZERO_COMM_OPTIONS_H_

#include <string>

#include "absl/time/time.h"
#include "comm/types.h"

namespace chunkzero {
namespace comm {

// Default for every options struct's `timeout` (NCCL's and c10d's default
// is 10 / 30 minutes; training steps here are far shorter).
inline constexpr absl::Duration kDefaultCollectiveTimeout = absl::Minutes(5);

struct BroadcastOptions {
  int root = 0;  // The rank whose buffer is sent. REQUIRES: 0 <= root < size.
  absl::Duration timeout = kDefaultCollectiveTimeout;
  std::string tag;
};

struct ReduceOptions {
  int root = 0;  // The rank that receives the result.
  ReduceOp op = ReduceOp::kSum;
  absl::Duration timeout = kDefaultCollectiveTimeout;
  std::string tag;
};

struct AllReduceOptions {
  ReduceOp op = ReduceOp::kSum;
  absl::Duration timeout = kDefaultCollectiveTimeout;
  std::string tag;
};

struct AllGatherOptions {
  absl::Duration timeout = kDefaultCollectiveTimeout;
  std::string tag;
};

struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::kSum;
  absl::Duration timeout = kDefaultCollectiveTimeout;
  std::string tag;
};

struct BarrierOptions {
  absl::Duration timeout = kDefaultCollectiveTimeout;
  std::string tag;
};

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_OPTIONS_H_
