#include "io/json/json_text.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

TEST(ParseJsonText, ParsesStrictJson) {
  absl::StatusOr<Json> j =
      ParseJsonText<Json>(R"({"a": [1, 2.5, "x", null, true], "b": {}})");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["a"][1], 2.5);
  EXPECT_EQ((*j)["a"][2], "x");
  EXPECT_TRUE((*j)["b"].is_object());
}

TEST(ParseJsonText, OrderedKeepsFileOrder) {
  absl::StatusOr<OrderedJson> j =
      ParseJsonText<OrderedJson>(R"({"z": 1, "a": 2})");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(j->begin().key(), "z");
}

TEST(ParseJsonText, SaysWhatAndWhere) {
  const struct {
    const char* text;
    const char* says;
  } cases[] = {
      {"{\n  \"a\": NaN\n}",
       "not valid JSON at byte 9 (line 2, column 8): syntax error while "
       "parsing value - invalid literal"},
      {"{\"rope_theta\": 1e999}",
       "not valid JSON at byte 19 (line 1, column 20): number overflow "
       "parsing '1e999'"},
      {"{\"a\": Infinity}", "at byte 6 (line 1, column 7)"},
      {"{\"a\": 1} x",
       "at byte 9 (line 1, column 10): syntax error while "
       "parsing value - invalid literal"},
      {"", "at byte 0 (line 1, column 1): syntax error"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    absl::StatusOr<Json> j = ParseJsonText<Json>(c.text);
    ASSERT_FALSE(j.ok());
    EXPECT_EQ(j.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(j.status().message()), HasSubstr(c.says));
  }
}

TEST(ParseJsonText, RefusesDeepNestingWithoutRecursing) {
  // 100,000 levels: a recursive parse, dump or destructor would overflow
  // the stack (and did, in the error path that dumped the value).
  const std::string deep = "{\"model_type\": " + std::string(100000, '[') +
                           std::string(100000, ']') + "}";
  absl::StatusOr<Json> j = ParseJsonText<Json>(deep);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().message(),
            "not valid JSON: nested too deeply (more than 32 levels of arrays "
            "and objects)");
  // At the limit it parses.
  const std::string at_limit = std::string(32, '[') + std::string(32, ']');
  EXPECT_TRUE(ParseJsonText<Json>(at_limit).ok());
  EXPECT_FALSE(ParseJsonText<Json>("[" + at_limit + "]").ok());
  JsonTextLimits two;
  two.max_depth = 2;
  EXPECT_TRUE(ParseJsonText<Json>("{\"a\": [1]}", two).ok());
  EXPECT_FALSE(ParseJsonText<Json>("{\"a\": [[1]]}", two).ok());
}

TEST(ParseJsonText, RefusesRepeatedKeysBomAndNul) {
  absl::StatusOr<Json> twice =
      ParseJsonText<Json>(R"({"a": {"n_layer": 1, "n_layer": 2}})");
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().message(),
            "not valid JSON: an object lists the key \"n_layer\" twice");
  // The same key in two objects is fine.
  EXPECT_TRUE(ParseJsonText<Json>(R"({"a": {"k": 1}, "b": {"k": 2}})").ok());
  EXPECT_THAT(ParseJsonText<Json>("\xEF\xBB\xBF{}").status().message(),
              HasSubstr("byte order mark"));
  EXPECT_EQ(
      ParseJsonText<Json>(std::string("{\"a\"\0: 1}", 9)).status().message(),
      "not valid JSON at byte 4 (line 1, column 5): a NUL byte");
}

TEST(ParseJsonText, QuotesLittleOfAHostileToken) {
  const std::string number = "{\"a\": 1" + std::string(100000, '0') + "e99999}";
  absl::StatusOr<Json> j = ParseJsonText<Json>(number);
  ASSERT_FALSE(j.ok());
  EXPECT_LT(j.status().message().size(), 400u);
  EXPECT_THAT(j.status().message(), HasSubstr("..."));
}

TEST(JsonForMessage, ShortValuesWhole) {
  EXPECT_EQ(JsonForMessage(Json(12)), "12");
  EXPECT_EQ(JsonForMessage(Json("gpt2")), "\"gpt2\"");
  EXPECT_EQ(JsonForMessage(Json::parse(R"([1,"a",{"b":null}])")),
            R"([1,"a",{"b":null}])");
  EXPECT_EQ(JsonForMessage(Json(nullptr)), "null");
  EXPECT_EQ(JsonForMessage(Json("a\nb\x1b")), "\"a\\nb\\u001b\"");
  EXPECT_EQ(JsonForMessage(Json("\xc3\xa9")), "\"\\xc3\\xa9\"");
}

TEST(JsonForMessage, LongValuesCutWithWhatTheyAre) {
  const std::string big(60'000'000, 'x');
  const std::string quoted = JsonForMessage(Json(big), 16);
  EXPECT_EQ(quoted, "\"xxxxxxxxxxxxxxx... (a string of 60000000 bytes)");
  Json array = Json::array();
  for (int i = 0; i < 100000; ++i) array.push_back(i);
  EXPECT_EQ(JsonForMessage(array, 10),
            "[0,1,2,3,4... (an array of 100000 elements)");
  Json object = {{"key", std::string(100, 'v')}};
  EXPECT_EQ(JsonForMessage(object, 12),
            "{\"key\":\"vvvv... (an object of 1 member)");
  EXPECT_EQ(JsonForMessage(OrderedJson::parse(R"({"z":1,"a":2})")),
            R"({"z":1,"a":2})");
}

}  // namespace
}  // namespace chunkzero
