// ChunkResidency: the `auto` placement of chunks between an accelerator and
// host memory (Gemini's placement policies). Chunks that compute on the
// device and rest in host memory by default (parameters offloaded) may rest
// on the device instead, which spares every use its host-device copies.
// As many rest there as the device's memory allows; when room is needed --
// for a chunk coming to rest, for activations, for a gather -- the chunk
// whose next use is farthest away goes back to the host. The uses repeat
// every step in a known order (the schedule), so "farthest next use" is
// Belady's optimal choice rather than a guess like least-recently-used.
//
//   ChunkResidency residency(Device::Simulated(0), Device::Cpu(), &tracker);
//   residency.Manage(chunk);                       // each offloaded chunk
//   residency.SetSchedule({c0, c1, c2, c2, c1, c0});  // forward, backward
//   residency.Began(c1);       // a use starts: the clock moves to it
//   residency.Releasing(c1);   // use over: stays on the device if room
//   tracker.SetReclaimer(sim, [&](int64_t b) { return residency.Reclaim(b); });
//
// Before a schedule is set (step 1 without a given order) every chunk's
// next use counts as equally far: chunks still come to rest on the device
// while there is room, and give it back in the order they came.
//
// Moves never change values: a chunk's payload moves whole, and every view
// of it (parameters' data and grads) follows its storage.
//
// Thread-safety: used by one rank's thread, like its ChunkManager; Reclaim
// runs on whichever thread allocates on the device, which is that thread.
#ifndef CHUNKZERO_CHUNK_CHUNK_RESIDENCY_H_
#define CHUNKZERO_CHUNK_CHUNK_RESIDENCY_H_

#include <cstdint>
#include <vector>

#include "chunk/chunk.h"
#include "chunk/scheduled_chunks.h"
#include "tensor/device.h"
#include "tensor/memory/memory_tracker.h"

namespace chunkzero {

class ChunkResidency {
 public:
  // Chunks compute on `device` and rest on `host` unless resident.
  // `tracker` (may be null: no limit) holds the device's limit.
  ChunkResidency(Device device, Device host, const MemoryTracker* tracker);
  ChunkResidency(const ChunkResidency&) = delete;
  ChunkResidency& operator=(const ChunkResidency&) = delete;

  // Adds a chunk this policy may move (it computes on device(), rests on
  // host()). Forget before the chunk goes away.
  void Manage(Chunk* chunk);
  void Forget(Chunk* chunk);

  // The uses of one step, in order, a chunk once per use; repeated every
  // step. Chunks not in it are next used "never" (farthest of all).
  void SetSchedule(std::vector<Chunk*> uses);

  // A use of `chunk` begins: the clock moves to its next scheduled use.
  void Began(const Chunk* chunk);
  // A use of `chunk` has ended and it is about to be released (still
  // accessed, its gather complete): it comes to rest on the device, from
  // the full buffer already there (Chunk::RestWhereItComputes: no copy),
  // if there is room for what that adds (a shard; nothing for a holder's
  // buffer, which simply stays), or if room can be made by sending to the
  // host residents used later than it; otherwise it goes back to the host
  // as usual. A move that fails leaves the chunk as it was: placement never
  // fails a step.
  void Releasing(Chunk* chunk);

  // Sends residents that are not accessed to the host, farthest next use
  // first, until at least `bytes` are freed on the device. Returns the
  // bytes freed. For MemoryTracker::SetReclaimer.
  int64_t Reclaim(int64_t bytes);

  Device device() const { return device_; }
  Device host() const { return host_; }
  // Payload bytes of the managed chunks resting on the device.
  int64_t resident_bytes() const;
  // Chunks sent back to the host to make room, since construction.
  int64_t evictions() const { return evictions_; }

  // The use clock (ScheduledChunks::Clock), to save and put back.
  ScheduledChunks::Clock use_clock() const { return managed_.clock(); }
  void set_use_clock(const ScheduledChunks::Clock& clock) {
    managed_.set_clock(clock);
  }

 private:
  // Managed chunks at rest on the device and not accessed, farthest next
  // use first (ties: the order they were managed in).
  std::vector<Chunk*> EvictionOrder() const;
  bool Evict(Chunk* chunk);

  const Device device_;
  const Device host_;
  const MemoryTracker* const tracker_;
  ScheduledChunks managed_{ScheduledChunks::Ties::kAddedFirst};
  bool moving_in_ = false;  // Releasing is keeping a chunk on the device.
  int64_t evictions_ = 0;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_CHUNK_CHUNK_RESIDENCY_H_
