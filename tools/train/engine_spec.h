// The train job's flags as the engine's options (engine/engine_options.h):
// the job turns flags into a spec and hands it to the engine.
#ifndef CHUNKZERO_TOOLS_TRAIN_ENGINE_SPEC_H_
#define CHUNKZERO_TOOLS_TRAIN_ENGINE_SPEC_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/engine_options.h"
#include "tensor/device.h"
#include "tools/train/train_options.h"
#include "tools/train/train_plan.h"

namespace chunkzero {

// What the flags alone decide: precision, layout, the optimizer and its
// schedule's kind, prefetch, offload, the device limit and the timeout (the
// cost model's inputs). The chunk size and the parameters' order come from
// the plan; the device from the rank.
EngineOptions EngineOptionsFromFlags(const TrainOptions& options);

// Everything, for a rank whose model computes on `rank_device` (its GPU,
// or the simulated device): the chunks compute there when something is
// offloaded or capped or on a GPU, else on the host; an `auto` the limit
// leaves no room in rests on the host as `params` does
// (TrainPlan::auto_rests_on_host). InvalidArgument for a schedule the
// optimizer refuses.
[[nodiscard]] absl::StatusOr<EngineOptions> EngineOptionsForRun(
    const TrainPlan& plan, Device rank_device);

// An engine's error as the train job says it: every EngineOptions field the
// message names ("EngineOptions::nvme_path") becomes the flag that set it
// ("--nvme_path"); the code and the rest stay.
absl::Status EngineErrorInFlags(const absl::Status& status);

}  // namespace chunkzero

#endif  // CHUNKZERO_TOOLS_TRAIN_ENGINE_SPEC_H_
