#include "comm/gloo/shared_segments.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/system_memory.h"
#include "gloo/rendezvous/store.h"

namespace chunkzero {
namespace comm {
namespace gloo_internal {
namespace {

// Segments grow in steps of this many bytes, so that a run of slightly
// larger collectives does not remap every time.
constexpr size_t kGrowthStep = size_t{2} << 20;

std::string NameKey(int rank) {
  return absl::StrCat("chunkzero_gloo_shm_name_", rank);
}
std::string OpenedKey(int rank) {
  return absl::StrCat("chunkzero_gloo_shm_opened_", rank);
}

// A name no other job on the host can hold: the pid, the rank and 64
// random bits.
std::string MakeName(int rank) {
  std::random_device device;
  const uint64_t random =
      (static_cast<uint64_t>(device()) << 32) ^ static_cast<uint64_t>(device());
  return absl::StrFormat("/chunkzero-gloo-%d-%d-%016x", getpid(), rank, random);
}

std::chrono::milliseconds Left(absl::Time deadline) {
  const int64_t ms = absl::ToInt64Milliseconds(
      absl::Ceil(deadline - absl::Now(), absl::Milliseconds(1)));
  return std::chrono::milliseconds(std::max<int64_t>(ms, 1));
}

// The value of `key` once some rank has set it; DeadlineExceeded naming
// `rank` (the one that should have) if none has by `deadline`.
absl::StatusOr<std::string> WaitAndGet(gloo::rendezvous::Store& store,
                                       const std::string& key, int rank,
                                       absl::Time deadline) {
  try {
    store.wait({key}, Left(deadline));
    const std::vector<char> value = store.get(key);
    return std::string(value.begin(), value.end());
  } catch (const std::exception& e) {
    const bool timeout = absl::StrContains(e.what(), "imeout") ||
                         absl::StrContains(e.what(), "imed out");
    const std::string message =
        absl::StrCat("shared memory: rank ", rank,
                     " did not publish its segment (", key, "): ", e.what());
    return timeout ? absl::DeadlineExceededError(message)
                   : absl::UnavailableError(message);
  }
}

absl::Status Set(gloo::rendezvous::Store& store, const std::string& key,
                 const std::string& value) {
  try {
    store.set(key, std::vector<char>(value.begin(), value.end()));
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("shared memory: cannot set ", key, ": ", e.what()));
  }
}

std::atomic<SegmentFault> fault_for_testing{nullptr};

// The errno SetSegmentFaultForTesting's fault gives this call; 0: make it.
int Fault(int rank, SegmentCall call, int segment, size_t bytes) {
  const SegmentFault fault = fault_for_testing.load();
  return fault == nullptr ? 0 : fault(rank, call, segment, bytes);
}

// "4194304 bytes (4.00 MiB)".
std::string Bytes(size_t bytes) {
  return absl::StrCat(bytes, " bytes (",
                      FormatBytes(static_cast<double>(bytes)), ")");
}

// `message`: strerror(error), as ResourceExhausted when the error means no
// room or no memory.
absl::Status MemoryError(int error, absl::string_view message) {
  if (error == ENOSPC || error == ENOMEM || error == EFBIG || error == EDQUOT) {
    return absl::ResourceExhaustedError(
        absl::StrCat(message, ": ", std::strerror(error)));
  }
  return absl::ErrnoToStatus(error, message);
}

void CloseAll(std::vector<int>& fds) {
  for (int& fd : fds) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

}  // namespace

void SetSegmentFaultForTesting(SegmentFault fault) {
  fault_for_testing.store(fault);
}

absl::StatusOr<std::unique_ptr<SharedSegments>> SharedSegments::Connect(
    int rank, int size, gloo::rendezvous::Store& store, size_t max_bytes,
    absl::Time deadline) {
  std::vector<int> fds(size, -1);
  std::string name;
  if (max_bytes > 0) {
    name = MakeName(rank);
    fds[rank] =
        shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fds[rank] < 0) name.clear();
  }
  // Whatever happens below, the name goes once every rank has tried it.
  struct Unlink {
    ~Unlink() {
      if (!name.empty()) shm_unlink(name.c_str());
    }
    const std::string& name;
  } unlink{name};

