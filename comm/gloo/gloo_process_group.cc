#include "comm/gloo/gloo_process_group.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/thread.h"
#include "comm/argument_checks.h"
#include "comm/gloo/catch_gloo.h"
#include "comm/gloo/shared_segments.h"
#include "comm/gloo/worker.h"
#include "comm/internal/deadline.h"
#include "comm/net/peer_probe.h"
#include "comm/rendezvous/job_config.h"
#include "comm/rendezvous/rendezvous_join.h"
#include "comm/rendezvous/timed_file_store.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"

namespace chunkzero {
namespace comm {
namespace gloo_internal {
namespace {

// Prefix of the rendezvous key a rank sets in the store when it joins
// (comm/rendezvous/rendezvous_join.h).
constexpr char kJoinKeyPrefix[] = "chunkzero_gloo_joined_";

absl::Status CheckResolvable(const std::string& hostname) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int error = getaddrinfo(hostname.c_str(), nullptr, &hints, &result);
  if (result != nullptr) freeaddrinfo(result);
  if (error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", hostname, ": ", gai_strerror(error)));
  }
  return absl::OkStatus();
}

// A store whose waits last until `deadline`, whatever timeout the caller
// gives: connectFullMesh waits on the store with the context's timeout,
// which Create shortens for Gloo's connects (see there).
class WaitsUntilTheDeadline final : public gloo::rendezvous::Store {
 public:
  WaitsUntilTheDeadline(gloo::rendezvous::Store& base, absl::Time deadline)
      : base_(base), deadline_(deadline) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    base_.set(key, data);
  }
  std::vector<char> get(const std::string& key) override {
    return base_.get(key);
  }
  void wait(const std::vector<std::string>& keys) override {
    wait(keys, std::chrono::milliseconds(1));
  }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds&) override {
    // A rank that gave up (AnnounceGiveUp) fails the wait at once; the
    // deadline's own timeout is the store's, worded as Gloo's callers
    // expect.
    const absl::Status waited = comm_internal::WaitForKeys(
        base_, keys, kJoinKeyPrefix, deadline_ - absl::Milliseconds(100),
        "the rendezvous");
    if (waited.ok()) return;
    if (!absl::IsDeadlineExceeded(waited)) {
      throw gloo::IoException(std::string(waited.message()));
    }
    // At least 1 ms: Gloo reads 0 as "no timeout".
    base_.wait(keys, std::max(std::chrono::milliseconds(1),
                              comm_internal::MillisecondsLeft(deadline_)));
  }

 private:
  gloo::rendezvous::Store& base_;
  const absl::Time deadline_;
};

}  // namespace
}  // namespace gloo_internal

