#include "io/json/json_text.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace chunkzero {
namespace {

// What a parser's message may quote of the text it read.
constexpr size_t kMaxQuoted = 256;

// Builds the DOM through nlohmann's own SAX DOM builder, counting the depth
// (a container past the limit stops the parse: no deeper value is ever
// built) and the keys of each open object, and keeping where a parse error
// happened, which nlohmann's exceptions do not always say (a number that
// overflows a double is an out_of_range error without a position).
template <typename Json>
class BoundedSax {
 public:
  using number_integer_t = typename Json::number_integer_t;
  using number_unsigned_t = typename Json::number_unsigned_t;
  using number_float_t = typename Json::number_float_t;
  using string_t = typename Json::string_t;
  using binary_t = typename Json::binary_t;

  BoundedSax(Json& root, int max_depth)
      : dom_(root, /*allow_exceptions=*/false), max_depth_(max_depth) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) {
    return dom_.number_float(v, s);
  }
  bool string(string_t& v) { return dom_.string(v); }
  bool binary(binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    if (!Enter()) return false;
    keys_.emplace_back();
    return dom_.start_object(n);
  }
  bool key(string_t& k) {
    if (!keys_.back().insert(k).second) {
      error_ = absl::StrCat("an object lists the key ", QuotedKey(k), " twice");
      return false;
    }
    return dom_.key(k);
  }
  bool end_object() {
    --depth_;
    keys_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    if (!Enter()) return false;
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& e) {
    position_ = position;
    // The position is said once, by the caller.
    absl::string_view what = e.what();
    if (const size_t at = what.find("parse error at line ");
        at != what.npos && what.find(": ", at) != what.npos) {
      what.remove_prefix(what.find(": ", at) + 2);
    }
    error_ = JsonErrorText(what);
    return false;
  }

  const std::string& error() const { return error_; }
  // Bytes read when the parser gave up; 0 when the SAX callbacks stopped it.
  size_t position() const { return position_; }

 private:
  bool Enter() {
    if (++depth_ > max_depth_) {
      error_ = absl::StrCat("nested too deeply (more than ", max_depth_,
                            " levels of arrays and objects)");
      return false;
    }
    return true;
  }
  static std::string QuotedKey(const string_t& k) {
    const absl::string_view key = k;
    return absl::StrCat("\"", PrintableText(key.substr(0, kMaxQuoted)),
                        key.size() > kMaxQuoted ? "...\"" : "\"");
  }

  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  const int max_depth_;
  int depth_ = 0;
  std::vector<std::set<string_t>> keys_;  // Of each open object.
  std::string error_;
  size_t position_ = 0;
};

// "byte 37 (line 3, column 15)" for the `position`-th byte of `text`
// (1-based, as the parser counts).
std::string Where(absl::string_view text, size_t position) {
  const size_t offset = position > 0 ? position - 1 : 0;
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return absl::StrCat("byte ", offset, " (line ", line, ", column ",
                      offset - line_start + 1, ")");
}

// Appends at most about `budget` characters of `value`'s JSON text; false
// when it stopped short.
template <typename Json>
bool AppendBounded(const Json& value, size_t budget, std::string& out) {
  if (out.size() >= budget) return false;
  if (value.is_string()) {
    const std::string& s = value.template get_ref<const std::string&>();
    const size_t room = budget - out.size();
    // Escaping at most doubles a byte's length; cut before dumping so that
    // a 60 MB string is never copied whole.
    const bool whole = s.size() <= room;
    const std::string head = whole ? s : s.substr(0, room);
    std::string text =
        Json(head).dump(-1, ' ', false, Json::error_handler_t::replace);
    if (!whole) text.pop_back();  // The closing quote: it goes on.
    out += text;
    return whole && out.size() <= budget;
  }
  if (value.is_array() || value.is_object()) {
    const bool object = value.is_object();
    out += object ? "{" : "[";
    bool first = true;
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (!first) out += ",";
      first = false;
      if (object) {
        if (!AppendBounded(Json(it.key()), budget, out)) return false;
        out += ":";
      }
      if (!AppendBounded(*it, budget, out)) return false;
    }
    out += object ? "}" : "]";
    return out.size() <= budget;
  }
  out += value.dump();
  return out.size() <= budget;
}

template <typename Json>
std::string Describe(const Json& value) {
  if (value.is_string()) {
    return absl::StrCat("a string of ",
                        value.template get_ref<const std::string&>().size(),
                        " bytes");
  }
  if (value.is_array()) {
    return absl::StrCat("an array of ", value.size(),
                        value.size() == 1 ? " element" : " elements");
  }
  if (value.is_object()) {
    return absl::StrCat("an object of ", value.size(),
                        value.size() == 1 ? " member" : " members");
  }
  return "a number";
}

}  // namespace

std::string PrintableText(absl::string_view text) {
  std::string out;
  for (const char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out.push_back(c);
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", u);
    }
  }
  return out;
}

std::string JsonErrorText(absl::string_view what) {
  if (const size_t id_end = what.find("] ");
      absl::StartsWith(what, "[json.exception.") &&
      id_end != absl::string_view::npos) {
    what.remove_prefix(id_end + 2);
  }
  return absl::StrCat(PrintableText(what.substr(0, kMaxQuoted)),
                      what.size() > kMaxQuoted ? "..." : "");
}

template <typename Json>
absl::StatusOr<Json> ParseJsonText(absl::string_view text,
                                   const JsonTextLimits& limits) {
  if (absl::StartsWith(text, "\xEF\xBB\xBF")) {
    return absl::DataLossError(
        "not valid JSON: it starts with a byte order mark");
  }
  if (const size_t nul = text.find('\0'); nul != absl::string_view::npos) {
    return absl::DataLossError(absl::StrCat(
        "not valid JSON at ", Where(text, nul + 1), ": a NUL byte"));
  }
  Json root;
  BoundedSax<Json> sax(root, limits.max_depth);
  if (Json::sax_parse(text.begin(), text.end(), &sax)) return root;
  if (sax.position() == 0) {
    return absl::DataLossError(absl::StrCat("not valid JSON: ", sax.error()));
  }
  return absl::DataLossError(absl::StrCat(
      "not valid JSON at ", Where(text, sax.position()), ": ", sax.error()));
}

template <typename Json>
std::string JsonForMessage(const Json& value, size_t max_chars) {
  std::string text;
  if (AppendBounded(value, max_chars, text)) return PrintableText(text);
  text.resize(std::min(text.size(), max_chars));
  return absl::StrCat(PrintableText(text), "... (", Describe(value), ")");
}

template absl::StatusOr<nlohmann::json> ParseJsonText<nlohmann::json>(
    absl::string_view, const JsonTextLimits&);
template absl::StatusOr<nlohmann::ordered_json>
ParseJsonText<nlohmann::ordered_json>(absl::string_view, const JsonTextLimits&);
template std::string JsonForMessage<nlohmann::json>(const nlohmann::json&,
                                                    size_t);
template std::string JsonForMessage<nlohmann::ordered_json>(
    const nlohmann::ordered_json&, size_t);

}  // namespace chunkzero
