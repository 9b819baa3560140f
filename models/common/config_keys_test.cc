#include "models/common/config_keys.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using Json = nlohmann::json;

const std::vector<ConfigKeyRule>& Rules() {
  static const auto* rules = new std::vector<ConfigKeyRule>{
      {"n_layer", ConfigKeyUse::kRead, {}, "blocks"},
      {"eps", ConfigKeyUse::kMustBe, {1e-5}, "the norms use 1e-5"},
      {"scaling", ConfigKeyUse::kMustBe, {nullptr}, "not supported"},
      {"act", ConfigKeyUse::kMustBe, {"a", "b"}, "a or b"},
      {"use_cache", ConfigKeyUse::kNoEffect, {}, "generation only"}};
  return *rules;
}

TEST(CheckConfigKeys, AbsentOrComputedPasses) {
  EXPECT_TRUE(CheckConfigKeys(Json::object(), Rules(), "c.json").ok());
  EXPECT_TRUE(CheckConfigKeys(Json::parse(R"({"eps": 1e-05, "scaling": null,
      "act": "b", "use_cache": 7, "n_layer": "x", "mine": 1})"),
                              Rules(), "c.json")
                  .ok());
}

TEST(CheckConfigKeys, OtherValuesAreRefusedNamingTheKey) {
  const struct {
    const char* config;
    const char* says;
  } cases[] = {
      {R"({"eps": 1e-6})", "c.json: \"eps\" is 1e-06; the norms use 1e-5"},
      {R"({"scaling": {"type": "linear"}})",
       "c.json: \"scaling\" is {\"type\":\"linear\"}; not supported"},
      {R"({"act": null})", "c.json: \"act\" is null; a or b"},
      {R"({"act": "c", "eps": 2})", "c.json: \"eps\" is 2; the norms use 1e-5"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.config);
    const absl::Status s =
        CheckConfigKeys(Json::parse(c.config), Rules(), "c.json");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), c.says);
  }
  // A hostile value is quoted short.
  const absl::Status long_value = CheckConfigKeys(
      Json{{"act", std::string(1'000'000, 'x')}}, Rules(), "c.json");
  EXPECT_LT(long_value.message().size(), 200u);
}

TEST(FindConfigKeyRule, FindsByKey) {
  ASSERT_NE(FindConfigKeyRule(Rules(), "act"), nullptr);
  EXPECT_EQ(FindConfigKeyRule(Rules(), "act")->why, "a or b");
  EXPECT_EQ(FindConfigKeyRule(Rules(), "nope"), nullptr);
}

}  // namespace
}  // namespace chunkzero
