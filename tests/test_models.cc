#include "tests/test_models.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace chunkzero {
namespace {

Tensor RandomTensor(Shape shape, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::vector<float> v(NumElements(shape));
  for (float& x : v) x = u(rng);
  return *Tensor::FromFloats(v, std::move(shape));
}

absl::StatusOr<std::vector<float>> Values(const Parameter& p) {
  return p.data().ToFloats();
}

// y[rows, out] = x[rows, in] W[in, out] (+ b[out]); W may be transposed
// (W is [out, in] then).
std::vector<float> MatMul(const std::vector<float>& x, int rows, int in,
                          const std::vector<float>& w, int out,
                          bool transposed) {
  std::vector<float> y(static_cast<size_t>(rows) * out, 0.0f);
  for (int r = 0; r < rows; ++r) {
    for (int o = 0; o < out; ++o) {
      float acc = 0;
      for (int i = 0; i < in; ++i) {
        acc += x[r * in + i] * (transposed ? w[o * in + i] : w[i * out + o]);
      }
      y[r * out + o] = acc;
    }
  }
  return y;
}

// A dense layer y = x W + b. Keeps one saved input per forward use, so it
// can be applied several times per step; backward pops them in reverse.
class Linear {
 public:
  Linear(const std::string& prefix, int in, int out, std::mt19937& rng)
      : in_(in),
        out_(out),
        w_(JoinName(prefix, "weight"), RandomTensor({in, out}, rng)),
        b_(JoinName(prefix, "bias"), RandomTensor({out}, rng)) {}

  void AddParameters(std::vector<Parameter*>& out) {
    out.push_back(&w_);
    out.push_back(&b_);
  }

  absl::StatusOr<std::vector<float>> Forward(ParamHooks& hooks,
                                             const std::vector<float>& x,
                                             int rows) {
    CZ_ASSIGN_OR_RETURN(HookScope scope, HookScope::Forward(hooks, {&w_, &b_}));
    CZ_ASSIGN_OR_RETURN(std::vector<float> w, Values(w_));
    CZ_ASSIGN_OR_RETURN(std::vector<float> b, Values(b_));
    std::vector<float> y = MatMul(x, rows, in_, w, out_, false);
    for (int r = 0; r < rows; ++r) {
      for (int o = 0; o < out_; ++o) y[r * out_ + o] += b[o];
    }
    saved_.push_back({x, rows});
    CZ_RETURN_IF_ERROR(scope.Exit());
    return y;
  }

  // Returns dx; hands dW and db over.
  absl::StatusOr<std::vector<float>> Backward(ParamHooks& hooks,
                                              const std::vector<float>& dy) {
    CZ_ASSIGN_OR_RETURN(HookScope scope,
                        HookScope::Backward(hooks, {&w_, &b_}));
    auto [x, rows] = std::move(saved_.back());
    saved_.pop_back();
    CZ_ASSIGN_OR_RETURN(std::vector<float> w, Values(w_));
    std::vector<float> dw(static_cast<size_t>(in_) * out_, 0.0f), db(out_, 0);
    for (int r = 0; r < rows; ++r) {
      for (int o = 0; o < out_; ++o) {
        db[o] += dy[r * out_ + o];
        for (int i = 0; i < in_; ++i)
          dw[i * out_ + o] += x[r * in_ + i] * dy[r * out_ + o];
      }
    }
    // dx = dy W^T, computed before the grads are handed over (grad reuse
    // may overwrite the weights).
    std::vector<float> dx = MatMul(dy, rows, out_, w, in_, true);
    CZ_RETURN_IF_ERROR(
        hooks.HandGrad(w_, *Tensor::FromFloats(dw, {in_, out_})));
    CZ_RETURN_IF_ERROR(hooks.HandGrad(b_, *Tensor::FromFloats(db, {out_})));
    CZ_RETURN_IF_ERROR(scope.Exit());
    return dx;
  }

 private:
  int in_, out_;
  Parameter w_, b_;
  std::vector<std::pair<std::vector<float>, int>> saved_;
};

std::vector<float> Relu(std::vector<float> x) {
  for (float& v : x) v = v > 0 ? v : 0;
  return x;
}

// dL/dx for relu given its output y.
std::vector<float> ReluBackward(const std::vector<float>& y,
                                std::vector<float> dy) {
  for (size_t i = 0; i < dy.size(); ++i) {
    if (y[i] <= 0) dy[i] = 0;
  }
  return dy;
}

// Loss and dL/dy for the mean over rows of 0.5 ||y - t||^2.
float Loss(const std::vector<float>& y, const std::vector<float>& t, int rows,
           std::vector<float>* dy) {
  float loss = 0;
  dy->resize(y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    const float d = y[i] - t[i];
    loss += 0.5f * d * d;
    (*dy)[i] = d / rows;
  }
  return loss / rows;
}

// kMlp, kUnused and kBranch.
class Mlp : public TestModel {
 public:
  Mlp(TestModelKind kind, std::mt19937& rng)
      : kind_(kind),
        fc1_("fc1", 4, 8, rng),
        fc2_("fc2", 8, 3, rng),
        branch_("branch", 3, 3, rng),
        extra_("extra.weight", RandomTensor({5}, rng)) {}