absl::StatusOr<std::unique_ptr<GlooProcessGroup>> GlooProcessGroup::Create(
    int rank, int size, gloo::rendezvous::Store& store,
    const GlooOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("GlooProcessGroup::Create: rank ", rank,
                     " is not in [0, size) for size ", size));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GlooProcessGroup::Create: timeout ",
        absl::FormatDuration(options.timeout), " is not positive"));
  }
  const absl::Time deadline = absl::Now() + options.timeout;
  const std::string where =
      absl::StrCat("GlooProcessGroup::Create: rank ", rank, " of ", size,
                   " (hostname ", options.hostname, ")");
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::unique_ptr<gloo_internal::SharedSegments> shared_memory;
  std::unique_ptr<gloo_internal::PeerProbe> probe;
  // False when the store holds this rank's key already (an earlier or
  // another job's store): a failure is then not announced in it.
  bool store_is_ours = true;
  absl::Status status = gloo_internal::CatchGloo(where, [&]() -> absl::Status {
    // The device first: it listens, and starts a thread of its own, which
    // can fail (ulimit -u). Failing before joining, this rank makes the
    // others fail in their join wait (AnnounceGiveUp below) rather than
    // later, in the middle of connecting to it.
    std::shared_ptr<gloo::transport::Device> device;
    // Gloo's CreateDevice crashes (not throws) on some names it cannot
    // resolve, so resolve the name here first.
    if (absl::Status s = gloo_internal::CheckResolvable(options.hostname);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = gloo_internal::CatchGloo(
            absl::StrCat("cannot listen on ", options.hostname),
            [&] {
              gloo::transport::tcp::attr attr;
              attr.hostname = options.hostname;
              device = gloo::transport::tcp::CreateDevice(attr);
              return absl::OkStatus();
            });
        !s.ok()) {
      // The device starts a thread of its own: a refusal is the limit on
      // threads, not the network.
      if (absl::StrContains(s.message(), "Resource temporarily unavailable")) {
        return absl::ResourceExhaustedError(
            absl::StrCat(s.message(), ": Gloo's network thread could not start",
                         ThreadLimitNote()));
      }
      return absl::UnavailableError(s.message());
    }
    // Then our own join keys, so that a missing rank gets named; Gloo's
    // connectFullMesh would only report a timeout on some key. The value
    // carries what the ranks must agree on, compared with this rank's as
    // each arrives (rank 0's first), so ranks started differently fail at
    // once.
    bool announced = false;
    if (absl::Status s = comm_internal::AgreeOnJobConfig(
            store, gloo_internal::kJoinKeyPrefix, rank, size,
            options.job_config, deadline, options.timeout,
            "GlooProcessGroup::Create", where, &announced);
        !s.ok()) {
      store_is_ours = announced;
      return s;
    }
    context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    // Gloo waits five times the context's timeout for a pair to connect
    // (transport/tcp/pair.h), so a peer that stopped halfway through
    // connecting held this rank for 5 x the deadline. A fifth of what is
    // left keeps the connects within it, while the store's waits keep the
    // whole of it; every later wait passes its own.
    context->setTimeout(
        std::max(std::chrono::milliseconds(1),
                 comm_internal::MillisecondsLeft(deadline) / 5));
    gloo_internal::WaitsUntilTheDeadline mesh_store(store, deadline);
    context->connectFullMesh(mesh_store, device);
    if (size == 1) return absl::OkStatus();
    absl::StatusOr<std::unique_ptr<gloo_internal::SharedSegments>> segments =
        gloo_internal::SharedSegments::Connect(
            rank, size, store, options.max_shared_memory_bytes, deadline);
    if (!segments.ok()) {
      return absl::Status(
          segments.status().code(),
          absl::StrCat(where, ": ", segments.status().message()));
    }
    shared_memory = *std::move(segments);
    absl::StatusOr<std::unique_ptr<gloo_internal::PeerProbe>> probed =
        gloo_internal::PeerProbe::Open(rank, size, options.hostname, store,
                                       deadline);
    if (!probed.ok()) {
      return absl::Status(probed.status().code(),
                          absl::StrCat(where, ": ", probed.status().message()));
    }
    probe = *std::move(probed);
    return absl::OkStatus();
  });
  if (absl::IsDeadlineExceeded(status) &&
      absl::StrContains(status.message(), "Connect timeout")) {
    return absl::DeadlineExceededError(absl::StrCat(
        status.message(),
        " (every rank had joined: a peer stopped before its connections "
        "were made, or the hosts cannot reach the addresses they listen on; "
        "check --interface)"));
  }
  if (status.ok()) {
    auto worker = std::make_unique<gloo_internal::Worker>(
        rank, size, std::move(context), std::move(shared_memory),
        options.min_shared_memory_bytes, std::move(probe));
    status = worker->Start();
    if (status.ok()) {
      return std::unique_ptr<GlooProcessGroup>(
          new GlooProcessGroup(rank, size, std::move(worker)));
    }
  }
  // A timeout is every waiting rank's own to report, and a give-up is
  // already in the store.
  if (store_is_ours && !absl::IsDeadlineExceeded(status) &&
      !absl::StrContains(status.message(),
                         "gave up before the rendezvous completed")) {
    AnnounceGiveUp(store, rank, status);
  }
  return status;
}

