#include "comm/argument_checks.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace chunkzero {
namespace comm {
namespace {

absl::Status Invalid(const ProcessGroup& group, const CollectiveCall& call,
                     absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("rank ", group.rank(), ": ", call.ToString(), " [",
                   group.backend_name(), "]: ", what));
}

// Checks dtype support and null data for one buffer named `name`.
absl::Status CheckBuffer(const ProcessGroup& group, const CollectiveCall& call,
                         absl::string_view name, ConstBuffer b) {
  if (!group.SupportsDType(b.dtype)) {
    return Invalid(group, call,
                   absl::StrCat(name, " dtype ", DTypeName(b.dtype),
                                " is not supported by this backend"));
  }
  if (b.data == nullptr && b.count > 0) {
    return Invalid(group, call,
                   absl::StrCat(name, " has null data with count=", b.count));
  }
  return absl::OkStatus();
}

absl::Status CheckOp(const ProcessGroup& group, const CollectiveCall& call) {
  if (static_cast<int>(call.op) >= kNumReduceOps) {
    return Invalid(
        group, call,
        absl::StrCat("unknown reduce op value ", static_cast<int>(call.op)));
  }
  return absl::OkStatus();
}

absl::Status CheckRoot(const ProcessGroup& group, const CollectiveCall& call) {
  if (call.root < 0 || call.root >= group.size()) {
    return Invalid(
        group, call,
        absl::StrCat("root ", call.root, " is not in [0, ", group.size(), ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckSameDType(const ProcessGroup& group,
                            const CollectiveCall& call, ConstBuffer send,
                            ConstBuffer recv) {
  if (send.dtype != recv.dtype) {
    return Invalid(
        group, call,
        absl::StrCat("send dtype ", DTypeName(send.dtype),
                     " differs from recv dtype ", DTypeName(recv.dtype)));
  }
  return absl::OkStatus();
}

// Requires the byte range of `part` to be either disjoint from `whole` or to
// start exactly at `whole.data + allowed_offset_bytes`.
absl::Status CheckOverlap(const ProcessGroup& group, const CollectiveCall& call,
                          ConstBuffer part, ConstBuffer whole,
                          size_t allowed_offset_bytes,
                          absl::string_view in_place_form) {
  if (part.count == 0 || whole.count == 0) return absl::OkStatus();
  const uintptr_t p = reinterpret_cast<uintptr_t>(part.data);
  const uintptr_t w = reinterpret_cast<uintptr_t>(whole.data);
  const bool disjoint = p + part.bytes() <= w || w + whole.bytes() <= p;
  if (disjoint || p == w + allowed_offset_bytes) return absl::OkStatus();
  return Invalid(group, call,
                 absl::StrCat("send and recv overlap; the only overlap "
                              "allowed is the in-place form (",
                              in_place_form, ")"));
}

}  // namespace

CollectiveCall DescribeBroadcast(ConstBuffer buffer,
                                 const BroadcastOptions& options) {
  return {CollectiveKind::kBroadcast,
          buffer.dtype,
          buffer.count,
          options.root,
          ReduceOp::kSum,
          options.tag};
}

CollectiveCall DescribeReduce(ConstBuffer send, const ReduceOptions& options) {
  return {CollectiveKind::kReduce,
          send.dtype,
          send.count,
          options.root,
          options.op,
          options.tag};
}

CollectiveCall DescribeAllReduce(ConstBuffer buffer,
                                 const AllReduceOptions& options) {
  return {CollectiveKind::kAllReduce,
          buffer.dtype,
          buffer.count,
          0,
          options.op,
          options.tag};
}

CollectiveCall DescribeAllGather(ConstBuffer send,
                                 const AllGatherOptions& options) {
  return {CollectiveKind::kAllGather,
          send.dtype,
          send.count,
          0,
          ReduceOp::kSum,
          options.tag};
}

CollectiveCall DescribeReduceScatter(ConstBuffer recv,
                                     const ReduceScatterOptions& options) {
  return {CollectiveKind::kReduceScatter,
          recv.dtype,
          recv.count,
          0,
          options.op,
          options.tag};
}

CollectiveCall DescribeBarrier(const BarrierOptions& options) {
  return {CollectiveKind::kBarrier, DType::kF32, 0, 0,
          ReduceOp::kSum,           options.tag};
}

absl::Status CheckBroadcastArgs(const ProcessGroup& group, ConstBuffer buffer,
                                const BroadcastOptions& options) {
  const CollectiveCall call = DescribeBroadcast(buffer, options);
  if (absl::Status s = CheckRoot(group, call); !s.ok()) return s;
  return CheckBuffer(group, call, "buffer", buffer);
}

absl::Status CheckReduceArgs(const ProcessGroup& group, ConstBuffer send,
                             ConstBuffer recv, const ReduceOptions& options) {
  const CollectiveCall call = DescribeReduce(send, options);
  if (absl::Status s = CheckRoot(group, call); !s.ok()) return s;
  if (absl::Status s = CheckOp(group, call); !s.ok()) return s;
  if (absl::Status s = CheckBuffer(group, call, "send", send); !s.ok()) {
    return s;
  }
  if (group.rank() != options.root) return absl::OkStatus();
  if (absl::Status s = CheckBuffer(group, call, "recv", recv); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckSameDType(group, call, send, recv); !s.ok()) {
    return s;
  }
  if (recv.count != send.count) {
    return Invalid(
        group, call,
        absl::StrCat("recv.count is ", recv.count,
                     " at the root, expected send.count = ", send.count));
  }
  return CheckOverlap(group, call, send, recv, 0, "send == recv");
}

absl::Status CheckAllReduceArgs(const ProcessGroup& group, ConstBuffer buffer,
                                const AllReduceOptions& options) {
  const CollectiveCall call = DescribeAllReduce(buffer, options);
  if (absl::Status s = CheckOp(group, call); !s.ok()) return s;
  return CheckBuffer(group, call, "buffer", buffer);
}

absl::Status CheckAllGatherArgs(const ProcessGroup& group, ConstBuffer send,
                                ConstBuffer recv,
                                const AllGatherOptions& options) {
  const CollectiveCall call = DescribeAllGather(send, options);
  if (absl::Status s = CheckBuffer(group, call, "send", send); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckBuffer(group, call, "recv", recv); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckSameDType(group, call, send, recv); !s.ok()) {
    return s;
  }
  const size_t n = static_cast<size_t>(group.size());
  if (send.count > std::numeric_limits<size_t>::max() / n ||
      recv.count != n * send.count) {
    return Invalid(group, call,
                   absl::StrCat("recv.count is ", recv.count,
                                ", expected size() * send.count = ", n, " * ",
                                send.count));
  }
  return CheckOverlap(group, call, send, recv, group.rank() * send.bytes(),
                      "send == recv + rank * count");
}

absl::Status CheckReduceScatterArgs(const ProcessGroup& group, ConstBuffer send,
                                    ConstBuffer recv,
                                    const ReduceScatterOptions& options) {
  const CollectiveCall call = DescribeReduceScatter(recv, options);
  if (absl::Status s = CheckOp(group, call); !s.ok()) return s;
  if (absl::Status s = CheckBuffer(group, call, "send", send); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckBuffer(group, call, "recv", recv); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckSameDType(group, call, send, recv); !s.ok()) {
    return s;
  }
  const size_t n = static_cast<size_t>(group.size());
  if (recv.count > std::numeric_limits<size_t>::max() / n ||
      send.count != n * recv.count) {
    return Invalid(group, call,
                   absl::StrCat("send.count is ", send.count,
                                ", expected size() * recv.count = ", n, " * ",
                                recv.count));
  }
  return CheckOverlap(group, call, recv, send, group.rank() * recv.bytes(),
                      "recv == send + rank * count");
}

}  // namespace comm
}  // namespace chunkzero
