// Holds a model's config.json reader to its table of key rules
// (models/common/config_keys.h), key by key, for a config.json as
// transformers' save_pretrained writes it.
//
//   ExpectEveryKeyIsRuledOn<GptConfig>(
//       nlohmann::json::parse(kWritten), GptConfigKeyRules(),
//       [](const nlohmann::json& j) { return GptConfigFromJson(j, "c.json"); },
//       SameConfig, OtherValue);
#ifndef CHUNKZERO_MODELS_COMMON_TESTING_CONFIG_KEYS_TESTING_H_
#define CHUNKZERO_MODELS_COMMON_TESTING_CONFIG_KEYS_TESTING_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/common/config_keys.h"
#include "nlohmann/json.hpp"

namespace chunkzero {
namespace config_keys_testing {

// `written` must read (`read`, naming the file "c.json"); then for each of
// its keys there is a rule, and with the key's value replaced by
// `other(value)`: a kMustBe key is refused naming it ("c.json: \"key\" is
// ...; why"), a kNoEffect key reads as the same config (`same`), a kRead
// key gives an error or another config, never the same one silently.
template <typename Config>
void ExpectEveryKeyIsRuledOn(
    const nlohmann::json& written, const std::vector<ConfigKeyRule>& rules,
    const std::function<absl::StatusOr<Config>(const nlohmann::json&)>& read,
    const std::function<bool(const Config&, const Config&)>& same,
    const std::function<nlohmann::json(const nlohmann::json&)>& other) {
  const absl::StatusOr<Config> base = read(written);
  ASSERT_TRUE(base.ok()) << base.status();
  for (const auto& [key, value] : written.items()) {
    SCOPED_TRACE(key);
    const ConfigKeyRule* rule = FindConfigKeyRule(rules, key);
    ASSERT_NE(rule, nullptr) << "no rule for a key transformers writes";
    nlohmann::json changed = written;
    changed[key] = other(value);
    const absl::StatusOr<Config> got = read(changed);
    switch (rule->use) {
      case ConfigKeyUse::kMustBe:
        ASSERT_FALSE(got.ok());
        EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(
            std::string(got.status().message()),
            ::testing::StartsWith(absl::StrCat("c.json: \"", key, "\" is ")));
        EXPECT_THAT(std::string(got.status().message()),
                    ::testing::HasSubstr(rule->why));
        break;
      case ConfigKeyUse::kNoEffect:
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_TRUE(same(*got, *base));
        break;
      case ConfigKeyUse::kRead:
        EXPECT_TRUE(!got.ok() || !same(*got, *base))
            << "changing it changed nothing";
        break;
    }
  }
}

}  // namespace config_keys_testing
}  // namespace chunkzero

#endif  // CHUNKZERO_MODELS_COMMON_TESTING_CONFIG_KEYS_TESTING_H_