  std::vector<Parameter*> Parameters() override {
    std::vector<Parameter*> p;
    fc1_.AddParameters(p);
    if (kind_ == TestModelKind::kUnused) p.push_back(&extra_);
    fc2_.AddParameters(p);
    if (kind_ == TestModelKind::kBranch) branch_.AddParameters(p);
    return p;
  }
  int input_width() const override { return 4; }
  int output_width() const override { return 3; }

  absl::StatusOr<float> Forward(ParamHooks& hooks, const Batch& batch,
                                int rank) override {
    rows_ = batch.rows;
    CZ_ASSIGN_OR_RETURN(std::vector<float> h,
                        fc1_.Forward(hooks, batch.x, rows_));
    h_ = Relu(std::move(h));
    CZ_ASSIGN_OR_RETURN(std::vector<float> y, fc2_.Forward(hooks, h_, rows_));
    took_branch_ = kind_ == TestModelKind::kBranch && rank % 2 == 1;
    if (took_branch_) {
      CZ_ASSIGN_OR_RETURN(y, branch_.Forward(hooks, y, rows_));
    }
    return Loss(y, batch.target, rows_, &dy_);
  }

  absl::Status Backward(ParamHooks& hooks) override {
    std::vector<float> dy = dy_;
    if (took_branch_) {
      CZ_ASSIGN_OR_RETURN(dy, branch_.Backward(hooks, dy));
    }
    CZ_ASSIGN_OR_RETURN(std::vector<float> dh, fc2_.Backward(hooks, dy));
    return fc1_.Backward(hooks, ReluBackward(h_, std::move(dh))).status();
  }

 private:
  TestModelKind kind_;
  Linear fc1_, fc2_, branch_;
  Parameter extra_;
  int rows_ = 0;
  bool took_branch_ = false;
  std::vector<float> h_, dy_;
};

// Two hidden layers and a head: y = head(relu(second(relu(first(x))))).
// kNested: first = blocks.0.fc, second = blocks.1.fc (dotted names).
// kTwice: first = second = fc, one layer applied twice.
class TwoHidden : public TestModel {
 public:
  TwoHidden(TestModelKind kind, std::mt19937& rng) : head_(nullptr) {
    if (kind == TestModelKind::kNested) {
      layers_.push_back(
          std::make_unique<Linear>(JoinName("blocks.0", "fc"), 4, 4, rng));
      layers_.push_back(
          std::make_unique<Linear>(JoinName("blocks.1", "fc"), 4, 4, rng));
      first_ = layers_[0].get();
      second_ = layers_[1].get();
    } else {
      layers_.push_back(std::make_unique<Linear>("fc", 4, 4, rng));
      first_ = second_ = layers_[0].get();
    }
    layers_.push_back(std::make_unique<Linear>("head", 4, 3, rng));
    head_ = layers_.back().get();
  }
  std::vector<Parameter*> Parameters() override {
    std::vector<Parameter*> p;
    for (auto& layer : layers_) layer->AddParameters(p);
    return p;
  }
  int input_width() const override { return 4; }
  int output_width() const override { return 3; }
  absl::StatusOr<float> Forward(ParamHooks& hooks, const Batch& batch,
                                int) override {
    rows_ = batch.rows;
    CZ_ASSIGN_OR_RETURN(std::vector<float> a,
                        first_->Forward(hooks, batch.x, rows_));
    a0_ = Relu(std::move(a));
    CZ_ASSIGN_OR_RETURN(a, second_->Forward(hooks, a0_, rows_));
    a1_ = Relu(std::move(a));
    CZ_ASSIGN_OR_RETURN(std::vector<float> y,
                        head_->Forward(hooks, a1_, rows_));
    return Loss(y, batch.target, rows_, &dy_);
  }
  absl::Status Backward(ParamHooks& hooks) override {
    CZ_ASSIGN_OR_RETURN(std::vector<float> d, head_->Backward(hooks, dy_));
    CZ_ASSIGN_OR_RETURN(d, second_->Backward(hooks, ReluBackward(a1_, d)));
    return first_->Backward(hooks, ReluBackward(a0_, d)).status();
  }

