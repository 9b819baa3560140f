// Small models that implement the ddp/ contract, for tests of ZeroDdp and
// the optimizer. All compute in f32 on the CPU; parameters stored in f16 or
// bf16 are widened per layer.
//
//   std::unique_ptr<TestModel> m = MakeTestModel(TestModelKind::kTied, seed);
//   CZ_ASSIGN_OR_RETURN(float loss, m->Forward(hooks, batch, rank));
//   CZ_RETURN_IF_ERROR(m->Backward(hooks));
//
// Loss: the mean over the batch rows of 0.5 * ||y - target||^2. Kinds:
//   kMlp      fc1 (4->8), relu, fc2 (8->3)
//   kNested   blocks.{0,1}.fc (4->4, relu) then head (4->3): dotted names
//   kTwice    fc (4->4) applied twice with a relu between, then head (4->3)
//   kTied     wte [6, 4]: h = relu(x wte), logits = h wte^T (input and
//             output share the weight)
//   kUnused   kMlp plus "extra.weight", which never computes
//   kBranch   kMlp, then branch (3->3) applied only on odd ranks
#ifndef CHUNKZERO_TESTS_TEST_MODELS_H_
#define CHUNKZERO_TESTS_TEST_MODELS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ddp/param_hooks.h"
#include "ddp/parameter.h"

namespace chunkzero {

// Row-major [rows, in] inputs and [rows, out] targets.
struct Batch {
  int rows = 0;
  std::vector<float> x;
  std::vector<float> target;
};

enum class TestModelKind { kMlp, kNested, kTwice, kTied, kUnused, kBranch };
const char* TestModelName(TestModelKind kind);

class TestModel : public Module {
 public:
  virtual int input_width() const = 0;
  virtual int output_width() const = 0;
  // `rank` matters only for kBranch.
  [[nodiscard]] virtual absl::StatusOr<float> Forward(ParamHooks& hooks,
                                                      const Batch& batch,
                                                      int rank) = 0;
  // Backward of the last Forward.
  [[nodiscard]] virtual absl::Status Backward(ParamHooks& hooks) = 0;
};

// Parameters drawn from a fixed-seed uniform(-0.5, 0.5).
std::unique_ptr<TestModel> MakeTestModel(TestModelKind kind, uint32_t seed);

// `rows` rows of deterministic data for `model`, different per `seed`.
Batch MakeBatch(const TestModel& model, int rows, uint32_t seed);
// Rows [begin, end) of `batch`.
Batch SliceBatch(const Batch& batch, int begin, int end);

}  // namespace chunkzero

#endif  // CHUNKZERO_TESTS_TEST_MODELS_H_
