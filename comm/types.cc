#include "comm/types.h"

#include "absl/strings/str_cat.h"

namespace chunkzero {
namespace comm {

bool operator==(const ConstBuffer& a, const ConstBuffer& b) {
  return a.data == b.data && a.count == b.count && a.dtype == b.dtype;
}

bool operator==(const MutableBuffer& a, const MutableBuffer& b) {
  return a.data == b.data && a.count == b.count && a.dtype == b.dtype;
}

std::ostream& operator<<(std::ostream& os, const ConstBuffer& b) {
  return os << "ConstBuffer{" << b.data << ", count=" << b.count << ", "
            << b.dtype << "}";
}

std::ostream& operator<<(std::ostream& os, const MutableBuffer& b) {
  return os << "MutableBuffer{" << b.data << ", count=" << b.count << ", "
            << b.dtype << "}";
}

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "invalid";
}

std::ostream& operator<<(std::ostream& os, ReduceOp op) {
  return os << ReduceOpName(op);
}

absl::string_view CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kBroadcast:
      return "Broadcast";
    case CollectiveKind::kReduce:
      return "Reduce";
    case CollectiveKind::kAllReduce:
      return "AllReduce";
    case CollectiveKind::kAllGather:
      return "AllGather";
    case CollectiveKind::kReduceScatter:
      return "ReduceScatter";
    case CollectiveKind::kBarrier:
      return "Barrier";
  }
  return "Invalid";
}

std::ostream& operator<<(std::ostream& os, CollectiveKind kind) {
  return os << CollectiveKindName(kind);
}

std::string CollectiveCall::ToString() const {
  if (kind == CollectiveKind::kBarrier) {
    return tag.empty() ? "Barrier()" : absl::StrCat("Barrier(tag=", tag, ")");
  }
  std::string s = absl::StrCat(CollectiveKindName(kind), "(", DTypeName(dtype),
                               ", count=", count);
  if (KindHasRoot(kind)) absl::StrAppend(&s, ", root=", root);
  if (KindHasReduceOp(kind)) absl::StrAppend(&s, ", op=", ReduceOpName(op));
  if (!tag.empty()) absl::StrAppend(&s, ", tag=", tag);
  s += ")";
  return s;
}

bool Matches(const CollectiveCall& a, const CollectiveCall& b) {
  if (a.kind != b.kind || a.tag != b.tag) return false;
  if (a.kind == CollectiveKind::kBarrier) return true;
  if (a.dtype != b.dtype || a.count != b.count) return false;
  if (KindHasRoot(a.kind) && a.root != b.root) return false;
  if (KindHasReduceOp(a.kind) && a.op != b.op) return false;
  return true;
}

bool operator==(const CollectiveCall& a, const CollectiveCall& b) {
  return Matches(a, b);
}

std::ostream& operator<<(std::ostream& os, const CollectiveCall& c) {
  return os << c.ToString();
}

}  // namespace comm
}  // namespace chunkzero
