#include "models/common/parameter_scopes.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tensor/ops/cast_tensor.h"

namespace chunkzero {

ParameterScopes::ParameterScopes(std::string model, WeightReader* reader)
    : model_(std::move(model)), reader_(reader) {}

ParameterScopes::~ParameterScopes() {
  if (tracker_ != nullptr) {
    tracker_->Subtract(device_, MemoryCategory::kActivation, reported_);
  }
}

int ParameterScopes::Add(std::string name, Tensor data) {
  shapes_.push_back(data.shape());
  params_.push_back(
      std::make_unique<Parameter>(std::move(name), std::move(data)));
  return static_cast<int>(params_.size()) - 1;
}

int ParameterScopes::AddDeferred(std::string name, Shape shape,
                                 ParameterInit init) {
  shapes_.push_back(shape);
  params_.push_back(std::make_unique<Parameter>(
      std::move(name), std::move(shape), std::move(init)));
  return static_cast<int>(params_.size()) - 1;
}

absl::StatusOr<int> ParameterScopes::AddInitialised(
    std::string name, Shape shape, double stddev, float constant,
    NormalSampler& normal, DType dtype, Device device, ParameterTiming timing) {
  // ZeroDdp copies deferred values into its chunks from host memory.
  const Device where =
      timing == ParameterTiming::kDeferred ? Device::Cpu() : device;
  ParameterInit make = [from = normal, stddev, constant, shape, dtype, where,
                        name]() -> absl::StatusOr<Tensor> {
    NormalSampler draws = from;
    std::vector<float> values(NumElements(shape), constant);
    if (stddev > 0) {
      for (float& v : values) v = static_cast<float>(stddev * draws.Next());
    }
    CZ_ASSIGN_OR_RETURN(Tensor data, Tensor::FromFloats(values, shape, dtype));
    if (where == Device::Cpu()) return data;
    absl::StatusOr<Tensor> there = data.To(where);
    CZ_RETURN_IF_ERROR(there.status(), "making parameter '", name, "' on ",
                       where.ToString());
    return there;
  };
  if (stddev > 0) normal.Skip(NumElements(shape));
  if (timing == ParameterTiming::kDeferred) {
    return AddDeferred(std::move(name), std::move(shape), std::move(make));
  }
  CZ_ASSIGN_OR_RETURN(Tensor data, make());
  return Add(std::move(name), std::move(data));
}

ParameterScopes::Scope ParameterScopes::MakeScope(std::vector<int> index,
                                                  unsigned matrices) const {
  Scope s;
  for (int i : index) s.params.push_back(params_[i].get());
  s.index = std::move(index);
  s.matrices = matrices;
  return s;
}

absl::Status ParameterScopes::MakeGradBuffer(int64_t elements) {
  CZ_ASSIGN_OR_RETURN(
      grad_buffer_, Tensor::Empty({elements}, DType::kF32, reader_->device()));
  return absl::OkStatus();
}

std::vector<Parameter*> ParameterScopes::Parameters() const {
  std::vector<Parameter*> out;
  out.reserve(params_.size());
  for (const auto& p : params_) out.push_back(p.get());
  return out;
}

Parameter* ParameterScopes::Find(const std::string& name) const {
  for (const auto& p : params_) {
    if (p->name() == name) return p.get();
  }
  return nullptr;
}

absl::Status ParameterScopes::LoadStateDict(
    const std::map<std::string, Tensor>& state, absl::string_view kind) {
  // Check everything before changing anything.
  for (size_t i = 0; i < params_.size(); ++i) {
    const Parameter& p = *params_[i];
    auto it = state.find(p.name());
    if (it == state.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("state dict has no tensor '", p.name(), "'"));
    }
    if (it->second.shape() != shapes_[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "state dict tensor '", p.name(), "' is ", it->second.DebugString(),
          ", expected shape ", ShapeToString(shapes_[i])));
    }
    if (!it->second.is_materialized()) {
      return absl::InvalidArgumentError(
          absl::StrCat("state dict tensor '", p.name(), "' has no memory"));
    }
    if (!p.is_deferred() && !p.data().is_materialized()) {
      return absl::FailedPreconditionError(
          absl::StrCat("parameter '", p.name(), "' is not materialised"));
    }
  }
  if (state.size() != params_.size()) {
    for (const auto& [name, tensor] : state) {
      if (Find(name) == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "state dict tensor '", name, "' is not a ", kind, " parameter"));
      }
    }
  }
  for (auto& p : params_) {
    const Tensor& from = state.at(p->name());
    if (p->is_deferred()) {
      // Still deferred: made from the state dict's tensor (shared, not
      // copied) in f32 in host memory when registered, so that loading a
      // model never holds all of it in f32 beside the state dict.
      p->Defer([from]() -> absl::StatusOr<Tensor> {
        CZ_ASSIGN_OR_RETURN(Tensor values,
                            Tensor::Empty(from.shape(), DType::kF32));
        CZ_RETURN_IF_ERROR(CastTensor(values, from));
        return values;
      });
      continue;
    }
    CZ_RETURN_IF_ERROR(CastTensor(p->mutable_data(), from), "loading '",
                       p->name(), "'");
  }
  return absl::OkStatus();
}

