// MakeCudaNcclApi without --config=cuda: every call is Unimplemented.
#include "comm/nccl/nccl_api.h"

namespace chunkzero {
namespace comm {
namespace {

absl::Status NoNccl() {
  return absl::UnimplementedError(
      "NCCL: this binary was built without --config=cuda");
}

class NoNcclApi final : public NcclApi {
 public:
  absl::StatusOr<std::string> GetUniqueId() override { return NoNccl(); }
  absl::StatusOr<Comm> InitRank(int, const std::string&, int) override {
    return NoNccl();
  }
  absl::StatusOr<bool> Ready(Comm) override { return NoNccl(); }
  absl::Status AsyncError(Comm) override { return NoNccl(); }
  absl::Status Abort(Comm) override { return NoNccl(); }
  absl::StatusOr<void*> Malloc(size_t) override { return NoNccl(); }
  void Free(void*) override {}
  absl::Status Enqueue(Comm, const NcclCall&, CudaStream) override {
    return NoNccl();
  }
  absl::StatusOr<CudaStream> CreateStream() override { return NoNccl(); }
  void DestroyStream(CudaStream) override {}
  absl::Status StreamWaitStream(CudaStream, CudaStream) override {
    return NoNccl();
  }
  absl::Status StreamWaitEvent(CudaStream, CudaEvent) override {
    return NoNccl();
  }
  absl::StatusOr<CudaEvent> RecordEvent(CudaStream) override {
    return NoNccl();
  }
  absl::StatusOr<bool> EventDone(CudaEvent) override { return NoNccl(); }
  void ReleaseEvent(CudaEvent) override {}
};

}  // namespace

std::unique_ptr<NcclApi> MakeCudaNcclApi(int) {
  return std::make_unique<NoNcclApi>();
}

}  // namespace comm
}  // namespace chunkzero
