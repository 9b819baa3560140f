// ActivationCheckpointing: which blocks of a model keep their activations
// from forward to backward and which keep only their input and run their
// forward again just before their backward (activation checkpointing, or
// recomputation).
//
//   CZ_ASSIGN_OR_RETURN(ActivationCheckpointing ac,
//                       ActivationCheckpointing::Parse("every:2"));
//   ac.Checkpoints(0);                 // true: blocks 0, 2, 4, ...
//   ac.CheckpointedBlocks(12);         // 6
//   ac.ToString();                     // "every:2"
//
// "none" keeps every block's activations; "layers" checkpoints every block
// (every:1); "every:K" checkpoints blocks 0, K, 2K, ... (so every:K with K
// at least the number of blocks checkpoints only block 0). A model applies
// it to its own blocks: the recomputed forward runs through the same hooks
// (ddp/param_hooks.h) as the first, inside backward, and hands no grads.
//
// A model that can do so implements ActivationCheckpointable; the engine
// (engine/engine.h) hands it EngineOptions::activation_checkpointing.
#ifndef CHUNKZERO_ENGINE_ACTIVATION_CHECKPOINTING_H_
#define CHUNKZERO_ENGINE_ACTIVATION_CHECKPOINTING_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace chunkzero {

struct ActivationCheckpointing {
  // 0: no block is checkpointed; K > 0: blocks 0, K, 2K, ...
  int every = 0;

  bool enabled() const { return every > 0; }
  // Whether block `block` (counted from 0) keeps only its input.
  bool Checkpoints(int block) const {
    return every > 0 && block >= 0 && block % every == 0;
  }
  // How many of `blocks` blocks are checkpointed.
  int CheckpointedBlocks(int blocks) const {
    return every > 0 && blocks > 0 ? (blocks + every - 1) / every : 0;
  }
  // Activation slots a model of `blocks` blocks keeps: one per kept block,
  // and one that every checkpointed block recomputes into.
  int Slots(int blocks) const {
    const int checkpointed = CheckpointedBlocks(blocks);
    return blocks - checkpointed + (checkpointed > 0 ? 1 : 0);
  }
  // Block `block`'s slot: the kept blocks before it take the first slots,
  // the shared one is the last.
  int SlotOf(int block, int blocks) const {
    if (Checkpoints(block)) return Slots(blocks) - 1;
    return block - CheckpointedBlocks(block);
  }
  // "none", "layers" or "every:K": what Parse reads back.
  std::string ToString() const;

  // Reads "none", "layers" or "every:K" (K a positive integer);
  // InvalidArgument quoting the text otherwise.
  [[nodiscard]] static absl::StatusOr<ActivationCheckpointing> Parse(
      absl::string_view text);

  friend bool operator==(const ActivationCheckpointing& a,
                         const ActivationCheckpointing& b) {
    return a.every == b.every;
  }
};

// A model whose blocks can keep only their inputs and recompute the rest
// in backward.
class ActivationCheckpointable {
 public:
  virtual ~ActivationCheckpointable() = default;
  // Applies `checkpointing` from the next forward on. InvalidArgument for
  // one the model cannot apply.
  [[nodiscard]] virtual absl::Status SetActivationCheckpointing(
      const ActivationCheckpointing& checkpointing) = 0;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_ENGINE_ACTIVATION_CHECKPOINTING_H_
