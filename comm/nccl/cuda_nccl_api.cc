// The CUDA build of MakeCudaNcclApi (selected by --config=cuda).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "comm/nccl/nccl_api.h"

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

absl::Status FromCuda(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorString(error)));
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
cudaEvent_t Raw(CudaEvent e) { return reinterpret_cast<cudaEvent_t>(e); }

// Makes `device` current for the scope and restores the caller's device
// after, so that events, streams and kernels meet in one context whatever
// thread calls (the watchdog, a staging worker, the caller).
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    status_ = FromCuda(cudaSetDevice(device),
                       absl::StrCat("cudaSetDevice(", device, ")"));
  }
  ~ScopedDevice() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  absl::Status status_;
};

class CudaNcclApi final : public NcclApi {
 public:
  explicit CudaNcclApi(int device_index) : device_(device_index) {}
  ~CudaNcclApi() override {
    const ScopedDevice device(device_);
    MutexLock lock(&mu_);
    for (CudaEvent event : idle_events_) cudaEventDestroy(Raw(event));
  }

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
    const ScopedDevice device(device_);
    if (!device.status().ok()) return device.status();
    ncclUniqueId id;
    std::memcpy(id.internal, unique_id.data(), NCCL_UNIQUE_ID_BYTES);
    ncclComm_t comm = nullptr;
    if (absl::Status s = FromNccl(ncclCommInitRank(&comm, size, id, rank),
                                  "ncclCommInitRank");
        !s.ok()) {
      return s;
    }
    return reinterpret_cast<Comm>(comm);
  }

  absl::Status AsyncError(Comm comm) override {
    const ScopedDevice device(device_);
    ncclResult_t async = ncclSuccess;
    if (absl::Status s = FromNccl(ncclCommGetAsyncError(Raw(comm), &async),
                                  "ncclCommGetAsyncError");
        !s.ok()) {
      return s;
    }
    return FromNccl(async, "NCCL asynchronous error");
  }

  absl::Status Abort(Comm comm) override {
    const ScopedDevice device(device_);
    return FromNccl(ncclCommAbort(Raw(comm)), "ncclCommAbort");
  }

  absl::StatusOr<void*> Malloc(size_t bytes) override {
    const ScopedDevice device(device_);
    if (!device.status().ok()) return device.status();
    void* ptr = nullptr;
    if (absl::Status s = FromCuda(cudaMalloc(&ptr, bytes), "cudaMalloc");
        !s.ok()) {
      return s;
    }
    return ptr;
  }

  void Free(void* ptr) override {
    const ScopedDevice device(device_);
    cudaFree(ptr);
  }

  absl::Status Enqueue(Comm comm, const NcclCall& call,
                       CudaStream stream) override {
    const ScopedDevice device(device_);
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
    const ScopedDevice device(device_);
    if (!device.status().ok()) return device.status();
    cudaStream_t stream = nullptr;
    if (absl::Status s =
            FromCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                     "cudaStreamCreateWithFlags");
        !s.ok()) {
      return s;
    }
    return reinterpret_cast<CudaStream>(stream);
  }

  void DestroyStream(CudaStream stream) override {
    const ScopedDevice device(device_);
    cudaStreamDestroy(Raw(stream));
  }

  absl::Status StreamWaitStream(CudaStream stream, CudaStream after) override {
    const ScopedDevice device(device_);
    absl::StatusOr<CudaEvent> event = RecordEvent(after);
    if (!event.ok()) return event.status();
    const absl::Status status =
        FromCuda(cudaStreamWaitEvent(Raw(stream), Raw(*event), 0),
                 "cudaStreamWaitEvent");
    ReleaseEvent(*event);  // The wait holds on to what it needs.
    return status;
  }

  absl::Status StreamWaitEvent(CudaStream stream, CudaEvent event) override {
    const ScopedDevice device(device_);
    if (!device.status().ok()) return device.status();
    return FromCuda(cudaStreamWaitEvent(Raw(stream), Raw(event), 0),
                    "cudaStreamWaitEvent");
  }

  absl::StatusOr<CudaEvent> RecordEvent(CudaStream stream) override {
    const ScopedDevice device(device_);
    if (!device.status().ok()) return device.status();
    CudaEvent event = nullptr;
    {
      MutexLock lock(&mu_);
      if (!idle_events_.empty()) {
        event = idle_events_.back();
        idle_events_.pop_back();
      }
    }
    if (event == nullptr) {
      cudaEvent_t raw = nullptr;
      if (absl::Status s =
              FromCuda(cudaEventCreateWithFlags(&raw, cudaEventDisableTiming),
                       "cudaEventCreateWithFlags");
          !s.ok()) {
        return s;
      }
      event = reinterpret_cast<CudaEvent>(raw);
    }
    if (absl::Status s = FromCuda(cudaEventRecord(Raw(event), Raw(stream)),
                                  "cudaEventRecord");
        !s.ok()) {
      ReleaseEvent(event);
      return s;
    }
    return event;
  }

  absl::StatusOr<bool> EventDone(CudaEvent event) override {
    const ScopedDevice device(device_);
    const cudaError_t error = cudaEventQuery(Raw(event));
    if (error == cudaSuccess) return true;
    if (error == cudaErrorNotReady) {
      cudaGetLastError();  // Not sticky; clear it.
      return false;
    }
    return FromCuda(error, "cudaEventQuery");
  }

  void ReleaseEvent(CudaEvent event) override {
    MutexLock lock(&mu_);
    idle_events_.push_back(event);
  }

 private:
  const int device_;
  Mutex mu_;
  std::vector<CudaEvent> idle_events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<NcclApi> MakeCudaNcclApi(int device_index) {
  return std::make_unique<CudaNcclApi>(device_index);
}

}  // namespace comm
}  // namespace chunkzero
