// ParamStaging: the compute-dtype param ranges that travel for a ZeRO-Offload
// update, whose grads come to host memory ahead of their update and whose
// updated weights go back while the next chunk updates.
//
//   ParamStaging staging(copier, &pinned_cache);
//   CZ_RETURN_IF_ERROR(staging.Fetch(chunk0, b0, e0));
//   CZ_RETURN_IF_ERROR(staging.Fetch(chunk1, b1, e1));   // chunk 1 travels
//   CZ_ASSIGN_OR_RETURN(void* host, staging.Get(chunk0)); // while 0 updates
//   ... the CPU kernel updates `host` in place ...
//   CZ_RETURN_IF_ERROR(staging.Return(chunk0));
//   ...
//   CZ_RETURN_IF_ERROR(staging.Finish());
//
// Copies run on `copier` (a CUDA stream for a GPU,
// tensor/memory/async_copier.h) in issue order. Staging memory comes from
// `host_memory` (pinned, cached) and goes back once its range is back on the
// device; at most two returned ranges are in flight, so the host holds about
// three ranges at a time. Internal to optim/. Not thread-safe. Destruction
// waits for the copies.
#ifndef CHUNKZERO_OPTIM_INTERNAL_PARAM_STAGING_H_
#define CHUNKZERO_OPTIM_INTERNAL_PARAM_STAGING_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "chunk/chunk.h"
#include "tensor/memory/allocator_base.h"
#include "tensor/memory/async_copier.h"

namespace chunkzero {
namespace optim_internal {

class ParamStaging {
 public:
  ParamStaging(AsyncCopier* copier, Allocator* host_memory)
      : copier_(copier), host_memory_(host_memory) {}
  ~ParamStaging();
  ParamStaging(const ParamStaging&) = delete;
  ParamStaging& operator=(const ParamStaging&) = delete;

  // Starts copying elements [begin, end) of `chunk`'s payload at rest
  // (on copier's device) into staging memory. One range per chunk. With
  // `copy_in` false the range only gets its staging memory (its contents
  // are about to be overwritten: an update whose grads come from the
  // accumulator), and only Return copies.
  [[nodiscard]] absl::Status Fetch(Chunk* chunk, int64_t begin, int64_t end,
                                   bool copy_in = true);
  // The host copy of the range fetched for `chunk`, once it has arrived.
  [[nodiscard]] absl::StatusOr<void*> Get(Chunk* chunk);
  // Starts copying the (updated) host copy back into the chunk.
  [[nodiscard]] absl::Status Return(Chunk* chunk);
  // Waits for every copy and gives all staging memory back.
  [[nodiscard]] absl::Status Finish();

 private:
  struct Range {
    void* host = nullptr;
    size_t bytes = 0;
    char* device = nullptr;
    AsyncCopier::Ticket ticket = 0;  // Of the last copy issued for it.
  };
  // Waits for the oldest returned range and frees its staging memory.
  absl::Status RetireOldest();

  AsyncCopier* const copier_;
  Allocator* const host_memory_;
  std::map<const Chunk*, Range> fetched_;
  std::deque<Range> returned_;
};

}  // namespace optim_internal
}  // namespace chunkzero

#endif  // CHUNKZERO_OPTIM_INTERNAL_PARAM_STAGING_H_
