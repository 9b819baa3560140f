// Macros that propagate absl::Status and absl::StatusOr values.
//
//   CZ_RETURN_IF_ERROR(chunk.Access());
//   CZ_RETURN_IF_ERROR(group.Barrier(), "while closing chunk ", id);
//   CZ_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(shape, DType::kF16));
//
// The optional trailing arguments to CZ_RETURN_IF_ERROR are appended (with
// absl::StrCat) to the message of a failing status, so that context is added
// on the way up while the status code is kept.
#ifndef CHUNKZERO_BASE_STATUS_MACROS_H_
#define CHUNKZERO_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace chunkzero {
namespace status_internal {

// Returns `status` with `context` appended to its message ("msg; context").
[[nodiscard]] inline absl::Status Annotate(const absl::Status& status) {
  return status;
}

template <typename... Args>
[[nodiscard]] absl::Status Annotate(const absl::Status& status,
                                    const Args&... context) {
  absl::Status annotated(status.code(),
                         absl::StrCat(status.message(), "; ", context...));
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
    annotated.SetPayload(url, payload);
  });
  return annotated;
}

inline const absl::Status& GetStatus(const absl::Status& status) {
  return status;
}
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

}  // namespace status_internal
}  // namespace chunkzero

#define CZ_STATUS_CONCAT_INNER_(a, b) a##b
#define CZ_STATUS_CONCAT_(a, b) CZ_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status or absl::StatusOr); if it is not OK,
// returns it from the enclosing function with any extra arguments appended to
// its message.
#define CZ_RETURN_IF_ERROR(expr, ...)                                        \
  do {                                                                       \
    const auto& cz_status_ = (expr);                                         \
    if (!::chunkzero::status_internal::GetStatus(cz_status_).ok()) {         \
      return ::chunkzero::status_internal::Annotate(                         \
          ::chunkzero::status_internal::GetStatus(cz_status_) __VA_OPT__(, ) \
              __VA_ARGS__);                                                  \
    }                                                                        \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status,
// otherwise moves the value into `lhs` (which may be a declaration).
#define CZ_ASSIGN_OR_RETURN(lhs, rexpr)                                     \
  CZ_ASSIGN_OR_RETURN_IMPL_(CZ_STATUS_CONCAT_(cz_statusor_, __LINE__), lhs, \
                            rexpr)

#define CZ_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr)    \
  auto statusor = (rexpr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // CHUNKZERO_BASE_STATUS_MACROS_H_
