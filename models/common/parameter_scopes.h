// ParameterScopes: what every model trained through the engine does around
// its layers, written once. It holds the model's parameters in declaration
// order, runs each use of a group of them inside the hooks' scope
// (ddp/param_hooks.h), hands their grads over, and counts the model's
// working memory in a MemoryTracker.
//
//   ParameterScopes scopes("LlamaModel", &reader);
//   const int w = scopes.Add("lm_head.weight", std::move(data));
//   ParameterScopes::Scope head = scopes.MakeScope({w}, /*matrices=*/0b1);
//   CZ_RETURN_IF_ERROR(scopes.MakeGradBuffer(largest_group));
//   CZ_RETURN_IF_ERROR(scopes.RunForward(
//       hooks, head, [&](const ParameterScopes::GroupWeights& weights) {
//         return Logits(weights.matrix(0));
//       }));
//
// A scope is one module use: PreForward ... the computation ...
// PostForward, or PreBackward ... a HandGrad per parameter ...
// PostBackward. Inside it the model reads its weights and writes its grads
// a group at a time (a weight matrix and its bias), so that only one
// group's widened weights and f32 grads are held at once:
//  - Weights(first, count): the group's f32 values, read in place when the
//    parameter is f32, widened into one reused buffer when it is 16-bit
//    (what an earlier call widened is gone); with bf16 products a bf16
//    weight matrix (a `matrices` bit) only as its bits, which the products
//    read, and any other bf16 parameter as its bits as well;
//  - Grads(first, count): f32 buffers for the group's grads, in the one
//    grad buffer after those not yet handed;
//  - Hand(): hands every grad asked for since the last Hand, in that order,
//    and frees their buffers. A group's grads are handed once every read
//    of its weights is done: under ZeroDdp a grad may overwrite its
//    parameter's storage.
// A handed grad is a view of the grad buffer, valid only during the
// HandGrad call (hooks copy or reduce it).
//
// Memory: the grad buffer, the widen buffer and the model's own activation
// and scratch buffers (HoldBuffers) are the model's working memory, which
// set_memory_accounting reports to a tracker as MemoryCategory::kActivation;
// the tracker's device limit then caps it, and growing past it fails with
// ResourceExhausted before anything is allocated.
//
// Thread-safety: used by its model's thread.
#ifndef CHUNKZERO_MODELS_COMMON_PARAMETER_SCOPES_H_
#define CHUNKZERO_MODELS_COMMON_PARAMETER_SCOPES_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ddp/param_hooks.h"
#include "ddp/parameter.h"
#include "kernels/weight_reader.h"
#include "models/common/device_array.h"
#include "models/common/normal_sampler.h"
#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/memory/memory_tracker.h"
#include "tensor/tensor.h"

namespace chunkzero {

class ParameterScopes {
 public:
  static constexpr int kMaxScopeParams = 4;

  // One hook scope: indices of its parameters in declaration order, and
  // the matching pointers.
  struct Scope {
    std::vector<int> index;
    std::vector<Parameter*> params;
    // Bit i set: params[i] is a weight matrix that only feeds matrix
    // products (bf16 products read its bits; it is not widened).
    unsigned matrices = 0;
  };
  // A group's weights (out[i - first] for parameter i of the scope).
  struct GroupWeights {
    // f32 values (null for a bits-only matrix).
    const float* operator[](int i) const { return f32[i]; }
    MatrixWeight matrix(int i) const { return {f32[i], bf16[i]}; }

    const float* f32[kMaxScopeParams] = {};
    const uint16_t* bf16[kMaxScopeParams] = {};
  };
  // A group's f32 grad buffers (g[i - first] for parameter i).
  struct GroupGrads {
    float* g[kMaxScopeParams] = {};
  };
  class Access;

  // `model` names the model in errors; `reader` must outlive this.
  ParameterScopes(std::string model, WeightReader* reader);
  ~ParameterScopes();
  ParameterScopes(const ParameterScopes&) = delete;
  ParameterScopes& operator=(const ParameterScopes&) = delete;

  // Adds the next parameter in declaration order; returns its index.
  int Add(std::string name, Tensor data);
  // The same for a deferred parameter (ddp/parameter.h): `init` makes its
  // values when it is registered.
  int AddDeferred(std::string name, Shape shape, ParameterInit init);
  // Adds the next parameter as models initialise theirs: every element
  // `constant`, or with stddev > 0 N(0, stddev) draws from `normal` as it
  // stands now (which moves on past them either way), stored as `dtype`.
  // kEager makes the values now on `device`; kDeferred in host memory
  // when the parameter is registered, the same values. Errors name the
  // parameter.
  [[nodiscard]] absl::StatusOr<int> AddInitialised(std::string name,
                                                   Shape shape, double stddev,
                                                   float constant,
                                                   NormalSampler& normal,
                                                   DType dtype, Device device,
                                                   ParameterTiming timing);
  // The scope of parameters `index` (at most kMaxScopeParams).
  Scope MakeScope(std::vector<int> index, unsigned matrices = 0) const;
  // An f32 grad buffer of `elements` on the reader's device, the largest
  // group whose grads are asked for at once.
  [[nodiscard]] absl::Status MakeGradBuffer(int64_t elements);

