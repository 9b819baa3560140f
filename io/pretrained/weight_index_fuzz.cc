// Fuzzes the model.safetensors.index.json reader: any text must give a
// weight map whose every shard is a plain file name and names a listed
// shard, or DataLoss; never a crash, a hang, an exception from the JSON
// library or a message that quotes the input whole.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "io/pretrained/pretrained_directory.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<chunkzero::WeightIndex> index =
      chunkzero::ParseWeightIndex(text, "fuzz/model.safetensors.index.json");
  if (!index.ok()) {
    if (!absl::IsDataLoss(index.status())) __builtin_trap();
    if (index.status().message().size() > 2048) __builtin_trap();
    return 0;
  }
  const std::set<std::string> shards(index->shards.begin(),
                                     index->shards.end());
  if (shards.size() != index->shards.size()) __builtin_trap();
  for (const auto& [tensor, shard] : index->shard_of) {
    if (!chunkzero::IsPlainFileName(shard) || !shards.count(shard)) {
      __builtin_trap();
    }
  }
  return 0;
}
