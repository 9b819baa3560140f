// How a model's config.json reader treats each key transformers writes for
// it, as a table: read (the reader parses and checks it), refused unless it
// says what the model computes, or of no effect on the function the weights
// compute. A table rather than scattered checks, so that a test can hold it
// against the keys save_pretrained writes: no key is dropped unseen.
//
//   const std::vector<ConfigKeyRule> kRules = {
//       {"n_layer", ConfigKeyUse::kRead, {}, "the number of blocks"},
//       {"scale_attn_weights", ConfigKeyUse::kMustBe, {true},
//        "the attention scores are always scaled by 1 / sqrt(head size)"},
//       {"use_cache", ConfigKeyUse::kNoEffect, {}, "generation only"}};
//   CZ_RETURN_IF_ERROR(CheckConfigKeys(config, kRules, "dir/config.json"));
//
// Keys no rule names (a tool's own) are accepted: transformers accepts them
// too. Thread-safe (no state).
#ifndef CHUNKZERO_MODELS_COMMON_CONFIG_KEYS_H_
#define CHUNKZERO_MODELS_COMMON_CONFIG_KEYS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace chunkzero {

enum class ConfigKeyUse {
  kRead,      // Parsed and checked by the reader itself.
  kMustBe,    // Absent (transformers' default), or one of `computed`.
  kNoEffect,  // Any value: it changes nothing the model computes.
};

struct ConfigKeyRule {
  std::string key;
  ConfigKeyUse use;
  // kMustBe: the values the model computes (JSON equality: 1e-05 is 1e-5;
  // null is a value here, accepted only where listed).
  std::vector<nlohmann::json> computed;
  // kMustBe: why other values are refused; otherwise what the key means
  // to the reader (for the documentation the tests check).
  std::string why;
};

// InvalidArgument, naming `source`, the key and its value (cut to a short
// excerpt, io/json/json_text.h), for the first kMustBe key in `rules` order
// whose value the model does not compute: "<source>: \"scale_attn_weights\"
// is false; the attention scores are always scaled by 1 / sqrt(head size)".
[[nodiscard]] absl::Status CheckConfigKeys(
    const nlohmann::json& config, const std::vector<ConfigKeyRule>& rules,
    const std::string& source);

// What transformers' PretrainedConfig writes for every model and no model
// here computes with: the head class, dtypes, versions, the tokenizer's ids,
// generation and output settings, a classification head's labels, the
// initialiser's range (the weights come from the files) and how
// transformers splits the MLP's work; and is_encoder_decoder, which must
// be false. A model's table is its own rules followed by these.
const std::vector<ConfigKeyRule>& CommonConfigKeyRules();

// `own` followed by CommonConfigKeyRules().
std::vector<ConfigKeyRule> WithCommonConfigKeyRules(
    std::vector<ConfigKeyRule> own);

// The rule for `key`, or nullptr.
const ConfigKeyRule* FindConfigKeyRule(const std::vector<ConfigKeyRule>& rules,
                                       const std::string& key);

}  // namespace chunkzero

#endif  // CHUNKZERO_MODELS_COMMON_CONFIG_KEYS_H_