  std::vector<Parameter*> Parameters() const;
  // The parameter called `name`, or nullptr.
  Parameter* Find(const std::string& name) const;
  const Shape& shape(int index) const { return shapes_[index]; }
  int size() const { return static_cast<int>(params_.size()); }

  // Copies `state` (every parameter by name, any float dtype, the
  // parameter's shape, on any device) into the parameters, converting to
  // their dtype (a deferred parameter stays deferred, made from its
  // tensor, which it shares, when registered). InvalidArgument naming the
  // tensor when one is missing,
  // extra ("not a <kind> parameter"), mis-shaped or without memory;
  // nothing is changed then. FailedPrecondition for a parameter not
  // materialised.
  [[nodiscard]] absl::Status LoadStateDict(
      const std::map<std::string, Tensor>& state, absl::string_view kind);

  // Whether the products read bf16 (Weights then gives bf16 bits).
  void set_bf16_products(bool bf16) { bf16_products_ = bf16; }

  // One forward use: PreForward, fn(access), PostForward.
  [[nodiscard]] absl::Status RunForwardByGroup(
      ParamHooks& hooks, const Scope& scope,
      absl::FunctionRef<absl::Status(Access& s)> fn);
  // The same with the whole scope as one group: fn(weights).
  [[nodiscard]] absl::Status RunForward(
      ParamHooks& hooks, const Scope& scope,
      absl::FunctionRef<absl::Status(const GroupWeights& w)> fn);
  // One backward use: PreBackward, fn(access), the grads not yet handed
  // handed in order, PostBackward.
  [[nodiscard]] absl::Status RunBackwardByGroup(
      ParamHooks& hooks, const Scope& scope,
      absl::FunctionRef<absl::Status(Access& s)> fn);
  // The same with the whole scope as one group: fn(weights, grads) where
  // g[i] is the f32 grad buffer of scope.params[i] for fn to fill (the
  // weights all null unless `read_weights`), then HandGrad of each.
  [[nodiscard]] absl::Status RunBackward(
      ParamHooks& hooks, const Scope& scope, bool read_weights,
      absl::FunctionRef<absl::Status(const GroupWeights& w, float* const* g)>
          fn);

  // The model's activation and scratch buffers now hold `bytes` (reported
  // with the grad and widen buffers): ResourceExhausted, with nothing
  // changed, when the growth does not fit under the tracker's limit.
  [[nodiscard]] absl::Status HoldBuffers(int64_t bytes);
  // The working memory: the model's buffers, the grad and widen buffers.
  int64_t workspace_bytes() const;
  // Reports workspace_bytes() to `tracker` on `device` from now on (moved
  // from the previous tracker); ResourceExhausted if it does not fit there
  // (nothing changes then). nullptr stops reporting.
  [[nodiscard]] absl::Status set_memory_accounting(MemoryTracker* tracker,
                                                   Device device);

 private:
  [[nodiscard]] absl::Status ReadWeights(const Scope& scope, int first,
                                         int count, GroupWeights* out);
  // Reports `bytes` as the working memory.
  [[nodiscard]] absl::Status Hold(int64_t bytes);

  const std::string model_;
  WeightReader* const reader_;
  std::vector<std::unique_ptr<Parameter>> params_;
  std::vector<Shape> shapes_;
  bool bf16_products_ = false;
  DeviceArray<float> widen_;
  Tensor grad_buffer_;
  int64_t buffer_bytes_ = 0;
  MemoryTracker* tracker_ = nullptr;
  Device device_ = Device::Cpu();
  int64_t reported_ = 0;
};

// One use of a scope's parameters, a group at a time (see above).
class ParameterScopes::Access {
 public:
  Access(ParameterScopes& scopes, ParamHooks& hooks, const Scope& scope)
      : scopes_(scopes), hooks_(hooks), scope_(scope) {}

  [[nodiscard]] absl::StatusOr<GroupWeights> Weights(int first, int count);
  [[nodiscard]] absl::StatusOr<GroupGrads> Grads(int first, int count);
  [[nodiscard]] absl::Status Hand();

 private:
  absl::Status CheckRange(int first, int count) const;

  ParameterScopes& scopes_;
  ParamHooks& hooks_;
  const Scope& scope_;
  std::vector<std::pair<Parameter*, Tensor>> pending_;
  int64_t offset_ = 0;
};

}  // namespace chunkzero

#endif  // CHUNKZERO_MODELS_COMMON_PARAMETER_SCOPES_H_
