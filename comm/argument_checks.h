// Argument checks and call descriptions shared by every ProcessGroup backend
// and decorator, so that all of them reject the same calls with the same
// messages. ProcessGroup's public collectives run the checks before any
// backend sees a call (process_group.h, ArgumentChecks); backends and
// decorators use the descriptions.
//
//   if (absl::Status s = CheckAllReduceArgs(*this, buffer, options); !s.ok())
//     return MakeCompletedWork(s);  // ProcessGroup::AllReduce
//   CollectiveCall call = DescribeAllReduce(buffer, options);
//
// Each Check* returns OK or InvalidArgument whose message starts with the rank
// and the call, e.g. "rank 1: AllGather(f32, count=4) [inprocess]: recv.count
// is 7, expected size() * send.count = 8". They are pure functions of their
// arguments and of group.rank()/size()/SupportsDType(); thread-safe.
#ifndef CHUNKZERO_COMM_ARGUMENT_CHECKS_H_
#define CHUNKZERO_COMM_ARGUMENT_CHECKS_H_

#include "absl/status/status.h"
#include "comm/options.h"
#include "comm/process_group.h"
#include "comm/types.h"

namespace chunkzero {
namespace comm {

// The CollectiveCall (see types.h) that each collective's arguments denote.
CollectiveCall DescribeBroadcast(ConstBuffer buffer,
                                 const BroadcastOptions& options);
CollectiveCall DescribeReduce(ConstBuffer send, const ReduceOptions& options);
CollectiveCall DescribeAllReduce(ConstBuffer buffer,
                                 const AllReduceOptions& options);
CollectiveCall DescribeAllGather(ConstBuffer send,
                                 const AllGatherOptions& options);
CollectiveCall DescribeReduceScatter(ConstBuffer recv,
                                     const ReduceScatterOptions& options);
CollectiveCall DescribeBarrier(const BarrierOptions& options);

// Checks, for every kind: the dtype is supported by `group`; data is non-null
// when count > 0; the root (if any) is in [0, size()); send and recv have the
// same dtype; their counts agree (recv = size() * send for AllGather, send =
// size() * recv for ReduceScatter, recv = send at the Reduce root); send and
// recv either do not overlap or alias exactly as the in-place form requires.
[[nodiscard]] absl::Status CheckBroadcastArgs(const ProcessGroup& group,
                                              ConstBuffer buffer,
                                              const BroadcastOptions& options);
[[nodiscard]] absl::Status CheckReduceArgs(const ProcessGroup& group,
                                           ConstBuffer send, ConstBuffer recv,
                                           const ReduceOptions& options);
[[nodiscard]] absl::Status CheckAllReduceArgs(const ProcessGroup& group,
                                              ConstBuffer buffer,
                                              const AllReduceOptions& options);
[[nodiscard]] absl::Status CheckAllGatherArgs(const ProcessGroup& group,
                                              ConstBuffer send,
                                              ConstBuffer recv,
                                              const AllGatherOptions& options);
[[nodiscard]] absl::Status CheckReduceScatterArgs(
    const ProcessGroup& group, ConstBuffer send, ConstBuffer recv,
    const ReduceScatterOptions& options);

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_ARGUMENT_CHECKS_H_
