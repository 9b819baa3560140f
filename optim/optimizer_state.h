// OptimizerState: what ZeroOptimizer saves and loads, as pieces of
// per-parameter tensors named the PyTorch way.
//
//   OptimizerState mine = *optimizer->SaveShard();          // this rank's part
//   OptimizerState full = *optimizer->GatherState(false);   // rank 0: whole
//   CZ_RETURN_IF_ERROR(optimizer->LoadState(full));          // any layout
//
// One representation serves both the sharded and the consolidated form: a
// piece holds elements [begin, begin + numel) of one parameter's flattened
// tensor, so a consolidated state is pieces with begin 0 covering whole
// tensors, and a sharded one is what each rank holds. A load takes pieces
// from any number of ranks of any world size or layout: each rank copies the
// elements it holds from whichever pieces cover them.
#ifndef CHUNKZERO_OPTIM_OPTIMIZER_STATE_H_
#define CHUNKZERO_OPTIM_OPTIMIZER_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace chunkzero {

// State names, as in PyTorch's optimizer state_dict; "param" is the fp32
// master copy of the parameter.
inline constexpr char kMasterState[] = "param";
inline constexpr char kExpAvgState[] = "exp_avg";
inline constexpr char kExpAvgSqState[] = "exp_avg_sq";
inline constexpr char kMomentumState[] = "momentum_buffer";

struct StatePiece {
  std::string param;  // Parameter name, e.g. "h.0.attn.c_attn.weight".
  std::string state;  // kMasterState, kExpAvgState, ...
  Shape shape;        // The parameter's full shape.
  int64_t begin = 0;  // First element of the flattened parameter held here.
  Tensor values;      // f32, flat: elements [begin, begin + numel).
};

struct OptimizerState {
  // Updates taken (Adam's t; skipped steps do not count) and Step calls
  // (the learning-rate schedule's position; skipped steps count).
  int64_t updates = 0;
  int64_t iterations = 0;
  // The dynamic loss scaler (f16 only; ignored otherwise).
  double loss_scale = 0;
  int64_t growth_tracker = 0;
  int hysteresis_left = 0;
  std::vector<StatePiece> pieces;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_OPTIM_OPTIMIZER_STATE_H_
