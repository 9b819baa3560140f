// Fuzzes the config.json readers of both models as the directories read
// them (io/pretrained's bounded parse, then each model's reader): any text
// must give DataLoss from the parse, or a config that validates, or an
// InvalidArgument; never a crash, a hang, an exception from the JSON
// library, or a message that quotes the input whole.
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/pretrained/pretrained_directory.h"
#include "models/gpt2/gpt_checkpoint.h"
#include "models/llama/llama_checkpoint.h"
#include "nlohmann/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<nlohmann::json> parsed =
      chunkzero::ParseConfigJson(text, "fuzz/config.json");
  if (!parsed.ok()) {
    if (!absl::IsDataLoss(parsed.status())) __builtin_trap();
    if (parsed.status().message().size() > 2048) __builtin_trap();
    return 0;
  }
  const nlohmann::json& config = *parsed;
  absl::StatusOr<chunkzero::LlamaConfig> llama =
      chunkzero::LlamaConfigFromJson(config, "fuzz/config.json");
  if (llama.ok() && !llama->Validate().ok()) __builtin_trap();
  if (!llama.ok() && !absl::IsInvalidArgument(llama.status())) {
    __builtin_trap();
  }
  absl::StatusOr<chunkzero::GptConfig> gpt =
      chunkzero::GptConfigFromJson(config, "fuzz/config.json");
  if (gpt.ok() && !gpt->Validate().ok()) __builtin_trap();
  if (!gpt.ok() && !absl::IsInvalidArgument(gpt.status())) __builtin_trap();
  for (const absl::Status& s : {llama.status(), gpt.status()}) {
    if (s.message().size() > 2048) __builtin_trap();
  }
  return 0;
}