absl::Status ParameterScopes::ReadWeights(const Scope& scope, int first,
                                          int count, GroupWeights* out) {
  // A bf16 parameter that bf16 products read as bits and nothing else reads.
  auto bits_only = [&](int i) {
    return bf16_products_ && (scope.matrices >> i & 1u) != 0 &&
           scope.params[i]->data().dtype() == DType::kBF16;
  };
  size_t widen = 0;
  for (int i = first; i < first + count; ++i) {
    const Parameter& p = *scope.params[i];
    const Tensor& data = p.data();
    if (!data.is_materialized() || !reader_->Reads(data.device())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "parameter '", p.name(), "' is not materialised where the model ",
          "computes (", reader_->device().ToString(),
          "): ", data.DebugString()));
    }
    if (data.shape() != shapes_[scope.index[i]]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "parameter '", p.name(), "' is ", data.DebugString(),
          ", expected shape ", ShapeToString(shapes_[scope.index[i]])));
    }
    if (data.dtype() != DType::kF32 && !bits_only(i)) widen += data.numel();
  }
  // Grows once to the largest 16-bit group, then is reused.
  if (widen_.size() < widen) {
    const int64_t held = workspace_bytes();
    const int64_t grown =
        held + static_cast<int64_t>((widen - widen_.size()) * sizeof(float));
    CZ_RETURN_IF_ERROR(Hold(grown), "widening the weights of parameter '",
                       scope.params[first]->name(), "'");
    // Allocate frees the old buffer first: on failure neither is held.
    const int64_t old_bytes =
        static_cast<int64_t>(widen_.size() * sizeof(float));
    const absl::Status made = widen_.Allocate(widen, reader_->device());
    if (!made.ok()) {
      Hold(held - old_bytes).IgnoreError();  // Shrinking always fits.
      return absl::Status(
          made.code(),
          absl::StrCat("widening the weights of parameter '",
                       scope.params[first]->name(), "': ", made.message()));
    }
  }
  size_t offset = 0;
  for (int i = first; i < first + count; ++i) {
    const Tensor& data = scope.params[i]->data();
    const int at = i - first;
    if (bf16_products_ && data.dtype() == DType::kBF16) {
      out->bf16[at] = static_cast<const uint16_t*>(data.raw_data());
    }
    if (data.dtype() == DType::kF32) {
      out->f32[at] = data.data<float>();
      continue;
    }
    if (bits_only(i)) continue;
    float* dst = widen_.data() + offset;
    CZ_RETURN_IF_ERROR(
        reader_->Widen(dst, data.raw_data(), data.dtype(), data.numel()),
        "widening parameter '", scope.params[i]->name(), "'");
    out->f32[at] = dst;
    offset += data.numel();
  }
  return absl::OkStatus();
}

