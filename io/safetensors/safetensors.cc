#include "io/safetensors/safetensors.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "base/status_macros.h"

namespace chunkzero {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; this reads it in place");

// The header's JSON: objects (members in file order), arrays, strings and
// numbers (kept as text, parsed where used); true, false and null parse
// and are rejected where a value is used.
struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = kNull;
  std::string text;  // kString: the decoded string; kNumber: its text.
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;
};

class JsonParser {
 public:
  explicit JsonParser(absl::string_view in) : in_(in) {}

  absl::StatusOr<Json> ParseDocument() {
    CZ_ASSIGN_OR_RETURN(Json value, ParseValue(0));
    SkipSpace();
    if (pos_ != in_.size()) return Error("trailing characters");
    return value;
  }

 private:
  // Deep enough for any safetensors header; bounds the recursion on
  // hostile input.
  static constexpr int kMaxDepth = 32;

  absl::Status Error(absl::string_view what) const {
    return absl::DataLossError(
        absl::StrCat("bad JSON header: ", what, " at byte ", pos_));
  }

  void SkipSpace() {
    while (pos_ < in_.size() && (in_[pos_] == ' ' || in_[pos_] == '\t' ||
                                 in_[pos_] == '\n' || in_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool Consume(char c) {
    SkipSpace();
    if (pos_ < in_.size() && in_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  absl::StatusOr<Json> ParseValue(int depth) {
    if (depth > kMaxDepth) return Error("nested too deeply");
    SkipSpace();
    if (pos_ >= in_.size()) return Error("unexpected end");
    const char c = in_[pos_];
    Json v;
    if (c == '{') {
      ++pos_;
      v.kind = Json::kObject;
      if (Consume('}')) return v;
      do {
        SkipSpace();
        CZ_ASSIGN_OR_RETURN(std::string key, ParseString());
        if (!Consume(':')) return Error("expected ':'");
        CZ_ASSIGN_OR_RETURN(Json member, ParseValue(depth + 1));
        v.members.emplace_back(std::move(key), std::move(member));
      } while (Consume(','));
      if (!Consume('}')) return Error("expected ',' or '}'");
      return v;
    }
    if (c == '[') {
      ++pos_;
      v.kind = Json::kArray;
      if (Consume(']')) return v;
      do {
        CZ_ASSIGN_OR_RETURN(Json item, ParseValue(depth + 1));
        v.items.push_back(std::move(item));
      } while (Consume(','));
      if (!Consume(']')) return Error("expected ',' or ']'");
      return v;
    }
    if (c == '"') {
      v.kind = Json::kString;
      CZ_ASSIGN_OR_RETURN(v.text, ParseString());
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      const size_t start = pos_++;
      while (pos_ < in_.size() &&
             (std::isdigit(static_cast<unsigned char>(in_[pos_])) ||
              in_[pos_] == '.' || in_[pos_] == 'e' || in_[pos_] == 'E' ||
              in_[pos_] == '+' || in_[pos_] == '-')) {
        ++pos_;
      }
      v.kind = Json::kNumber;
      v.text = std::string(in_.substr(start, pos_ - start));
      return v;
    }
    for (auto [word, kind] :
         {std::pair{"true", Json::kBool}, std::pair{"false", Json::kBool},
          std::pair{"null", Json::kNull}}) {
      if (in_.substr(pos_, std::strlen(word)) == word) {
        pos_ += std::strlen(word);
        v.kind = kind;
        v.text = word;
        return v;
      }
    }
    return Error("unexpected character");
  }

  absl::StatusOr<std::string> ParseString() {
    if (pos_ >= in_.size() || in_[pos_] != '"') return Error("expected '\"'");
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= in_.size()) return Error("unterminated string");
      const char c = in_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) {
        return Error("control character in string");
      }
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= in_.size()) return Error("unterminated escape");
      const char e = in_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out.push_back(e);
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          CZ_ASSIGN_OR_RETURN(uint32_t cp, ParseHex4());
          if (cp >= 0xD800 && cp < 0xDC00) {  // A surrogate pair.
            if (in_.substr(pos_, 2) != "\\u") return Error("lone surrogate");
            pos_ += 2;
            CZ_ASSIGN_OR_RETURN(uint32_t lo, ParseHex4());
            if (lo < 0xDC00 || lo >= 0xE000) return Error("bad surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return Error("bad escape");
      }
    }
  }

  absl::StatusOr<uint32_t> ParseHex4() {
    if (pos_ + 4 > in_.size()) return Error("short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = in_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9')
        v |= h - '0';
      else if (h >= 'a' && h <= 'f')
        v |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F')
        v |= h - 'A' + 10;
      else
        return Error("bad \\u escape");
    }
    return v;
  }

  static void AppendUtf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  absl::string_view in_;
  size_t pos_ = 0;
};

// Bytes per element of a safetensors dtype; 0 if unknown.
size_t DTypeBytes(absl::string_view dtype) {
  static const auto* const kSizes =
      new std::map<std::string, size_t, std::less<>>{
          {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
          {"U16", 2},  {"I16", 2}, {"F16", 2}, {"BF16", 2},    {"U32", 4},
          {"I32", 4},  {"F32", 4}, {"U64", 8}, {"I64", 8},     {"F64", 8}};
  auto it = kSizes->find(dtype);
  return it == kSizes->end() ? 0 : it->second;
}

absl::StatusOr<DType> ToDType(absl::string_view dtype) {
  if (dtype == "F32") return DType::kF32;
  if (dtype == "F16") return DType::kF16;
  if (dtype == "BF16") return DType::kBF16;
  if (dtype == "U8") return DType::kU8;
  if (dtype == "I32") return DType::kI32;
  if (dtype == "I64") return DType::kI64;
  if (dtype == "F64") return DType::kF64;
  return absl::UnimplementedError(absl::StrCat("dtype ", dtype));
}

const char* SafetensorsDType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kU8:
      return "U8";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
    case DType::kF64:
      return "F64";
  }
  return "?";
}

absl::StatusOr<uint64_t> ToUint(const Json& v) {
  uint64_t out;
  if (v.kind != Json::kNumber || v.text.empty() || v.text[0] == '-' ||
      !absl::SimpleAtoi(v.text, &out) ||
      v.text.find_first_of(".eE") != std::string::npos) {
    return absl::DataLossError(
        absl::StrCat("expected a non-negative integer, got '", v.text, "'"));
  }
  return out;
}

const Json* Member(const Json& object, absl::string_view key) {
  for (const auto& [k, v] : object.members) {
    if (k == key) return &v;
  }
  return nullptr;
}

// Writes `s` as a JSON string.
void AppendJsonString(absl::string_view s, std::string& out) {
  out.push_back('"');
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

// The header of safetensors' own reference: at most 100 MB.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

}  // namespace

absl::StatusOr<SafetensorsFile> SafetensorsFile::Read(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFileToString(path);
  if (!contents.ok()) {
    return absl::Status(
        contents.status().code(),
        absl::StrCat("safetensors file: ", contents.status().message()));
  }
  return FromBytes(*std::move(contents), path);
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::FromBytes(std::string bytes_in,
                                                           std::string path) {
  SafetensorsFile file;
  file.path_ = std::move(path);
  file.bytes_ = std::move(bytes_in);
  const std::string& path_ref = file.path_;
  const std::string& bytes = file.bytes_;
  auto corrupt = [&](absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat("safetensors file ", path_ref, ": ", what));
  };
  if (bytes.size() < 8) {
    return corrupt(absl::StrCat("truncated: ", bytes.size(),
                                " bytes, shorter than the 8-byte header size"));
  }
  uint64_t header_size;
  std::memcpy(&header_size, bytes.data(), 8);
  if (header_size > kMaxHeaderBytes || header_size > bytes.size() - 8) {
    return corrupt(absl::StrCat("truncated or corrupt: header of ", header_size,
                                " bytes in a file of ", bytes.size()));
  }
  file.data_start_ = 8 + header_size;
  const uint64_t data_size = bytes.size() - file.data_start_;
  absl::StatusOr<Json> header =
      JsonParser(absl::string_view(bytes).substr(8, header_size))
          .ParseDocument();
  if (!header.ok()) return corrupt(header.status().message());
  if (header->kind != Json::kObject) {
    return corrupt("the header is not a JSON object");
  }
  std::vector<std::pair<uint64_t, std::string>> by_offset;
  for (const auto& [name, value] : header->members) {
    if (name == "__metadata__") {
      if (value.kind != Json::kObject) {
        return corrupt("__metadata__ is not an object");
      }
      for (const auto& [key, v] : value.members) {
        if (v.kind != Json::kString) {
          return corrupt(
              absl::StrCat("__metadata__ '", key, "' is not a string"));
        }
        file.metadata_[key] = v.text;
      }
      continue;
    }
    // A copy: lambdas may not capture structured bindings (before C++20).
    const std::string& tensor_name = name;
    auto bad = [&](absl::string_view what) {
      return corrupt(absl::StrCat("tensor '", tensor_name, "': ", what));
    };
    if (file.entries_.count(name) > 0) return bad("listed twice");
    const Json* dtype = Member(value, "dtype");
    const Json* shape = Member(value, "shape");
    const Json* offsets = Member(value, "data_offsets");
    if (value.kind != Json::kObject || dtype == nullptr ||
        dtype->kind != Json::kString || shape == nullptr ||
        shape->kind != Json::kArray || offsets == nullptr ||
        offsets->kind != Json::kArray || offsets->items.size() != 2) {
      return bad("needs dtype, shape and data_offsets [begin, end]");
    }
    Entry e;
    e.dtype = dtype->text;
    const size_t element = DTypeBytes(e.dtype);
    if (element == 0) return bad(absl::StrCat("unknown dtype ", e.dtype));
    // The element count, saturated above the data size (a hostile shape
    // must not overflow); a zero dimension makes it 0 whatever the rest.
    uint64_t numel = 1;
    bool zero = false, too_big = false;
    for (const Json& d : shape->items) {
      absl::StatusOr<uint64_t> dim = ToUint(d);
      if (!dim.ok() || *dim > (uint64_t{1} << 62)) return bad("bad shape");
      e.shape.push_back(static_cast<int64_t>(*dim));
      if (*dim == 0) {
        zero = true;
      } else if (!too_big) {
        if (numel > data_size / *dim)
          too_big = true;
        else
          numel *= *dim;
      }
    }
    if (zero) numel = 0;
    if (too_big && !zero) {
      return bad(absl::StrCat("truncated: shape ", ShapeToString(e.shape),
                              " needs more than the file's ", data_size,
                              " data bytes"));
    }
    absl::StatusOr<uint64_t> begin = ToUint(offsets->items[0]);
    absl::StatusOr<uint64_t> end = ToUint(offsets->items[1]);
    if (!begin.ok() || !end.ok() || *begin > *end) {
      return bad("bad data_offsets");
    }
    e.begin = *begin;
    e.end = *end;
    if (e.end > data_size) {
      return bad(absl::StrCat("truncated: needs data bytes [", e.begin, ", ",
                              e.end, ") of ", data_size));
    }
    if (e.end - e.begin != numel * element) {
      return bad(absl::StrCat(e.dtype, ShapeToString(e.shape), " needs ",
                              numel * element, " bytes, data_offsets give ",
                              e.end - e.begin));
    }
    by_offset.emplace_back(e.begin, name);
    file.entries_.emplace(name, std::move(e));
  }
  std::sort(by_offset.begin(), by_offset.end());
  for (size_t i = 0; i < by_offset.size(); ++i) {
    const Entry& e = file.entries_.at(by_offset[i].second);
    if (i > 0 && e.begin < file.entries_.at(by_offset[i - 1].second).end) {
      return corrupt(absl::StrCat("tensors '", by_offset[i - 1].second,
                                  "' and '", by_offset[i].second, "' overlap"));
    }
    file.names_.push_back(by_offset[i].second);
  }
  return file;
}

absl::StatusOr<const SafetensorsFile::Entry*> SafetensorsFile::Find(
    const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("safetensors file ", path_,
                                            " has no tensor '", name, "'"));
  }
  return &it->second;
}

