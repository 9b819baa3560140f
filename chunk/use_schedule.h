// UseSchedule: the order in which one step uses the chunks, repeated every
// step, and a clock on it: how far away each chunk's next use is. Both
// residencies (chunk_residency.h between a device and host memory,
// chunk_disk_residency.h between host memory and disk) send away the chunk
// used farthest ahead, Belady's optimal choice, from it.
//
//   UseSchedule schedule;
//   schedule.Set({c0, c1, c1, c0});   // forward, then backward
//   schedule.Began(c1);               // the clock moves to c1's next use
//   schedule.Distance(c0);            // 2: two uses from now
//
// Thread-safety: used by one rank's thread.
#ifndef CHUNKZERO_CHUNK_USE_SCHEDULE_H_
#define CHUNKZERO_CHUNK_USE_SCHEDULE_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "chunk/chunk.h"

namespace chunkzero {

class UseSchedule {
 public:
  // Distance of a chunk the schedule does not name.
  static constexpr int64_t kNever = int64_t{1} << 62;

  // The uses of one step, in order, a chunk once per use. The clock starts
  // before the first.
  void Set(std::vector<Chunk*> uses);
  // Takes a chunk that is going away out of the schedule.
  void Forget(const Chunk* chunk);
  // A use of `chunk` begins: the clock moves to its next use (unchanged for
  // a chunk the schedule does not name).
  void Began(const Chunk* chunk);
  // Uses from the clock to the next use of `chunk` (1: the next use),
  // wrapping into the next step; kNever when it is not scheduled.
  int64_t Distance(const Chunk* chunk) const;
  // The chunk of the use `ahead` uses after the clock (1: the next),
  // wrapping; null when the schedule is empty.
  Chunk* Ahead(int64_t ahead) const;

  // Where the clock stands (the position of the use last begun), and
  // putting it back there: for uses that are not the step's.
  int64_t clock() const { return clock_; }
  void set_clock(int64_t clock) { clock_ = clock; }

  bool empty() const { return uses_.empty(); }
  int64_t size() const { return static_cast<int64_t>(uses_.size()); }

 private:
  std::vector<Chunk*> uses_;
  // Each scheduled chunk's positions in uses_, ascending.
  absl::flat_hash_map<const Chunk*, std::vector<int64_t>> positions_;
  int64_t clock_ = -1;  // Position of the use in progress or last begun.
};

}  // namespace chunkzero

#endif  // CHUNKZERO_CHUNK_USE_SCHEDULE_H_
