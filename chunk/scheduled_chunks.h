// ScheduledChunks: the chunks one residency policy manages and the step's
// use schedule over them -- the part both residencies share
// (chunk_residency.h between a device and host memory,
// chunk_disk_residency.h between host memory and disk). It answers the two
// questions a residency asks: which chunks go first when room is needed
// (farthest next use first, Belady's optimal choice), and which of them may
// go to make room for a chunk about to be used (only those used later than
// it, and only if they are enough).
//
//   ScheduledChunks chunks(ScheduledChunks::Ties::kAddedFirst);
//   chunks.Add(c0); chunks.Add(c1);
//   chunks.SetSchedule({c0, c1, c1, c0});
//   chunks.Began(c1);
//   std::vector<Chunk*> order =
//       chunks.FarthestFirst([](const Chunk& c) { return CanGo(c); });
//   std::optional<std::vector<Chunk*>> to_free = chunks.RoomFor(
//       c0, need, room, order, [](const Chunk& c) { return Bytes(c); });
//
// The chunk whose use began last is never among those to go: its access
// may be allocating (and so reclaiming) before it counts as accessed.
//
// Thread-safety: used by one rank's thread.
#ifndef CHUNKZERO_CHUNK_SCHEDULED_CHUNKS_H_
#define CHUNKZERO_CHUNK_SCHEDULED_CHUNKS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "chunk/chunk.h"
#include "chunk/use_schedule.h"

namespace chunkzero {

class ScheduledChunks {
 public:
  // Which of two chunks equally far from their next use goes first: the
  // one added first, or the one added last.
  enum class Ties { kAddedFirst, kAddedLast };

  explicit ScheduledChunks(Ties ties) : ties_(ties) {}

  // Adds a chunk; false when it is already here.
  bool Add(Chunk* chunk);
  // Takes a chunk that is going away out of the set and the schedule.
  void Forget(const Chunk* chunk);
  bool contains(const Chunk* chunk) const;
  // In the order they were added.
  const std::vector<Chunk*>& chunks() const { return chunks_; }

  // The uses of one step, in order, a chunk once per use (UseSchedule).
  void SetSchedule(std::vector<Chunk*> uses) { schedule_.Set(std::move(uses)); }
  // A use of `chunk` begins: the clock moves to it, and it may not go.
  void Began(const Chunk* chunk);
  const UseSchedule& schedule() const { return schedule_; }
  // The clock and the chunk whose use began last, to put back after uses
  // that are not the step's (a forward-only pass).
  struct Clock {
    int64_t clock = -1;
    const Chunk* beginning = nullptr;
  };
  Clock clock() const { return {schedule_.clock(), beginning_}; }
  void set_clock(const Clock& clock) {
    schedule_.set_clock(clock.clock);
    beginning_ = clock.beginning;
  }

  // The chunks for which `may_go` holds, but the one whose use began last,
  // farthest next use first (ties: Ties).
  std::vector<Chunk*> FarthestFirst(
      absl::FunctionRef<bool(const Chunk&)> may_go) const;

  // To fit `need` bytes where `room` are free for a use of `chunk`: the
  // fewest leading chunks of `farthest_first` (FarthestFirst's order) that
  // are used later than `chunk` and whose `bytes` bring `room` up to
  // `need`. Empty when `room` is already enough; nullopt when the chunks
  // used later than `chunk` are not enough.
  std::optional<std::vector<Chunk*>> RoomFor(
      const Chunk* chunk, int64_t need, int64_t room,
      const std::vector<Chunk*>& farthest_first,
      absl::FunctionRef<int64_t(const Chunk&)> bytes) const;

 private:
  const Ties ties_;
  std::vector<Chunk*> chunks_;  // In the order they were added.
  UseSchedule schedule_;
  const Chunk* beginning_ = nullptr;  // Never the one to go.
};

}  // namespace chunkzero

#endif  // CHUNKZERO_CHUNK_SCHEDULED_CHUNKS_H_
