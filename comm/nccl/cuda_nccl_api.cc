// The CUDA build of MakeCudaNcclApi (selected by --config=cuda).
#include <nccl.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "comm/nccl/nccl_api.h"
#include "tensor/cuda/cuda_runtime.h"
#include "tensor/memory/gpu_memory_runtime.h"

namespace chunkzero {
namespace comm {
namespace {

absl::Status FromNccl(ncclResult_t result, absl::string_view what) {
  if (result == ncclSuccess || result == ncclInProgress) {
    return absl::OkStatus();
  }
  const absl::StatusCode code =
      result == ncclInvalidArgument || result == ncclInvalidUsage
          ? absl::StatusCode::kInvalidArgument
      : result == ncclRemoteError || result == ncclSystemError
          ? absl::StatusCode::kUnavailable
          : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(what, ": ", ncclGetErrorString(result),
                                         " (", ncclGetLastError(nullptr), ")"));
}

ncclDataType_t NcclType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kU8:
      return ncclUint8;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kF64:
      return ncclFloat64;
  }
  return ncclFloat32;  // Unreachable: every DType is listed.
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:  // Integers: sum, then divide; floats: premultiply.
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;  // Unreachable: every ReduceOp is listed.
}

ncclComm_t Raw(NcclApi::Comm comm) {
  return reinterpret_cast<ncclComm_t>(comm);
}
cudaStream_t Raw(CudaStream s) { return reinterpret_cast<cudaStream_t>(s); }

class CudaNcclApi final : public NcclApi {
 public:
  explicit CudaNcclApi(int device_index)
      : device_(device_index), memory_(device_index) {}

  absl::StatusOr<std::string> GetUniqueId() override {
    ncclUniqueId id;
    if (absl::Status s = FromNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
        !s.ok()) {
      return s;
    }
    return std::string(id.internal, sizeof(id.internal));
  }

  absl::StatusOr<Comm> InitRank(int size, const std::string& unique_id,
                                int rank) override {
    if (unique_id.size() != NCCL_UNIQUE_ID_BYTES) {
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL unique id of ", unique_id.size(),
                       " bytes, expected ", NCCL_UNIQUE_ID_BYTES));
    }
    const ScopedCudaDevice device(device_);
    if (!device.status().ok()) return device.status();
    ncclUniqueId id;
    std::memcpy(id.internal, unique_id.data(), NCCL_UNIQUE_ID_BYTES);
    ncclComm_t comm = nullptr;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    if (absl::Status s =
            FromNccl(ncclCommInitRankConfig(&comm, size, id, rank, &config),
                     "ncclCommInitRankConfig");
        !s.ok()) {
      return s;
    }
    return reinterpret_cast<Comm>(comm);
  }

  absl::StatusOr<bool> Ready(Comm comm) override {
    const ScopedCudaDevice device(device_);
    ncclResult_t state = ncclSuccess;
    if (absl::Status s = FromNccl(ncclCommGetAsyncError(Raw(comm), &state),
                                  "ncclCommGetAsyncError");
        !s.ok()) {
      return s;
    }
    if (state == ncclInProgress) return false;
    if (absl::Status s = FromNccl(state, "NCCL asynchronous error"); !s.ok()) {
      return s;
    }
    return true;
  }

  // In progress is healthy: only the error matters here.
  absl::Status AsyncError(Comm comm) override { return Ready(comm).status(); }

  absl::Status Abort(Comm comm) override {
    const ScopedCudaDevice device(device_);
    return FromNccl(ncclCommAbort(Raw(comm)), "ncclCommAbort");
  }

  // Memory, streams and events: the CUDA runtime wrappers, and the event
  // pool of CudaMemoryRuntime (each selects this API's GPU).
  absl::StatusOr<void*> Malloc(size_t bytes) override {
    return memory_.Malloc(bytes);
  }

  void Free(void* ptr) override {
    // A failure means a broken context: nothing left to do with the error.
    memory_.Free(ptr).IgnoreError();
  }

  absl::Status Enqueue(Comm comm, const NcclCall& call,
                       CudaStream stream) override {
    const ScopedCudaDevice device(device_);
    if (!device.status().ok()) return device.status();
    const ncclDataType_t type = NcclType(call.dtype);
    const ncclRedOp_t op = NcclOp(call.op);
    ncclResult_t result = ncclSuccess;
    switch (call.kind) {
      case CollectiveKind::kBroadcast:
        result = ncclBroadcast(call.send, call.recv, call.count, type,
                               call.root, Raw(comm), Raw(stream));
        break;
      case CollectiveKind::kReduce:
        result = ncclReduce(call.send, call.recv, call.count, type, op,
                            call.root, Raw(comm), Raw(stream));
        break;
      case CollectiveKind::kAllReduce:
      case CollectiveKind::kBarrier:
        result = ncclAllReduce(call.send, call.recv, call.count, type, op,
                               Raw(comm), Raw(stream));
        break;
      case CollectiveKind::kAllGather:
        result = ncclAllGather(call.send, call.recv, call.count, type,
                               Raw(comm), Raw(stream));
        break;
      case CollectiveKind::kReduceScatter:
        result = ncclReduceScatter(call.send, call.recv, call.count, type, op,
                                   Raw(comm), Raw(stream));
        break;
    }
    return FromNccl(result, CollectiveKindName(call.kind));
  }

  absl::StatusOr<CudaStream> CreateStream() override {
    const ScopedCudaDevice device(device_);
    return CudaStreamCreate(device_);
  }

  void DestroyStream(CudaStream stream) override {
    const ScopedCudaDevice device(device_);
    CudaStreamDestroy(stream).IgnoreError();  // As Free.
  }

  absl::Status StreamWaitStream(CudaStream stream, CudaStream after) override {
    absl::StatusOr<CudaEvent> event = RecordEvent(after);
    if (!event.ok()) return event.status();
    const absl::Status status = StreamWaitEvent(stream, *event);
    ReleaseEvent(*event);  // The wait holds on to what it needs.
    return status;
  }

  absl::Status StreamWaitEvent(CudaStream stream, CudaEvent event) override {
    const ScopedCudaDevice device(device_);
    if (!device.status().ok()) return device.status();
    return CudaStreamWaitEvent(stream, event);
  }

  absl::StatusOr<CudaEvent> RecordEvent(CudaStream stream) override {
    return memory_.RecordEvent(stream);
  }

  absl::StatusOr<bool> EventDone(CudaEvent event) override {
    return memory_.EventDone(event);
  }

  void ReleaseEvent(CudaEvent event) override { memory_.ReleaseEvent(event); }

 private:
  const int device_;
  CudaMemoryRuntime memory_;
};

}  // namespace

std::unique_ptr<NcclApi> MakeCudaNcclApi(int device_index) {
  return std::make_unique<CudaNcclApi>(device_index);
}

}  // namespace comm
}  // namespace chunkzero
