#include "comm/rendezvous/tcp_store_wire.h"

#include "absl/strings/str_cat.h"

namespace chunkzero {
namespace comm {
namespace tcp_store_wire {
namespace {

void AppendU32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

uint32_t ReadU32(absl::string_view bytes) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  }
  return v;
}

}  // namespace

std::string EncodeFrame(uint8_t code, absl::Span<const std::string> parts) {
  size_t body = 1 + 4;
  for (const std::string& p : parts) body += 4 + p.size();
  std::string out;
  out.reserve(kLengthBytes + body);
  AppendU32(static_cast<uint32_t>(body), &out);
  out.push_back(static_cast<char>(code));
  AppendU32(static_cast<uint32_t>(parts.size()), &out);
  for (const std::string& p : parts) {
    AppendU32(static_cast<uint32_t>(p.size()), &out);
    out.append(p);
  }
  return out;
}

absl::StatusOr<size_t> DecodeBodyLength(absl::string_view length_bytes) {
  if (length_bytes.size() != kLengthBytes) {
    return absl::InvalidArgumentError(absl::StrCat("frame length needs ",
                                                   kLengthBytes, " bytes, got ",
                                                   length_bytes.size()));
  }
  const size_t length = ReadU32(length_bytes);
  if (length > kMaxBodyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("frame of ", length,
                                                   " bytes is longer than the ",
                                                   kMaxBodyBytes, " allowed"));
  }
  return length;
}

absl::StatusOr<Frame> DecodeBody(absl::string_view body) {
  if (body.size() < 5) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame body of ", body.size(),
                     " bytes is shorter than its code and part count"));
  }
  Frame frame;
  frame.code = static_cast<uint8_t>(body[0]);
  const uint32_t count = ReadU32(body.substr(1, 4));
  body.remove_prefix(5);
  // Each part takes at least its 4 length bytes: a count the body cannot
  // hold is refused before anything is reserved for it.
  if (count > body.size() / 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "frame announces ", count, " parts in ", body.size(), " bytes"));
  }
  frame.parts.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    if (body.size() < 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("frame ends inside part ", i, "'s length"));
    }
    const uint32_t length = ReadU32(body.substr(0, 4));
    body.remove_prefix(4);
    if (length > body.size()) {
      return absl::InvalidArgumentError(absl::StrCat("part ", i, " announces ",
                                                     length, " bytes but ",
                                                     body.size(), " are left"));
    }
    frame.parts.emplace_back(body.substr(0, length));
    body.remove_prefix(length);
  }
  if (!body.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame has ", body.size(), " bytes after its parts"));
  }
  return frame;
}

}  // namespace tcp_store_wire
}  // namespace comm
}  // namespace chunkzero
