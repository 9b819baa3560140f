// A model chunkzero knows nothing about, trained through its engine: a
// tied autoencoder. The encoder h = tanh(g(x) W^T + b_enc) and the decoder
// y = h W + b_dec share the weight W [hidden, width]; g scales the input by
// the learned "gate" [width] on even steps only (a parameter some steps do
// not use, so the engine runs with find_unused_parameters). The loss is the
// mean over rows of 0.5 ||y - x||^2.
#ifndef CHUNKZERO_EXAMPLES_AUTOENCODER_TIED_AUTOENCODER_H_
#define CHUNKZERO_EXAMPLES_AUTOENCODER_TIED_AUTOENCODER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model.h"

namespace autoencoder {

class TiedAutoencoder : public chunkzero::Module {
 public:
  // Weights drawn from a fixed-seed uniform(-0.5, 0.5); the gate starts at 1.
  TiedAutoencoder(int width, int hidden, uint32_t seed);

  std::vector<chunkzero::Parameter*> Parameters() override {
    return {&gate_, &weight_, &encoder_bias_, &decoder_bias_};
  }
  int width() const { return width_; }

  // Forward over `rows` rows of x (row-major [rows, width]); `use_gate`
  // applies the gate. Returns the loss.
  absl::StatusOr<double> Forward(chunkzero::ParamHooks& hooks,
                                 const std::vector<float>& x, int rows,
                                 bool use_gate);
  // Backward of the last Forward, d(loss) seeded with `loss_scale`.
  absl::Status Backward(chunkzero::ParamHooks& hooks, float loss_scale);

 private:
  const int width_, hidden_;
  chunkzero::Parameter gate_, weight_, encoder_bias_, decoder_bias_;
  // What backward needs from the last forward.
  std::vector<float> x_, gated_, h_, y_;
  int rows_ = 0;
  bool used_gate_ = false;
};

// `rows` rows of deterministic data, different per `seed`: points near a
// low-dimensional subspace, which the autoencoder learns to reconstruct.
std::vector<float> MakeData(int rows, int width, uint32_t seed);

}  // namespace autoencoder

#endif  // CHUNKZERO_EXAMPLES_AUTOENCODER_TIED_AUTOENCODER_H_
