#include "models/common/config_keys.h"

#include "absl/strings/str_cat.h"
#include "io/json/json_text.h"

namespace chunkzero {

absl::Status CheckConfigKeys(const nlohmann::json& config,
                             const std::vector<ConfigKeyRule>& rules,
                             const std::string& source) {
  for (const ConfigKeyRule& rule : rules) {
    if (rule.use != ConfigKeyUse::kMustBe) continue;
    auto it = config.find(rule.key);
    if (it == config.end()) continue;
    bool computed = false;
    for (const nlohmann::json& value : rule.computed) {
      computed = computed || *it == value;
    }
    if (!computed) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": \"", rule.key, "\" is ", JsonForMessage(*it),
                       "; ", rule.why));
    }
  }
  return absl::OkStatus();
}

const std::vector<ConfigKeyRule>& CommonConfigKeyRules() {
  using U = ConfigKeyUse;
  static const auto* const kRules = new std::vector<ConfigKeyRule>{
      {"is_encoder_decoder",
       U::kMustBe,
       {false},
       "an encoder-decoder is not supported"},
      {"initializer_range",
       U::kNoEffect,
       {},
       "initialisation only: the weights come from the files"},
      {"chunk_size_feed_forward",
       U::kNoEffect,
       {},
       "how transformers splits the MLP's work; the same function"},
      {"bos_token_id", U::kNoEffect, {}, "the tokenizer's"},
      {"eos_token_id", U::kNoEffect, {}, "the tokenizer's"},
      {"pad_token_id", U::kNoEffect, {}, "the tokenizer's"},
      {"use_cache", U::kNoEffect, {}, "generation only"},
      {"task_specific_params", U::kNoEffect, {}, "generation only"},
      {"architectures",
       U::kNoEffect,
       {},
       "the head class; a head other than the LM's has tensors the reader "
       "refuses"},
      {"torch_dtype", U::kNoEffect, {}, "the files' own dtypes are read"},
      {"dtype", U::kNoEffect, {}, "the files' own dtypes are read"},
      {"transformers_version", U::kNoEffect, {}, "who wrote the file"},
      {"_name_or_path", U::kNoEffect, {}, "who wrote the file"},
      {"id2label", U::kNoEffect, {}, "a classification head's"},
      {"label2id", U::kNoEffect, {}, "a classification head's"},
      {"problem_type", U::kNoEffect, {}, "a classification head's"},
      {"output_attentions", U::kNoEffect, {}, "what transformers returns"},
      {"output_hidden_states", U::kNoEffect, {}, "what transformers returns"},
      {"return_dict", U::kNoEffect, {}, "what transformers returns"},
  };
  return *kRules;
}

std::vector<ConfigKeyRule> WithCommonConfigKeyRules(
    std::vector<ConfigKeyRule> own) {
  const std::vector<ConfigKeyRule>& common = CommonConfigKeyRules();
  own.insert(own.end(), common.begin(), common.end());
  return own;
}

const ConfigKeyRule* FindConfigKeyRule(const std::vector<ConfigKeyRule>& rules,
                                       const std::string& key) {
  for (const ConfigKeyRule& rule : rules) {
    if (rule.key == key) return &rule;
  }
  return nullptr;
}

}  // namespace chunkzero
