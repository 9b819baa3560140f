// Trains a TiedAutoencoder with chunkzero's engine on ranks that are
// threads of this process (an in-process world), each rank taking its
// slice of every batch.
//
//   absl::StatusOr<Trained> t = TrainOnRanks(/*world_size=*/2, options);
#ifndef CHUNKZERO_EXAMPLES_AUTOENCODER_TRAIN_RANKS_H_
#define CHUNKZERO_EXAMPLES_AUTOENCODER_TRAIN_RANKS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/engine.h"

namespace autoencoder {

struct TrainSettings {
  int width = 16;
  int hidden = 4;
  int rows = 32;  // Per step, over all ranks; a multiple of the world size.
  int steps = 30;
  uint32_t seed = 7;
  // Evaluate on held-out rows (data no step trains on) before every this
  // many steps and after the last (0: never), through Engine::Evaluate.
  int eval_every = 0;
  // The engine's options (chunk size, precision, optimizer, ...);
  // find_unused_parameters is set, since odd steps leave the gate unused.
  chunkzero::EngineOptions engine;
};

struct Trained {
  std::vector<double> losses;  // Per step, over all ranks.
  // With eval_every: the held-out loss before step 1, every eval_every
  // steps, and after the last.
  std::vector<double> held_out_losses;
  // The full f32 weights before the first step and after the last.
  std::map<std::string, std::vector<float>> initial, final;
};

// InvalidArgument for rows that do not split over the ranks; the engine's
// and the model's errors as they come, naming the rank.
absl::StatusOr<Trained> TrainOnRanks(int world_size,
                                     const TrainSettings& settings);

}  // namespace autoencoder

#endif  // CHUNKZERO_EXAMPLES_AUTOENCODER_TRAIN_RANKS_H_