 private:
  std::vector<std::unique_ptr<Linear>> layers_;  // Declaration order.
  Linear* first_;
  Linear* second_;
  Linear* head_;
  int rows_ = 0;
  std::vector<float> a0_, a1_, dy_;
};

// kTied: h = relu(x wte), logits = h wte^T, wte [V, C].
class Tied : public TestModel {
 public:
  static constexpr int kV = 6, kC = 4;
  explicit Tied(std::mt19937& rng)
      : wte_("wte.weight", RandomTensor({kV, kC}, rng)) {}
  std::vector<Parameter*> Parameters() override { return {&wte_}; }
  int input_width() const override { return kV; }
  int output_width() const override { return kV; }
  absl::StatusOr<float> Forward(ParamHooks& hooks, const Batch& batch,
                                int) override {
    rows_ = batch.rows;
    x_ = batch.x;
    {
      CZ_ASSIGN_OR_RETURN(HookScope scope, HookScope::Forward(hooks, {&wte_}));
      CZ_ASSIGN_OR_RETURN(std::vector<float> w, Values(wte_));
      h_ = Relu(MatMul(x_, rows_, kV, w, kC, false));
      CZ_RETURN_IF_ERROR(scope.Exit());
    }
    CZ_ASSIGN_OR_RETURN(HookScope scope, HookScope::Forward(hooks, {&wte_}));
    CZ_ASSIGN_OR_RETURN(std::vector<float> w, Values(wte_));
    std::vector<float> logits = MatMul(h_, rows_, kC, w, kV, true);
    CZ_RETURN_IF_ERROR(scope.Exit());
    return Loss(logits, batch.target, rows_, &dy_);
  }
  absl::Status Backward(ParamHooks& hooks) override {
    std::vector<float> dh;
    {
      // logits = h wte^T: dwte += dy^T h, dh = dy wte.
      CZ_ASSIGN_OR_RETURN(HookScope scope, HookScope::Backward(hooks, {&wte_}));
      CZ_ASSIGN_OR_RETURN(std::vector<float> w, Values(wte_));
      dh = MatMul(dy_, rows_, kV, w, kC, false);
      std::vector<float> dw(kV * kC, 0.0f);
      for (int r = 0; r < rows_; ++r)
        for (int v = 0; v < kV; ++v)
          for (int c = 0; c < kC; ++c)
            dw[v * kC + c] += dy_[r * kV + v] * h_[r * kC + c];
      CZ_RETURN_IF_ERROR(
          hooks.HandGrad(wte_, *Tensor::FromFloats(dw, {kV, kC})));
      CZ_RETURN_IF_ERROR(scope.Exit());
    }
    // h = relu(x wte): dwte += x^T dpre.
    CZ_ASSIGN_OR_RETURN(HookScope scope, HookScope::Backward(hooks, {&wte_}));
    std::vector<float> dpre = ReluBackward(h_, dh);
    std::vector<float> dw(kV * kC, 0.0f);
    for (int r = 0; r < rows_; ++r)
      for (int v = 0; v < kV; ++v)
        for (int c = 0; c < kC; ++c)
          dw[v * kC + c] += x_[r * kV + v] * dpre[r * kC + c];
    CZ_RETURN_IF_ERROR(hooks.HandGrad(wte_, *Tensor::FromFloats(dw, {kV, kC})));
    return scope.Exit();
  }

 private:
  Parameter wte_;
  int rows_ = 0;
  std::vector<float> x_, h_, dy_;
};

}  // namespace

const char* TestModelName(TestModelKind kind) {
  switch (kind) {
    case TestModelKind::kMlp:
      return "mlp";
    case TestModelKind::kNested:
      return "nested";
    case TestModelKind::kTwice:
      return "twice";
    case TestModelKind::kTied:
      return "tied";
    case TestModelKind::kUnused:
      return "unused";
    case TestModelKind::kBranch:
      return "branch";
  }
  return "?";
}

std::unique_ptr<TestModel> MakeTestModel(TestModelKind kind, uint32_t seed) {
  std::mt19937 rng(seed);
  switch (kind) {
    case TestModelKind::kNested:
    case TestModelKind::kTwice:
      return std::make_unique<TwoHidden>(kind, rng);
    case TestModelKind::kTied:
      return std::make_unique<Tied>(rng);
    default:
      return std::make_unique<Mlp>(kind, rng);
  }
}

Batch MakeBatch(const TestModel& model, int rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Batch b;
  b.rows = rows;
  b.x.resize(static_cast<size_t>(rows) * model.input_width());
  b.target.resize(static_cast<size_t>(rows) * model.output_width());
  for (float& v : b.x) v = u(rng);
  for (float& v : b.target) v = u(rng);
  return b;
}

Batch SliceBatch(const Batch& batch, int begin, int end) {
  const int in = batch.x.size() / batch.rows;
  const int out = batch.target.size() / batch.rows;
  Batch b;
  b.rows = end - begin;
  b.x.assign(batch.x.begin() + begin * in, batch.x.begin() + end * in);
  b.target.assign(batch.target.begin() + begin * out,
                  batch.target.begin() + end * out);
  return b;
}

}  // namespace chunkzero
