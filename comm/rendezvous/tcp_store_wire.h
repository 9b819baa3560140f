// The wire format of chunkzero's TCP rendezvous store (tcp_store.h,
// tcp_store_server.h). Not part of the comm interface.
//
// Every message, either way, is a frame: a 4-byte little-endian body
// length, then the body: a 1-byte code, a 4-byte little-endian part count,
// and each part as a 4-byte little-endian length and its bytes.
//
//   request            response
//   kSet  [key, value] kOk | kExists
//   kGet  [key]        kOk [value] | kMissing
//   kCheck [keys...]   kOk (every key is set) | kMissing
//   anything else      kBadRequest [message], then the server hangs up
#ifndef CHUNKZERO_COMM_RENDEZVOUS_TCP_STORE_WIRE_H_
#define CHUNKZERO_COMM_RENDEZVOUS_TCP_STORE_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace chunkzero {
namespace comm {
namespace tcp_store_wire {

enum Code : uint8_t {
  // Requests.
  kSet = 1,
  kGet = 2,
  kCheck = 3,
  // Responses.
  kOk = 10,
  kExists = 11,
  kMissing = 12,
  kBadRequest = 13,
};

// A frame's body may hold at most this many bytes (rendezvous values are
// addresses and ids, a few hundred bytes): a peer announcing more is not
// speaking this protocol.
inline constexpr size_t kMaxBodyBytes = size_t{1} << 24;
inline constexpr size_t kLengthBytes = 4;

struct Frame {
  uint8_t code = 0;
  std::vector<std::string> parts;
};

// The whole frame, length prefix included.
std::string EncodeFrame(uint8_t code, absl::Span<const std::string> parts);

// The body length a frame's first kLengthBytes announce; InvalidArgument
// past kMaxBodyBytes.
[[nodiscard]] absl::StatusOr<size_t> DecodeBodyLength(
    absl::string_view length_bytes);

// Parses a frame's body; InvalidArgument if its parts do not fill it
// exactly.
[[nodiscard]] absl::StatusOr<Frame> DecodeBody(absl::string_view body);

}  // namespace tcp_store_wire
}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_RENDEZVOUS_TCP_STORE_WIRE_H_