  absl::Status status = Set(store, NameKey(rank), name);
  bool opened_all = !name.empty();
  for (int peer = 0; peer < size && status.ok(); ++peer) {
    if (peer == rank) continue;
    absl::StatusOr<std::string> theirs =
        WaitAndGet(store, NameKey(peer), peer, deadline);
    if (!theirs.ok()) {
      status = theirs.status();
      break;
    }
    if (!opened_all) continue;
    if (theirs->empty()) {
      opened_all = false;
      continue;
    }
    fds[peer] = shm_open(theirs->c_str(), O_RDONLY | O_CLOEXEC, 0);
    if (fds[peer] < 0) opened_all = false;
  }
  if (status.ok()) status = Set(store, OpenedKey(rank), opened_all ? "1" : "0");
  bool everyone = opened_all;
  for (int peer = 0; peer < size && status.ok(); ++peer) {
    if (peer == rank) continue;
    absl::StatusOr<std::string> theirs =
        WaitAndGet(store, OpenedKey(peer), peer, deadline);
    if (!theirs.ok()) {
      status = theirs.status();
      break;
    }
    everyone &= *theirs == "1";
  }
  if (!status.ok() || !everyone) {
    CloseAll(fds);
    if (!status.ok()) return status;
    return std::unique_ptr<SharedSegments>();
  }
  return std::unique_ptr<SharedSegments>(
      new SharedSegments(rank, max_bytes, std::move(fds)));
}

SharedSegments::SharedSegments(int rank, size_t max_bytes, std::vector<int> fds)
    : rank_(rank),
      max_bytes_(max_bytes),
      fds_(std::move(fds)),
      mappings_(fds_.size()) {}

SharedSegments::~SharedSegments() {
  for (Mapping& m : mappings_) {
    if (m.data != nullptr) munmap(m.data, m.bytes);
  }
  CloseAll(fds_);
}

absl::Status SharedSegments::Reserve(size_t bytes) {
  if (bytes <= reserved_ && bytes <= peers_mapped_) return absl::OkStatus();
  if (bytes > max_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("shared memory: rank ", rank_, " needs ", Bytes(bytes),
                     " of shared memory, more than its cap of ", max_bytes_,
                     " bytes (", FormatBytes(static_cast<double>(max_bytes_)),
                     ", GlooOptions::max_shared_memory_bytes)"));
  }
  const size_t steps = (bytes + kGrowthStep - 1) / kGrowthStep;
  const size_t want =
      std::max(bytes, std::min(max_bytes_, steps * kGrowthStep));
  if (bytes > reserved_) {
    // Allocates the pages now: a full /dev/shm fails here, not as a SIGBUS
    // when a page is first written.
    int error = Fault(rank_, SegmentCall::kGrow, rank_, want);
    if (error == 0) {
      error = posix_fallocate(fds_[rank_], 0, static_cast<off_t>(want));
    }
    if (error != 0) {
      return MemoryError(
          error, absl::StrCat("shared memory: rank ", rank_,
                              " cannot grow its segment to ", Bytes(want),
                              " in /dev/shm (full, or smaller than that)"));
    }
    error = Fault(rank_, SegmentCall::kMapMine, rank_, want);
    void* data = MAP_FAILED;
    if (error == 0) {
      data = mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_SHARED,
                  fds_[rank_], 0);
      if (data == MAP_FAILED) error = errno;
    }
    if (data == MAP_FAILED) {
      return MemoryError(error, absl::StrCat("shared memory: rank ", rank_,
                                             " cannot map its segment of ",
                                             Bytes(want), " into its memory"));
    }
    Mapping& m = mappings_[rank_];
    if (m.data != nullptr) munmap(m.data, m.bytes);
    m = {data, want};
    mine_ = static_cast<uint8_t*>(data);
    reserved_ = want;
  }
  // The peers' segments, mapped now for as many bytes: a peer that says it
  // is ready has grown its own to `bytes` at least, and until then the
  // mapping may reach past the end of its segment (it is not read there).
  for (int peer = 0; peer < static_cast<int>(fds_.size()); ++peer) {
    if (peer == rank_ || mappings_[peer].bytes >= bytes) continue;
    if (absl::Status s = Map(peer, want); !s.ok()) return s;
  }
  peers_mapped_ = std::max(peers_mapped_, bytes);
  return absl::OkStatus();
}

absl::Status SharedSegments::Map(int peer, size_t bytes) {
  int error = Fault(rank_, SegmentCall::kMapPeer, peer, bytes);
  void* data = MAP_FAILED;
  if (error == 0) {
    data = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fds_[peer], 0);
    if (data == MAP_FAILED) error = errno;
  }
  if (data == MAP_FAILED) {
    return MemoryError(
        error,
        absl::StrCat("shared memory: rank ", rank_, " cannot map rank ", peer,
                     "'s segment of ", Bytes(bytes), " into its memory"));
  }
  Mapping& m = mappings_[peer];
  if (m.data != nullptr) munmap(m.data, m.bytes);
  m = {data, bytes};
  return absl::OkStatus();
}

absl::StatusOr<const uint8_t*> SharedSegments::Peer(int peer, size_t bytes) {
  if (mappings_[peer].bytes < bytes) {
    if (absl::Status s = Map(peer, bytes); !s.ok()) return s;
  }
  return static_cast<const uint8_t*>(mappings_[peer].data);
}

}  // namespace gloo_internal
}  // namespace comm
}  // namespace chunkzero