absl::StatusOr<std::string> SafetensorsFile::dtype(
    const std::string& name) const {
  CZ_ASSIGN_OR_RETURN(const Entry* e, Find(name));
  return e->dtype;
}

absl::StatusOr<Shape> SafetensorsFile::shape(const std::string& name) const {
  CZ_ASSIGN_OR_RETURN(const Entry* e, Find(name));
  return e->shape;
}

absl::StatusOr<Tensor> SafetensorsFile::Get(const std::string& name) const {
  CZ_ASSIGN_OR_RETURN(const Entry* e, Find(name));
  absl::StatusOr<DType> dtype = ToDType(e->dtype);
  if (!dtype.ok()) {
    return absl::UnimplementedError(absl::StrCat(
        "safetensors file ", path_, ": tensor '", name, "' has dtype ",
        e->dtype, "; only F32, F16 and BF16 load"));
  }
  CZ_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(e->shape, *dtype));
  if (t.nbytes() > 0) {
    std::memcpy(t.raw_data(), bytes_.data() + data_start_ + e->begin,
                t.nbytes());
  }
  return t;
}

absl::Status WriteSafetensors(
    const std::string& path,
    const std::vector<std::pair<std::string, Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) header += ",";
      first = false;
      AppendJsonString(key, header);
      header += ":";
      AppendJsonString(value, header);
    }
    header += "}";
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const std::string& tensor_name = name;  // Lambdas can't capture bindings.
    auto bad = [&](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat("writing safetensors file ", path, ": tensor '",
                       tensor_name, "' ", what));
    };
    if (name == "__metadata__" || !seen.insert(name).second) {
      return bad("is a reserved or repeated name");
    }
    if (t.numel() > 0 &&
        (!t.is_materialized() || !t.device().is_host_accessible())) {
      return bad(
          absl::StrCat("is not readable on the host: ", t.DebugString()));
    }
    if (header.size() > 1) header += ",";
    AppendJsonString(name, header);
    absl::StrAppend(&header, ":{\"dtype\":\"", SafetensorsDType(t.dtype()),
                    "\",\"shape\":[", absl::StrJoin(t.shape(), ","),
                    "],\"data_offsets\":[", offset, ",", offset + t.nbytes(),
                    "]}");
    offset += t.nbytes();
  }
  header += "}";
  // Spaces are JSON whitespace: the data then starts 8-byte aligned.
  header.append((8 - header.size() % 8) % 8, ' ');

  return WriteFileAtomically(path, [&](int fd, const std::string& tmp) {
    const uint64_t size = header.size();
    CZ_RETURN_IF_ERROR(WriteAll(fd, &size, sizeof(size), tmp));
    CZ_RETURN_IF_ERROR(WriteAll(fd, header.data(), header.size(), tmp));
    for (const auto& [name, t] : tensors) {
      CZ_RETURN_IF_ERROR(WriteAll(fd, t.raw_data(), t.nbytes(), tmp));
    }
    return absl::OkStatus();
  });
}

}  // namespace chunkzero
