// What a model does with the arrays it computes in (activations kept from
// Forward to Backward, Backward's scratch), written once: counting them and
// making them again under the device limit when the batch shape changes.
// A model describes its arrays with a visitor,
//
//   visit(batch, seq, fn) calls fn(buffer, elements, role, shared)
//
// for every DeviceArray it holds, with `shared` the elements of a kept
// array that are the checkpointed blocks' recompute slot (0 for arrays
// without slots or without checkpointing).
#ifndef CHUNKZERO_MODELS_COMMON_MODEL_BUFFERS_H_
#define CHUNKZERO_MODELS_COMMON_MODEL_BUFFERS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "models/common/language_model.h"
#include "models/common/parameter_scopes.h"
#include "tensor/device.h"

namespace chunkzero {

// What an array is for.
enum class BufferRole { kKept, kScratch };

// The kept arrays' bytes for `batch` x `seq` (LanguageModel::
// ActivationBytes), `checkpointed` blocks recomputing into the shared slot.
template <typename Visit>
LanguageModel::ActivationBytes CountActivationBytes(Visit&& visit, int batch,
                                                    int seq, int checkpointed) {
  LanguageModel::ActivationBytes out;
  visit(
      batch, seq, [&](auto& buffer, size_t n, BufferRole role, size_t shared) {
        if (role != BufferRole::kKept) return;
        const int64_t element = static_cast<int64_t>(buffer.kElementBytes);
        out.kept += static_cast<int64_t>(n - shared) * element;
        out.recompute_buffer += static_cast<int64_t>(shared) * element;
        out.recomputed += static_cast<int64_t>(shared) * element * checkpointed;
      });
  return out;
}

// Drops every array, then makes them for `batch` x `seq` on `device`,
// reporting their bytes through `scopes` first (ResourceExhausted under its
// limit, nothing held then); the device's own error, nothing held, when it
// cannot hold them.
template <typename Visit>
absl::Status RemakeBuffers(Visit&& visit, int batch, int seq, Device device,
                           ParameterScopes& scopes) {
  int64_t bytes = 0;
  visit(batch, seq, [&](auto& buffer, size_t n, BufferRole, size_t) {
    bytes += static_cast<int64_t>(n * buffer.kElementBytes);
  });
  auto drop = [&] {
    visit(0, 0,
          [](auto& buffer, size_t, BufferRole, size_t) { buffer.Reset(); });
  };
  // The old arrays go first, so that the limit sees only the new ones.
  drop();
  CZ_RETURN_IF_ERROR(scopes.HoldBuffers(0));
  CZ_RETURN_IF_ERROR(scopes.HoldBuffers(bytes));
  absl::Status made = absl::OkStatus();
  visit(batch, seq, [&](auto& buffer, size_t n, BufferRole, size_t) {
    if (made.ok()) made = buffer.Allocate(n, device);
  });
  if (!made.ok()) {
    drop();
    scopes.HoldBuffers(0).IgnoreError();  // Shrinking always fits.
  }
  return made;
}

}  // namespace chunkzero

#endif  // CHUNKZERO_MODELS_COMMON_MODEL_BUFFERS_H_
