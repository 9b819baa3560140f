// ZeroOptimizer's state I/O: what a rank saves, the consolidated gather,
// and loading pieces saved at any world size or layout.
#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "chunk/chunk_layout.h"
#include "optim/internal/host_range.h"
#include "optim/zero_optimizer.h"
#include "tensor/memory/allocator.h"

namespace chunkzero {

using optim_internal::HostRange;

OptimizerState ZeroOptimizer::Scalars() const {
  OptimizerState state;
  state.updates = updates_;
  state.iterations = iterations_;
  if (scaler_.has_value()) {
    state.loss_scale = scaler_->scale();
    state.growth_tracker = scaler_->growth_tracker();
    state.hysteresis_left = scaler_->hysteresis_left();
  }
  return state;
}

std::vector<std::pair<std::string, std::string>> ZeroOptimizer::StateGroups(
    bool masters, bool states) const {
  std::vector<std::pair<std::string, std::string>> groups;
  if (masters) groups.push_back({kMasterState, ddp_->master_group()});
  if (states && states_created_) {
    for (const std::string& s : state_names_) groups.push_back({s, s});
  }
  return groups;
}

absl::StatusOr<OptimizerState> ZeroOptimizer::SaveShard() {
  OptimizerState state = Scalars();
  const auto groups = StateGroups(/*masters=*/true, /*states=*/true);
  for (int i = 0; i < num_chunks(); ++i) {
    const std::pair<int64_t, int64_t> mine = AccountedRange(i);
    if (mine.first == mine.second) continue;
    for (const auto& [state_name, group] : groups) {
      Chunk* chunk = GroupChunk(group, i);
      // One host view of the rank's part (one read when it rests on
      // disk), each tensor's piece copied out of it.
      CZ_ASSIGN_OR_RETURN(HostRange held,
                          HostRange::Open(chunk, mine.first, mine.second));
      for (int k = 0; k < chunk->num_tensors(); ++k) {
        const ChunkTensor& t = chunk->tensor(k);
        const auto [lo, hi] =
            IntersectRanges(mine, {t.offset, t.offset + t.numel});
        if (lo == hi) continue;
        StatePiece piece;
        piece.param = t.name;
        piece.state = state_name;
        piece.shape = t.shape;
        piece.begin = lo - t.offset;
        CZ_ASSIGN_OR_RETURN(piece.values,
                            Tensor::Empty({hi - lo}, DType::kF32));
        std::copy_n(held.as<float>() + (lo - mine.first), hi - lo,
                    piece.values.data<float>());
        state.pieces.push_back(std::move(piece));
      }
    }
  }
  return state;
}

absl::StatusOr<OptimizerState> ZeroOptimizer::GatherState(bool all_ranks) {
  OptimizerState state = Scalars();
  const bool keep = all_ranks || chunks_->process_group().rank() == 0;
  const auto groups = StateGroups(/*masters=*/true, /*states=*/true);
  // One chunk materialised at a time: rank 0 never holds more than one
  // chunk beyond what it keeps.
  for (int i = 0; i < num_chunks(); ++i) {
    for (const auto& [state_name, group] : groups) {
      Chunk* chunk = GroupChunk(group, i);
      const Device device = chunk->device();
      CZ_RETURN_IF_ERROR(chunks_->AccessChunk(chunk));
      for (int k = 0; keep && k < chunk->num_tensors(); ++k) {
        const ChunkTensor& t = chunk->tensor(k);
        StatePiece piece;
        piece.param = t.name;
        piece.state = state_name;
        piece.shape = t.shape;
        CZ_ASSIGN_OR_RETURN(piece.values,
                            Tensor::Empty({t.numel}, DType::kF32));
        const Tensor view = chunk->TensorView(k);
        CZ_RETURN_IF_ERROR(CopyBytes(piece.values.raw_data(), Device::Cpu(),
                                     view.raw_data(), device,
                                     static_cast<size_t>(t.numel) * 4));
        state.pieces.push_back(std::move(piece));
      }
      CZ_RETURN_IF_ERROR(chunks_->ReleaseChunk(chunk));
    }
  }
  return state;
}

namespace {

struct PieceIndex {
  // (param, state) -> pieces, sorted by begin.
  std::map<std::pair<std::string, std::string>, std::vector<const StatePiece*>>
      by_key;
};

PieceIndex IndexPieces(const OptimizerState& state) {
  PieceIndex index;
  for (const StatePiece& p : state.pieces) {
    index.by_key[{p.param, p.state}].push_back(&p);
  }
  for (auto& [key, list] : index.by_key) {
    std::sort(list.begin(), list.end(),
              [](const StatePiece* a, const StatePiece* b) {
                return a->begin < b->begin;
              });
  }
  return index;
}

// True if the pieces (sorted by begin) cover [lo, hi) of the tensor.
bool Covers(const std::vector<const StatePiece*>& pieces, int64_t lo,
            int64_t hi) {
  int64_t reached = lo;
  for (const StatePiece* p : pieces) {
    if (p->begin > reached) break;
    reached = std::max(reached, p->begin + p->values.numel());
    if (reached >= hi) return true;
  }
  return reached >= hi;
}

}  // namespace

absl::Status ZeroOptimizer::CheckPieces(const OptimizerState& state,
                                        bool states_too) {
  const std::string& masters = ddp_->master_group();
  for (const StatePiece& p : state.pieces) {
    const bool known_state = p.state == kMasterState ||
                             std::find(state_names_.begin(), state_names_.end(),
                                       p.state) != state_names_.end();
    if (!known_state) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer state piece of '", p.param, "' has unknown state '",
          p.state, "' for ", OptimizerKindName(options_.kind)));
    }
    absl::StatusOr<TensorLocation> where = chunks_->Locate(masters, p.param);
    if (!where.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer state names parameter '", p.param,
                       "', which is not in the model's chunks"));
    }
    const ChunkTensor& t = where->chunk->tensor(where->index);
    if (p.shape != t.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer state '", p.state, "' of '", p.param,
                       "' has shape ", ShapeToString(p.shape),
                       ", the parameter is ", ShapeToString(t.shape)));
    }
    if (p.values.dtype() != DType::kF32 || p.begin < 0 ||
        p.begin + p.values.numel() > t.numel || !p.values.is_materialized()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer state '", p.state, "' of '", p.param, "': a piece of ",
          p.values.DebugString(), " at element ", p.begin, " does not fit its ",
          t.numel, " f32 elements"));
    }
  }
  const PieceIndex index = IndexPieces(state);
  std::vector<std::string> needed = {kMasterState};
  if (states_too) {
    needed.insert(needed.end(), state_names_.begin(), state_names_.end());
  }
  for (int i = 0; i < chunks_->num_chunks(masters); ++i) {
    const std::pair<int64_t, int64_t> held = HeldRange(i);
    Chunk* chunk = GroupChunk(masters, i);
    for (int k = 0; k < chunk->num_tensors(); ++k) {
      const ChunkTensor& t = chunk->tensor(k);
      const auto [lo, hi] =
          IntersectRanges(held, {t.offset, t.offset + t.numel});
      if (lo == hi) continue;
      for (const std::string& s : needed) {
        auto it = index.by_key.find({t.name, s});
        if (it == index.by_key.end() ||
            !Covers(it->second, lo - t.offset, hi - t.offset)) {
          return absl::NotFoundError(absl::StrCat(
              "optimizer state has no '", s, "' for elements [", lo - t.offset,
              ", ", hi - t.offset, ") of parameter '", t.name, "' (rank ",
              chunks_->process_group().rank(), " holds them)"));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ZeroOptimizer::LoadPieces(const OptimizerState& state,
                                       bool masters_too, bool states_too) {
  const PieceIndex index = IndexPieces(state);
  const std::string& masters = ddp_->master_group();
  const auto groups = StateGroups(masters_too, states_too);
  for (int i = 0; i < chunks_->num_chunks(masters); ++i) {
    const std::pair<int64_t, int64_t> held = HeldRange(i);
    if (held.first == held.second) continue;
    for (const auto& [state_name, group] : groups) {
      Chunk* chunk = GroupChunk(group, i);
      CZ_ASSIGN_OR_RETURN(HostRange dst,
                          HostRange::Open(chunk, held.first, held.second));
      for (int k = 0; k < chunk->num_tensors(); ++k) {
        const ChunkTensor& t = chunk->tensor(k);
        const auto [lo, hi] =
            IntersectRanges(held, {t.offset, t.offset + t.numel});
        if (lo == hi) continue;
        for (const StatePiece* p : index.by_key.at({t.name, state_name})) {
          const auto [a, b] = IntersectRanges(
              {lo, hi},
              {t.offset + p->begin, t.offset + p->begin + p->values.numel()});
          if (a == b) continue;
          std::copy_n(p->values.data<float>() + (a - t.offset - p->begin),
                      b - a, dst.as<float>() + (a - held.first));
        }
      }
      CZ_RETURN_IF_ERROR(dst.Finish());
    }
  }
  // The compute-dtype weights follow the masters.
  return masters_too ? ddp_->RestoreParamsFromMasters() : absl::OkStatus();
}

absl::Status ZeroOptimizer::LoadState(const OptimizerState& state) {
  CZ_RETURN_IF_ERROR(CheckPieces(state, /*states_too=*/states_created_));
  if (scaler_.has_value() && state.loss_scale > 0) {
    CZ_RETURN_IF_ERROR(scaler_->Restore(state.loss_scale, state.growth_tracker,
                                        state.hysteresis_left));
  }
  updates_ = state.updates;
  iterations_ = state.iterations;
  CZ_RETURN_IF_ERROR(LoadPieces(state, /*masters_too=*/true,
                                /*states_too=*/states_created_));
  if (!states_created_) pending_ = state;
  return absl::OkStatus();
}

}  // namespace chunkzero
