// Writes the checkpoint fuzzer's seed inputs (checkpoint_fuzz.cc's format:
// uint32 manifest size, manifest, shard) into the directory given:
//   bazel run //checkpoint:checkpoint_fuzz_seed --
//       $PWD/checkpoint/testdata/checkpoint_fuzz_corpus
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "base/file.h"
#include "base/status_macros.h"
#include "checkpoint/checkpoint.h"
#include "optim/optimizer_state.h"
#include "tensor/tensor.h"

namespace chunkzero {
namespace {

StatePiece Piece(const std::string& param, const std::string& state,
                 Shape shape, int64_t begin, int64_t numel) {
  Tensor values = *Tensor::Empty({numel}, DType::kF32);
  for (int64_t i = 0; i < numel; ++i) {
    values.data<float>()[i] = 0.25f * static_cast<float>(i) - 1;
  }
  return StatePiece{param, state, std::move(shape), begin, values};
}

absl::Status WriteSeed(const std::string& out, const std::string& name,
                       const OptimizerState& state) {
  const std::string dir = JoinPath(out, name + ".dir");
  CZ_ASSIGN_OR_RETURN(ShardIndex index,
                      WriteCheckpointShard(dir, 1, 0, 1, state));
  CheckpointMeta meta;
  meta.step = 1;
  meta.world_size = 1;
  meta.layout = "sharded";
  meta.updates = meta.iterations = 1;
  meta.loss_scale = 65536;
  meta.hysteresis_left = 1;
  meta.config = {{"layers", "1"}, {"precision", "fp16"}};
  CZ_RETURN_IF_ERROR(WriteCheckpointManifest(dir, meta, {std::move(index)}));
  const std::string shard_file = JoinPath(dir, "shard-1-0-of-1.bin");
  CZ_ASSIGN_OR_RETURN(std::string manifest,
                      ReadFileToString(JoinPath(dir, kCheckpointManifestName)));
  CZ_ASSIGN_OR_RETURN(std::string shard, ReadFileToString(shard_file));
  const uint32_t n = static_cast<uint32_t>(manifest.size());
  std::string seed(4, '\0');
  std::memcpy(seed.data(), &n, 4);
  seed += manifest;
  seed += shard;
  return WriteFileAtomically(JoinPath(out, name), [&](int fd, const auto& p) {
    return WriteAll(fd, seed.data(), seed.size(), p);
  });
}

}  // namespace
}  // namespace chunkzero

int main(int argc, char** argv) {
  using namespace chunkzero;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  OptimizerState adam;
  for (const char* state : {kMasterState, kExpAvgState, kExpAvgSqState}) {
    adam.pieces.push_back(Piece("w", state, {4, 5}, 0, 20));
    adam.pieces.push_back(Piece("b", state, {5}, 2, 3));
  }
  OptimizerState empty;
  empty.pieces.push_back(Piece("g", kMasterState, {}, 0, 0));
  for (const auto& [name, state] :
       {std::pair<std::string, OptimizerState>{"adam", adam},
        {"empty_piece", empty}}) {
    const absl::Status status = WriteSeed(argv[1], name, state);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.ToString().c_str());
      return 1;
    }
  }
  return 0;
}