absl::Status ParameterScopes::Access::CheckRange(int first, int count) const {
  if (first < 0 || count < 1 ||
      first + count > static_cast<int>(scope_.params.size())) {
    return absl::InternalError(
        absl::StrCat(scopes_.model_, ": parameters [", first, ", ",
                     first + count, ") of a scope of ", scope_.params.size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<ParameterScopes::GroupWeights> ParameterScopes::Access::Weights(
    int first, int count) {
  CZ_RETURN_IF_ERROR(CheckRange(first, count));
  GroupWeights w;
  CZ_RETURN_IF_ERROR(scopes_.ReadWeights(scope_, first, count, &w));
  return w;
}

absl::StatusOr<ParameterScopes::GroupGrads> ParameterScopes::Access::Grads(
    int first, int count) {
  CZ_RETURN_IF_ERROR(CheckRange(first, count));
  GroupGrads g;
  for (int i = first; i < first + count; ++i) {
    CZ_ASSIGN_OR_RETURN(Tensor view,
                        scopes_.grad_buffer_.ViewRange(
                            offset_, scopes_.shapes_[scope_.index[i]]));
    offset_ += view.numel();
    g.g[i - first] = view.data<float>();
    pending_.push_back({scope_.params[i], std::move(view)});
  }
  return g;
}

absl::Status ParameterScopes::Access::Hand() {
  for (auto& [param, grad] : pending_) {
    CZ_RETURN_IF_ERROR(hooks_.HandGrad(*param, grad));
  }
  pending_.clear();
  offset_ = 0;
  return absl::OkStatus();
}

absl::Status ParameterScopes::RunForwardByGroup(
    ParamHooks& hooks, const Scope& scope,
    absl::FunctionRef<absl::Status(Access& s)> fn) {
  CZ_ASSIGN_OR_RETURN(HookScope hook_scope,
                      HookScope::Forward(hooks, scope.params));
  Access access(*this, hooks, scope);
  CZ_RETURN_IF_ERROR(fn(access));
  return hook_scope.Exit();
}

absl::Status ParameterScopes::RunForward(
    ParamHooks& hooks, const Scope& scope,
    absl::FunctionRef<absl::Status(const GroupWeights& w)> fn) {
  const int n = static_cast<int>(scope.params.size());
  return RunForwardByGroup(hooks, scope, [&](Access& s) -> absl::Status {
    CZ_ASSIGN_OR_RETURN(const GroupWeights w, s.Weights(0, n));
    return fn(w);
  });
}

absl::Status ParameterScopes::RunBackwardByGroup(
    ParamHooks& hooks, const Scope& scope,
    absl::FunctionRef<absl::Status(Access& s)> fn) {
  CZ_ASSIGN_OR_RETURN(HookScope hook_scope,
                      HookScope::Backward(hooks, scope.params));
  Access access(*this, hooks, scope);
  CZ_RETURN_IF_ERROR(fn(access));
  CZ_RETURN_IF_ERROR(access.Hand());
  return hook_scope.Exit();
}

absl::Status ParameterScopes::RunBackward(
    ParamHooks& hooks, const Scope& scope, bool read_weights,
    absl::FunctionRef<absl::Status(const GroupWeights& w, float* const* g)>
        fn) {
  const int n = static_cast<int>(scope.params.size());
  return RunBackwardByGroup(hooks, scope, [&](Access& s) -> absl::Status {
    GroupWeights w;
    if (read_weights) {
      CZ_ASSIGN_OR_RETURN(w, s.Weights(0, n));
    }
    CZ_ASSIGN_OR_RETURN(const GroupGrads g, s.Grads(0, n));
    // Handed by RunBackwardByGroup after fn, with every read of the weights
    // done: under ZeroDdp a grad may overwrite its parameter's storage.
    return fn(w, g.g);
  });
}

int64_t ParameterScopes::workspace_bytes() const {
  return buffer_bytes_ + static_cast<int64_t>(grad_buffer_.nbytes()) +
         static_cast<int64_t>(widen_.size() * sizeof(float));
}

absl::Status ParameterScopes::HoldBuffers(int64_t bytes) {
  CZ_RETURN_IF_ERROR(Hold(workspace_bytes() - buffer_bytes_ + bytes));
  buffer_bytes_ = bytes;
  return absl::OkStatus();
}

absl::Status ParameterScopes::Hold(int64_t bytes) {
  if (tracker_ != nullptr) {
    if (bytes > reported_) {
      CZ_RETURN_IF_ERROR(tracker_->TryAdd(device_, MemoryCategory::kActivation,
                                          bytes - reported_));
    } else if (bytes < reported_) {
      tracker_->Subtract(device_, MemoryCategory::kActivation,
                         reported_ - bytes);
    }
  }
  reported_ = bytes;
  return absl::OkStatus();
}

absl::Status ParameterScopes::set_memory_accounting(MemoryTracker* tracker,
                                                    Device device) {
  const int64_t held = workspace_bytes();
  if (tracker != nullptr) {
    CZ_RETURN_IF_ERROR(
        tracker->TryAdd(device, MemoryCategory::kActivation, held), model_,
        ": the working buffers it holds");
  }
  if (tracker_ != nullptr) {
    tracker_->Subtract(device_, MemoryCategory::kActivation, reported_);
  }
  tracker_ = tracker;
  device_ = device;
  reported_ = held;
  return absl::OkStatus();
}

}  // namespace chunkzero
