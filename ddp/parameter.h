// Parameter and Module: what a model exposes to ddp/.
//
//   class Mlp : public Module {
//    public:
//     Mlp() : fc1_w_("fc1.weight", *Tensor::Zeros({64, 32}, DType::kF32)) {}
//     std::vector<Parameter*> Parameters() override { return {&fc1_w_}; }
//    private:
//     Parameter fc1_w_;
//   };
//
// C++ has no autograd to hook into, so the contract is explicit: a model
// owns its Parameters (with full dotted names such as
// "h.0.attn.c_attn.weight"), lists them, and calls the hooks of
// ddp/param_hooks.h around every layer that uses them. ZeroDdp then owns
// where the values live: it replaces data() with a view of the parameter's
// chunk slice and, after backward, sets grad() to a view of the reduced
// gradient.
//
// A parameter may be deferred (PyTorch's meta-device construction, FSDP's
// param_init_fn): it knows its shape and how to make its values, and makes
// them only when ZeroDdp registers it, one parameter at a time, so that a
// rank never holds the whole model in f32 at once (4 bytes per parameter
// on top of its chunks: 6 GB for GPT-2 XL).
//
//   Parameter w("fc1.weight", {64, 32}, [] { return Tensor::Zeros(...); });
//   CZ_RETURN_IF_ERROR(w.Materialize());  // data() is the values now
//
// Thread-safety: a Parameter is used by its rank's thread only.
#ifndef CHUNKZERO_DDP_PARAMETER_H_
#define CHUNKZERO_DDP_PARAMETER_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tensor/tensor.h"

namespace chunkzero {

// Makes a deferred parameter's initial values (any dtype, host memory or
// the model's device); called again, it must give the same values.
using ParameterInit = std::function<absl::StatusOr<Tensor>()>;

// When a model makes its parameters' initial values: at construction, or
// when each is registered (deferred).
enum class ParameterTiming { kEager, kDeferred };

class Parameter {
 public:
  // `data` holds the initial values (any dtype; models create f32).
  Parameter(std::string name, Tensor data, bool requires_grad = true)
      : name_(std::move(name)),
        data_(std::move(data)),
        requires_grad_(requires_grad) {}
  // A deferred parameter of `shape`: data() holds no memory until
  // Materialize (or set_data) gives it values.
  Parameter(std::string name, Shape shape, ParameterInit init,
            bool requires_grad = true)
      : name_(std::move(name)),
        shape_(std::move(shape)),
        init_(std::move(init)),
        requires_grad_(requires_grad) {}
  Parameter(const Parameter&) = delete;
  Parameter& operator=(const Parameter&) = delete;

  const std::string& name() const { return name_; }
  // The values' shape (a deferred parameter's is the one it was given;
  // set_data may change it, as models that fill placeholders do).
  const Shape& shape() const { return is_deferred() ? shape_ : data_.shape(); }
  int64_t numel() const { return NumElements(shape()); }
  bool requires_grad() const { return requires_grad_; }

  // Whether the values are still to be made.
  bool is_deferred() const { return init_ != nullptr; }
  // Makes a deferred parameter's values (no-op otherwise). The init's
  // error, or InvalidArgument when it makes another shape, names the
  // parameter; the parameter stays deferred then.
  [[nodiscard]] absl::Status Materialize();

  // The values the model computes with. Under ZeroDdp: a view of the
  // parameter's slice of its chunk, materialised between the pre-use and
  // post-use hooks (elsewhere it may be freed: not materialised). From the
  // moment its grad is written into that slice (its last HandGrad of the
  // step) until the optimizer has put the weights back, the slice holds the
  // grad, not the weights: a read then is reported to the read guard
  // (ZeroDdp fails the step with an error naming the parameter) and gets
  // the slice as it is.
  const Tensor& data() const {
    if (holds_grad_ && read_guard_) read_guard_(*this);
    return data_;
  }
  // ZeroDdp's, to place the view, and a test's, to see where it points:
  // not a read of the weights (no read guard).
  Tensor& mutable_data() { return data_; }
  // Makes the parameter deferred again: its values are what `init` makes
  // when it is registered (data() holds no memory until then).
  void Defer(ParameterInit init) {
    shape_ = shape();
    data_ = Tensor();
    init_ = std::move(init);
  }
  // Replaces the values (a deferred parameter is not deferred any more).
  void set_data(Tensor data) {
    data_ = std::move(data);
    init_ = nullptr;
  }

  // The gradient after backward: under ZeroDdp a flat view of the part of
  // the reduced gradient this rank holds (empty where it holds none);
  // undefined before the first backward.
  const Tensor& grad() const { return grad_; }
  void set_grad(Tensor grad) { grad_ = std::move(grad); }

  // ZeroDdp's: whether data() holds this step's grad instead of the
  // weights, and what a read of it then calls.
  using ReadGuard = std::function<void(const Parameter&)>;
  void set_read_guard(ReadGuard guard) { read_guard_ = std::move(guard); }
  void set_holds_grad(bool holds_grad) { holds_grad_ = holds_grad; }
  bool holds_grad() const { return holds_grad_; }

 private:
  const std::string name_;
  Shape shape_;         // While deferred.
  ParameterInit init_;  // Set while deferred.
  Tensor data_;
  Tensor grad_;
  const bool requires_grad_;
  bool holds_grad_ = false;
  ReadGuard read_guard_;
};

// A model, or a part of one, from ddp/'s point of view.
class Module {
 public:
  virtual ~Module() = default;
  // Every parameter in declaration order. The pointers stay valid for the
  // module's lifetime and the order never changes.
  virtual std::vector<Parameter*> Parameters() = 0;
};

// "h.0" + "attn.c_attn.weight" -> "h.0.attn.c_attn.weight"; an empty prefix
// gives the name alone. For nested modules naming their parameters.
std::string JoinName(absl::string_view prefix, absl::string_view name);

}  // namespace chunkzero

#endif  // CHUNKZERO_DDP_PARAMETER_H_
