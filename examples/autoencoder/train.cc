// Trains the tied autoencoder on 2 ranks (threads of this process) through
// chunkzero's engine and prints the loss of every step, and the loss on
// held-out rows every 10 steps (a forward-only pass between steps).
#include <cstdio>

#include "autoencoder/train_ranks.h"

int main() {
  autoencoder::TrainSettings settings;
  settings.engine.chunk_size = 64;  // Elements: the weight spans two chunks.
  settings.engine.precision = chunkzero::DType::kF32;
  settings.eval_every = 10;
  const absl::StatusOr<autoencoder::Trained> trained =
      autoencoder::TrainOnRanks(/*world_size=*/2, settings);
  if (!trained.ok()) {
    std::fprintf(stderr, "%s\n", trained.status().ToString().c_str());
    return 1;
  }
  for (size_t s = 0; s < trained->losses.size(); ++s) {
    if (s % settings.eval_every == 0) {
      std::printf("held-out loss %.6f\n",
                  trained->held_out_losses[s / settings.eval_every]);
    }
    std::printf("step %zu  loss %.6f\n", s + 1, trained->losses[s]);
  }
  std::printf("held-out loss %.6f\n", trained->held_out_losses.back());
  return 0;
}