void GlooProcessGroup::AnnounceGiveUp(gloo::rendezvous::Store& store, int rank,
                                      const absl::Status& why) {
  comm_internal::AnnounceGiveUp(store, gloo_internal::kJoinKeyPrefix, rank,
                                why);
}

absl::StatusOr<std::unique_ptr<GlooProcessGroup>>
GlooProcessGroup::CreateWithFileStore(int rank, int size,
                                      const std::string& directory,
                                      const GlooOptions& options) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("GlooProcessGroup::CreateWithFileStore: cannot create ",
                     directory, ": ", error.message()));
  }
  std::unique_ptr<TimedFileStore> store;
  absl::Status status = gloo_internal::CatchGloo(
      absl::StrCat("GlooProcessGroup::CreateWithFileStore: ", directory), [&] {
        store = std::make_unique<TimedFileStore>(directory);
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  absl::StatusOr<std::unique_ptr<GlooProcessGroup>> group =
      Create(rank, size, *store, options);
  if (!group.ok()) {
    return absl::Status(
        group.status().code(),
        absl::StrCat(group.status().message(), " [rendezvous directory ",
                     directory, "]"));
  }
  return group;
}

GlooProcessGroup::GlooProcessGroup(
    int rank, int size, std::unique_ptr<gloo_internal::Worker> worker)
    : rank_(rank), size_(size), worker_(std::move(worker)) {}

GlooProcessGroup::~GlooProcessGroup() = default;

void GlooProcessGroup::DoAbort(const absl::Status& cause) {
  worker_->Abort(cause);
}

bool GlooProcessGroup::SupportsDType(DType dtype) const {
  // Data moves as bytes; reductions run in our own kernels, which take
  // every dtype.
  return IsValidDType(dtype);
}

std::unique_ptr<Work> GlooProcessGroup::DoBroadcast(
    MutableBuffer buffer, const BroadcastOptions& options) {
  return worker_->Enqueue(DescribeBroadcast(buffer, options), nullptr,
                          buffer.data, options.timeout);
}

std::unique_ptr<Work> GlooProcessGroup::DoReduce(ConstBuffer send,
                                                 MutableBuffer recv,
                                                 const ReduceOptions& options) {
  return worker_->Enqueue(DescribeReduce(send, options), send.data,
                          rank_ == options.root ? recv.data : nullptr,
                          options.timeout);
}

std::unique_ptr<Work> GlooProcessGroup::DoAllReduce(
    MutableBuffer buffer, const AllReduceOptions& options) {
  return worker_->Enqueue(DescribeAllReduce(buffer, options), buffer.data,
                          buffer.data, options.timeout);
}

std::unique_ptr<Work> GlooProcessGroup::DoAllGather(
    ConstBuffer send, MutableBuffer recv, const AllGatherOptions& options) {
  return worker_->Enqueue(DescribeAllGather(send, options), send.data,
                          recv.data, options.timeout);
}

std::unique_ptr<Work> GlooProcessGroup::DoReduceScatter(
    ConstBuffer send, MutableBuffer recv, const ReduceScatterOptions& options) {
  return worker_->Enqueue(DescribeReduceScatter(recv, options), send.data,
                          recv.data, options.timeout);
}

std::unique_ptr<Work> GlooProcessGroup::DoBarrier(
    const BarrierOptions& options) {
  return worker_->Enqueue(DescribeBarrier(options), nullptr, nullptr,
                          options.timeout);
}

absl::Status GlooProcessGroup::abort_status() const {
  return worker_->abort_status();
}

bool GlooProcessGroup::uses_shared_memory() const {
  return worker_->uses_shared_memory();
}

uint64_t GlooProcessGroup::shared_memory_collectives() const {
  return worker_->shared_memory_collectives();
}

}  // namespace comm
}  // namespace chunkzero
