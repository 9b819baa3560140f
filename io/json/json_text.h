// Untrusted JSON text (a config.json, a safetensors index or header) parsed
// within bounds, and JSON values quoted in error messages without ever
// printing a hostile value whole.
//
//   CZ_ASSIGN_OR_RETURN(nlohmann::json config,
//                       ParseJsonText<nlohmann::json>(text));
//   ... absl::StrCat("\"n_layer\" is ", JsonForMessage(config["n_layer"])) ...
//
// ParseJsonText accepts strict JSON (RFC 8259, UTF-8, one value and nothing
// after it) and refuses, as DataLoss:
// - a byte order mark or a NUL byte (nlohmann would skip the one and take
//   the other, outside a string, for the end of the input);
// - a value inside more than `max_depth` containers: the DOM, its dump and
//   anything that walks it recursively stay within a bounded stack (a
//   200 KB config.json of "[[[[..." would otherwise overflow it);
// - an object that repeats a key (JSON permits it and readers disagree on
//   which value wins: a hostile file could say one thing to transformers
//   and another to us);
// - what the parser refuses (NaN, Infinity, a number that overflows a
//   double, a syntax error), saying what and where: "not valid JSON at
//   byte 37 (line 3, column 15): number overflow parsing '1e999'".
// The messages never quote more than a short excerpt of the text.
//
// Nothing here throws; thread-safe (no shared state).
#ifndef CHUNKZERO_IO_JSON_JSON_TEXT_H_
#define CHUNKZERO_IO_JSON_JSON_TEXT_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace chunkzero {

struct JsonTextLimits {
  // Containers around the deepest value: config.json and the indexes nest
  // three or four; a safetensors header two.
  int max_depth = 32;
};

// `text` parsed into a Json (nlohmann::json or nlohmann::ordered_json, whose
// objects keep their members in file order). DataLoss as above; the message
// starts with what was wrong, for the caller to put the file's name before.
template <typename Json>
[[nodiscard]] absl::StatusOr<Json> ParseJsonText(
    absl::string_view text, const JsonTextLimits& limits = {});

// `value` as a message quotes it: its JSON text when that is at most
// `max_chars` long, else the first `max_chars` characters and what it is
// ("\"[[[[[[[[..." (a string of 200000 bytes)", "[1,2,3,..." (an array of
// 100000 elements)"). Every byte outside printable ASCII is written \xHH,
// so the result is one printable line. Never recurses deeper than the value
// nests (ParseJsonText bounds that) and never builds more than about
// `max_chars` of text, however large the value.
template <typename Json>
std::string JsonForMessage(const Json& value, size_t max_chars = 64);

// `text` with every byte outside printable ASCII as \xHH: one printable
// line, quotes and backslashes as they are (for text that is not quoted,
// such as a parser's message).
std::string PrintableText(absl::string_view text);

// A nlohmann exception's what() as a message can say it: without the
// "[json.exception.parse_error.101] " id, of no use to a reader, and with
// at most 256 bytes of it (what the parser last read is the file's bytes,
// perhaps a whole hostile string), printable.
std::string JsonErrorText(absl::string_view what);

}  // namespace chunkzero

#endif  // CHUNKZERO_IO_JSON_JSON_TEXT_H_
