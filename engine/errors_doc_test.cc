// docs/ERRORS.md's section on the engine and the model contract is checked
// against the library: every row `engine: CASE` names a case below, which
// makes that error on two in-process ranks; the status must have the
// row's code and contain its message. Every case has its row.
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "comm/testing/spawn_ranks.h"
#include "engine/engine.h"
#include "engine/testing/slip_hooks.h"
#include "gtest/gtest.h"
#include "tests/test_models.h"

namespace chunkzero {
namespace {

using ::chunkzero::comm_testing::SpawnRanks;
using ::chunkzero::engine_testing::SlipHooks;

EngineOptions Options() {
  EngineOptions options;
  options.chunk_size = 32;
  options.precision = DType::kF32;
  options.optimizer.kind = OptimizerKind::kAdam;
  options.comm_timeout = absl::Seconds(30);
  return options;
}

// What one rank does with its engine, model and batch; the case's status
// is rank `rank`'s.
using RankBody =
    std::function<absl::Status(Engine&, TestModel&, int rank, const Batch&)>;
absl::Status OnRank(int rank, const EngineOptions& options,
                    const RankBody& body) {
  const std::vector<absl::Status> statuses =
      SpawnRanks(2, [&](comm::ProcessGroup& g) -> absl::Status {
        std::unique_ptr<TestModel> model =
            MakeTestModel(TestModelKind::kMlp, 7);
        CZ_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                            Engine::Create(g, *model, options));
        const Batch batch = MakeBatch(*model, 4, g.rank());
        return body(*engine, *model, g.rank(), batch);
      });
  return statuses[rank];
}

// One step whose backward commits `slip` (nothing: a plain step).
absl::Status StepWith(Engine& engine, TestModel& model, int rank,
                      const Batch& batch,
                      const std::function<void(SlipHooks&)>& slip) {
  return engine
      .Step(
          1,
          [&](ParamHooks& hooks, int) -> absl::StatusOr<double> {
            return model.Forward(hooks, batch, rank);
          },
          [&](ParamHooks& hooks, int, float) {
            SlipHooks slipping(hooks);
            if (slip) slip(slipping);
            return model.Backward(slipping);
          })
      .status();
}

const std::map<std::string, std::function<absl::Status()>>& Cases() {
  static const auto* cases = new std::map<std::string,
                                          std::function<absl::Status()>>{
      {"a forward between steps",
       [] {
         return OnRank(0, Options(),
                       [](Engine& e, TestModel& m, int r, const Batch& b) {
                         return m.Forward(e.ddp(), b, r).status();
                       });
       }},
      {"a forward use without its HandGrad",
       [] {
         return OnRank(1, Options(),
                       [](Engine& e, TestModel& m, int r, const Batch& b) {
                         return StepWith(e, m, r, b, [r](SlipHooks& h) {
                           if (r == 1) h.drop_grad_of = "fc2.bias";
                         });
                       });
       }},
      {"another rank's missing HandGrad",
       [] {
         return OnRank(0, Options(),
                       [](Engine& e, TestModel& m, int r, const Batch& b) {
                         return StepWith(e, m, r, b, [r](SlipHooks& h) {
                           if (r == 1) h.drop_grad_of = "fc2.bias";
                         });
                       });
       }},
      {"a weight read after its HandGrad",
       [] {
         return OnRank(0, Options(),
                       [](Engine& e, TestModel& m, int r, const Batch& b) {
                         return StepWith(e, m, r, b, [](SlipHooks& h) {
                           h.read_after_grad_of = "fc2.weight";
                         });
                       });
       }},
      {"a backward scope after the grad",
       [] {
         return OnRank(0, Options(),
                       [](Engine& e, TestModel& m, int r, const Batch& b) {
                         return StepWith(e, m, r, b, [](SlipHooks& h) {
                           h.scope_after_grad_of = "fc2.weight";
                         });
                       });
       }},
      {"a backward in Evaluate",
       [] {
         return OnRank(
             0, Options(), [](Engine& e, TestModel& m, int r, const Batch& b) {
               return e
                   .Evaluate(
                       1,
                       [&](ParamHooks& hooks, int) -> absl::StatusOr<double> {
                         CZ_ASSIGN_OR_RETURN(const float loss,
                                             m.Forward(hooks, b, r));
                         CZ_RETURN_IF_ERROR(m.Backward(hooks));
                         return loss;
                       })
                   .status();
             });
       }},
      {"Evaluate inside a step",
       [] {
         return OnRank(
             0, Options(), [](Engine& e, TestModel& m, int r, const Batch& b) {
               return e
                   .Step(
                       1,
                       [&](ParamHooks& hooks, int) -> absl::StatusOr<double> {
                         CZ_ASSIGN_OR_RETURN(const float loss,
                                             m.Forward(hooks, b, r));
                         CZ_RETURN_IF_ERROR(
                             e.Evaluate(1, [&](ParamHooks& h, int) {
                                return m.Forward(h, b, r);
                              }).status());
                         return loss;
                       },
                       [&](ParamHooks& hooks, int, float) {
                         return m.Backward(hooks);
                       })
                   .status();
             });
       }},
      {"a device limit the step cannot hold",
       [] {
         EngineOptions options = Options();
         options.device = Device::Simulated(0);
         options.device_memory_limit = 1024;
         return OnRank(0, options, [](Engine&, TestModel&, int, const Batch&) {
           return absl::OkStatus();
         });
       }},
      {"a step of no micro-batch",
       [] {
         return OnRank(
             0, Options(), [](Engine& e, TestModel&, int, const Batch&) {
               return e
                   .Step(
                       0,
                       [](ParamHooks&, int) -> absl::StatusOr<double> {
                         return 0;
                       },
                       [](ParamHooks&, int, float) { return absl::OkStatus(); })
                   .status();
             });
       }},
      {"a loss that is not finite",
       [] {
         return OnRank(
             0, Options(), [](Engine& e, TestModel& m, int r, const Batch& b) {
               return e
                   .Step(
                       1,
                       [&](ParamHooks& hooks, int) -> absl::StatusOr<double> {
                         CZ_RETURN_IF_ERROR(m.Forward(hooks, b, r).status());
                         return std::nan("");
                       },
                       [&](ParamHooks& hooks, int, float) {
                         return m.Backward(hooks);
                       })
                   .status();
             });
       }},
      {"checkpointing a model that cannot recompute",
       [] {
         EngineOptions options = Options();
         options.activation_checkpointing.every = 1;
         return OnRank(0, options, [](Engine&, TestModel&, int, const Batch&) {
           return absl::OkStatus();
         });
       }},
  };
  return *cases;
}

struct Row {
  std::string name;
  std::string code;
  std::string message;
};

std::vector<Row> EngineRows(const std::string& doc) {
  std::vector<Row> rows;
  for (absl::string_view line : absl::StrSplit(doc, '\n')) {
    if (!absl::StartsWith(line, "| `engine: ")) continue;
    std::vector<std::string> cells = absl::StrSplit(line, " | ");
    if (cells.size() < 3) {
      ADD_FAILURE() << "a row of fewer than 3 cells: " << line;
      continue;
    }
    Row row;
    row.name = std::string(
        absl::StripSuffix(absl::StripPrefix(cells[0], "| `engine: "), "`"));
    row.code =
        std::string(absl::StripSuffix(absl::StripPrefix(cells[1], "`"), "`"));
    row.message = std::string(absl::StripSuffix(
        absl::StripPrefix(absl::StripAsciiWhitespace(cells[2]), "`"), "`"));
    rows.push_back(row);
  }
  return rows;
}

TEST(EngineErrorsDoc, EveryRowIsWhatTheLibrarySays) {
  absl::StatusOr<std::string> doc = ReadFileToString(
      absl::StrCat(std::getenv("TEST_SRCDIR"), "/chunkzero/docs/ERRORS.md"));
  ASSERT_TRUE(doc.ok()) << doc.status();
  const std::vector<Row> rows = EngineRows(*doc);
  std::map<std::string, bool> documented;
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    auto it = Cases().find(row.name);
    ASSERT_NE(it, Cases().end()) << "no case makes this error";
    documented[row.name] = true;
    const absl::Status status = it->second();
    EXPECT_EQ(absl::StatusCodeToString(status.code()), row.code) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), row.message))
        << "documented: " << row.message << "\nsaid: " << status.message();
  }
  for (const auto& [name, make] : Cases()) {
    EXPECT_TRUE(documented[name]) << "no row of docs/ERRORS.md for " << name;
  }
}

}  // namespace
}  // namespace chunkzero
