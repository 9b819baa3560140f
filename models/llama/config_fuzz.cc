// Fuzzes the config.json readers of both models: any text must give a
// config that validates or an InvalidArgument; never a crash, a hang or an
// exception from the JSON library.
#include <cstddef>
#include <cstdint>
#include <string>

#include "models/gpt2/gpt_checkpoint.h"
#include "models/llama/llama_checkpoint.h"
#include "nlohmann/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json config = nlohmann::json::parse(
      std::string(reinterpret_cast<const char*>(data), size), nullptr,
      /*allow_exceptions=*/false);
  if (config.is_discarded()) return 0;
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
  return 0;
}
