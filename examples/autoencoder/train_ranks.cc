#include "autoencoder/train_ranks.h"

#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "autoencoder/tied_autoencoder.h"
#include "comm/world.h"
#include "engine/engine.h"
#include "engine/model.h"

namespace autoencoder {

using chunkzero::Engine;
using chunkzero::ParamHooks;

namespace {

std::map<std::string, std::vector<float>> ToVectors(
    const std::map<std::string, chunkzero::Tensor>& weights) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, tensor] : weights) out[name] = *tensor.ToFloats();
  return out;
}

// One rank's run; rank 0 fills `trained`.
absl::Status RunRank(chunkzero::comm::ProcessGroup& group,
                     const TrainSettings& s, Trained* trained) {
  TiedAutoencoder model(s.width, s.hidden, s.seed);
  chunkzero::EngineOptions options = s.engine;
  options.find_unused_parameters = true;
  CZ_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                      Engine::Create(group, model, options));
  CZ_ASSIGN_OR_RETURN(const auto initial, engine->GatherWeights());
  const int rows = s.rows / group.size();
  // Held-out rows, this rank's share, and a forward-only pass over them:
  // it changes nothing the steps compute.
  const std::vector<float> held_out = MakeData(s.rows, s.width, /*seed=*/1);
  const std::vector<float> my_held_out(
      held_out.begin() + group.rank() * rows * s.width,
      held_out.begin() + (group.rank() + 1) * rows * s.width);
  auto evaluate = [&]() -> absl::Status {
    CZ_ASSIGN_OR_RETURN(const double loss,
                        engine->Evaluate(
                            /*micro_batches=*/1, [&](ParamHooks& hooks, int) {
                              return model.Forward(hooks, my_held_out, rows,
                                                   /*use_gate=*/true);
                            }));
    if (group.rank() == 0) trained->held_out_losses.push_back(loss);
    return absl::OkStatus();
  };
  for (int step = 0; step < s.steps; ++step) {
    if (s.eval_every > 0 && step % s.eval_every == 0) {
      CZ_RETURN_IF_ERROR(evaluate());
    }
    const std::vector<float> batch =
        MakeData(s.rows, s.width, /*seed=*/1000 + step);
    const std::vector<float> mine(
        batch.begin() + group.rank() * rows * s.width,
        batch.begin() + (group.rank() + 1) * rows * s.width);
    const bool use_gate = step % 2 == 0;
    CZ_ASSIGN_OR_RETURN(const chunkzero::StepMetrics m,
                        engine->Step(
                            /*micro_batches=*/1,
                            [&](ParamHooks& hooks, int) {
                              return model.Forward(hooks, mine, rows, use_gate);
                            },
                            [&](ParamHooks& hooks, int, float loss_scale) {
                              return model.Backward(hooks, loss_scale);
                            }));
    if (group.rank() == 0) trained->losses.push_back(m.loss);
  }
  if (s.eval_every > 0) CZ_RETURN_IF_ERROR(evaluate());
  CZ_ASSIGN_OR_RETURN(const auto final, engine->GatherWeights());
  if (group.rank() == 0) {
    trained->initial = ToVectors(initial);
    trained->final = ToVectors(final);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Trained> TrainOnRanks(int world_size,
                                     const TrainSettings& settings) {
  if (world_size < 1 || settings.rows % world_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        settings.rows, " rows do not split over ", world_size, " ranks"));
  }
  chunkzero::comm::WorldSpec spec;
  spec.world_size = world_size;  // Ranks as threads, in-process.
  CZ_ASSIGN_OR_RETURN(std::unique_ptr<chunkzero::comm::World> world,
                      chunkzero::comm::MakeWorld(spec));
  Trained trained;
  chunkzero::comm::FailureCause failures;
  std::vector<std::thread> ranks;
  for (int r : world->local_ranks()) {
    ranks.emplace_back([&, r] {
      absl::Status status = [&]() -> absl::Status {
        CZ_ASSIGN_OR_RETURN(chunkzero::comm::ProcessGroup * group,
                            world->group(r));
        return RunRank(*group, settings, &trained);
      }();
      // The other ranks must not wait for a failed one in a collective.
      if (!status.ok()) world->Abort(failures.Record(r, status));
    });
  }
  for (std::thread& t : ranks) t.join();
  CZ_RETURN_IF_ERROR(failures.cause());
  return trained;
}

}  // namespace autoencoder
