#include "optim/internal/param_staging.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "optim/internal/host_range.h"

namespace chunkzero {
namespace optim_internal {

ParamStaging::~ParamStaging() {
  Finish().IgnoreError();  // An error here was (or will be) seen by Finish.
}

absl::Status ParamStaging::Fetch(Chunk* chunk, int64_t begin, int64_t end,
                                 bool copy_in) {
  if (fetched_.count(chunk) > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("chunk ", chunk->name(), " is already staged"));
  }
  Range range;
  range.bytes = static_cast<size_t>(end - begin) * ElementSize(chunk->dtype());
  range.device = PayloadAt(chunk, begin);
  absl::StatusOr<void*> host = host_memory_->Allocate(range.bytes);
  CZ_RETURN_IF_ERROR(host.status(), "staging chunk ", chunk->name(),
                     " in host memory");
  range.host = *host;
  if (!copy_in) {
    fetched_[chunk] = range;  // Ticket 0: nothing to wait for.
    return absl::OkStatus();
  }
  absl::StatusOr<AsyncCopier::Ticket> ticket = copier_->Copy(
      range.host, Device::Cpu(), range.device, chunk->device(), range.bytes);
  if (!ticket.ok()) {
    host_memory_->Deallocate(range.host, range.bytes);
    return absl::Status(ticket.status().code(),
                        absl::StrCat("staging chunk ", chunk->name(), ": ",
                                     ticket.status().message()));
  }
  range.ticket = *ticket;
  fetched_[chunk] = range;
  return absl::OkStatus();
}

absl::StatusOr<void*> ParamStaging::Get(Chunk* chunk) {
  auto it = fetched_.find(chunk);
  if (it == fetched_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("chunk ", chunk->name(), " was not fetched"));
  }
  CZ_RETURN_IF_ERROR(copier_->Wait(it->second.ticket), "staging chunk ",
                     chunk->name(), " in host memory");
  return it->second.host;
}

absl::Status ParamStaging::Return(Chunk* chunk) {
  auto it = fetched_.find(chunk);
  if (it == fetched_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("chunk ", chunk->name(), " was not fetched"));
  }
  Range range = it->second;
  fetched_.erase(it);
  absl::StatusOr<AsyncCopier::Ticket> ticket = copier_->Copy(
      range.device, chunk->device(), range.host, Device::Cpu(), range.bytes);
  if (!ticket.ok()) {
    host_memory_->Deallocate(range.host, range.bytes);
    return absl::Status(ticket.status().code(),
                        absl::StrCat("writing chunk ", chunk->name(),
                                     " back: ", ticket.status().message()));
  }
  range.ticket = *ticket;
  returned_.push_back(range);
  // Keep two returns in flight at most.
  while (returned_.size() > 2) CZ_RETURN_IF_ERROR(RetireOldest());
  return absl::OkStatus();
}

absl::Status ParamStaging::RetireOldest() {
  const Range range = returned_.front();
  returned_.pop_front();
  const absl::Status waited = copier_->Wait(range.ticket);
  host_memory_->Deallocate(range.host, range.bytes);
  return waited;
}

absl::Status ParamStaging::Finish() {
  absl::Status status = copier_->WaitAll();
  while (!returned_.empty()) status.Update(RetireOldest());
  for (auto& [chunk, range] : fetched_) {
    host_memory_->Deallocate(range.host, range.bytes);
  }
  fetched_.clear();
  return status;
}

}  // namespace optim_internal
}  // namespace chunkzero
