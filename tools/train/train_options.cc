#include "tools/train/train_options.h"

namespace chunkzero {

TrainOptions::TrainOptions() {
  model.layers = 2;
  model.d_model = 128;
  model.heads = 4;
  model.seq_len = 64;
  model.vocab = 256;
}

}  // namespace chunkzero
