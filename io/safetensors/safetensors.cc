#include "io/safetensors/safetensors.h"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "base/status_macros.h"
#include "io/json/json_text.h"
#include "nlohmann/json.hpp"

namespace chunkzero {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; this reads it in place");

// The header's JSON. Ordered: objects keep their members in file order, so
// the checks in FromBytes report the first bad entry in the file.
using Json = nlohmann::ordered_json;

// Deep enough for any safetensors header; bounds the work on hostile input.
constexpr int kMaxDepth = 32;

// The JSON text `text` parsed, or DataLoss saying why not (the message goes
// after "safetensors file <path>: "). Beyond strict JSON (RFC 8259, UTF-8):
// - No byte order mark and no NUL byte: nlohmann would skip the one and
//   take the other, outside a string, for the end of the input.
// - At most kMaxDepth containers around any value.
// - No object repeats a key. JSON permits it and nlohmann would keep the
//   last value; a header that lists a tensor twice, or a key twice within
//   an entry or __metadata__, is corrupt rather than read one way or the
//   other. One rule for every object is simpler than deciding per object.
// Json::parse throws; nothing thrown leaves this function (the project does
// not use exceptions). The callback throws an absl::Status to stop at the
// first problem: returning false would only discard the value, and the
// parse would go on, its stacks growing with a hostile header's nesting.
absl::StatusOr<Json> ParseHeader(absl::string_view text) {
  if (absl::StartsWith(text, "\xEF\xBB\xBF")) {
    return absl::DataLossError("bad JSON header: byte order mark");
  }
  if (const size_t nul = text.find('\0'); nul != absl::string_view::npos) {
    return absl::DataLossError(
        absl::StrCat("bad JSON header: NUL byte at byte ", nul));
  }
  std::vector<std::set<std::string>> keys;  // Of each open object.
  std::string where = "the header";  // The top-level member being parsed.
  auto check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    // `depth` counts the containers around the value (or, for a key, its
    // value).
    if (depth > kMaxDepth) {
      throw absl::DataLossError(
          absl::StrCat("bad JSON header: nested too deeply (more than ",
                       kMaxDepth, " levels)"));
    }
    if (event == Json::parse_event_t::object_start) keys.emplace_back();
    if (event == Json::parse_event_t::object_end) keys.pop_back();
    if (event == Json::parse_event_t::key) {
      const std::string& key = *parsed.get_ptr<const Json::string_t*>();
      if (depth == 1) {
        where = key == "__metadata__"
                    ? key
                    : absl::StrCat("tensor ", QuoteForMessage(key));
      }
      if (!keys.back().insert(key).second) {
        throw absl::DataLossError(absl::StrCat(
            where, ": ",
            depth == 1 ? "" : absl::StrCat("key ", QuoteForMessage(key), " "),
            "listed twice"));
      }
    }
    return true;  // Keep every value.
  };
  try {
    return Json::parse(text.begin(), text.end(), check);
  } catch (const absl::Status& status) {
    return status;
  } catch (const Json::exception& e) {
    return absl::DataLossError(
        absl::StrCat("bad JSON header: ", JsonErrorText(e.what())));
  }
}

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

// A shape dimension or data offset: written without a sign, fraction or
// exponent, within uint64 (nlohmann reads larger integers as doubles and
// negative ones as signed).
std::optional<uint64_t> ToUint(const Json& v) {
  if (!v.is_number_unsigned()) return std::nullopt;
  return *v.get_ptr<const Json::number_unsigned_t*>();
}

// The members of an object, in file order.
const Json::object_t& Members(const Json& object) {
  return *object.get_ptr<const Json::object_t*>();
}

// The member named `key` of `object`; nullptr if there is none or `object`
// is not an object (find gives end() then). Keys are unique: ParseHeader
// refuses repeats.
const Json* Member(const Json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// `v` as a T (Json::string_t, Json::array_t); nullptr if it is null or
// another type.
template <typename T>
const T* As(const Json* v) {
  return v == nullptr ? nullptr : v->get_ptr<const T*>();
}

// Appends `s` as a JSON string. False, appending nothing, if `s` is not
// UTF-8: JSON text must be, and readers (this one too) reject the file.
// Escapes only what JSON requires (exported files are compared byte for
// byte, so the escapes must not change).
bool AppendJsonString(absl::string_view s, std::string& out) {
  std::string quoted = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      quoted.push_back('\\');
      quoted.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      quoted += buf;
    } else {
      quoted.push_back(c);
    }
  }
  quoted.push_back('"');
  // Read back by the library that reads the header: true iff the bytes are
  // UTF-8, the escapes being valid.
  if (!nlohmann::json::accept(quoted)) return false;
  out += quoted;
  return true;
}

// The header of safetensors' own reference: at most 100 MB.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

}  // namespace

std::string QuoteForMessage(absl::string_view text) {
  if (text.size() <= kMaxQuotedBytes) {
    return absl::StrCat("'", absl::CHexEscape(text), "'");
  }
  return absl::StrCat("'", absl::CHexEscape(text.substr(0, kMaxQuotedBytes)),
                      "...' (a name of ", text.size(), " bytes)");
}

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
      ParseHeader(absl::string_view(bytes).substr(8, header_size));
  if (!header.ok()) return corrupt(header.status().message());
  if (!header->is_object()) {
    return corrupt("the header is not a JSON object");
  }
  std::vector<std::pair<uint64_t, std::string>> by_offset;
  for (const auto& [name, value] : Members(*header)) {
    if (name == "__metadata__") {
      if (!value.is_object()) {
        return corrupt("__metadata__ is not an object");
      }
      for (const auto& [key, v] : Members(value)) {
        const Json::string_t* text = As<Json::string_t>(&v);
        if (text == nullptr) {
          return corrupt(absl::StrCat("__metadata__ ", QuoteForMessage(key),
                                      " is not a string"));
        }
        file.metadata_[key] = *text;
      }
      continue;
    }
    // A copy: lambdas may not capture structured bindings (before C++20).
    const std::string& tensor_name = name;
    auto bad = [&](absl::string_view what) {
      return corrupt(
          absl::StrCat("tensor ", QuoteForMessage(tensor_name), ": ", what));
    };
    const Json::string_t* dtype = As<Json::string_t>(Member(value, "dtype"));
    const Json::array_t* shape = As<Json::array_t>(Member(value, "shape"));
    const Json::array_t* offsets =
        As<Json::array_t>(Member(value, "data_offsets"));
    if (dtype == nullptr || shape == nullptr || offsets == nullptr ||
        offsets->size() != 2) {
      return bad("needs dtype, shape and data_offsets [begin, end]");
    }
    Entry e;
    e.dtype = *dtype;
    const size_t element = DTypeBytes(e.dtype);
    if (element == 0) {
      return bad(absl::StrCat("unknown dtype ", QuoteForMessage(e.dtype)));
    }
    // The element count, saturated above the data size (a hostile shape
    // must not overflow); a zero dimension makes it 0 whatever the rest.
    uint64_t numel = 1;
    bool zero = false, too_big = false;
    for (const Json& d : *shape) {
      const std::optional<uint64_t> dim = ToUint(d);
      if (!dim.has_value() || *dim > (uint64_t{1} << 62)) {
        return bad("bad shape");
      }
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
    const std::optional<uint64_t> begin = ToUint((*offsets)[0]);
    const std::optional<uint64_t> end = ToUint((*offsets)[1]);
    if (!begin.has_value() || !end.has_value() || *begin > *end) {
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
      return corrupt(absl::StrCat(
          "tensors ", QuoteForMessage(by_offset[i - 1].second), " and ",
          QuoteForMessage(by_offset[i].second), " overlap"));
    }
    file.names_.push_back(by_offset[i].second);
  }
  return file;
}

absl::StatusOr<const SafetensorsFile::Entry*> SafetensorsFile::Find(
    const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "safetensors file ", path_, " has no tensor ", QuoteForMessage(name)));
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
    return absl::UnimplementedError(
        absl::StrCat("safetensors file ", path_, ": tensor ",
                     QuoteForMessage(name), " has dtype ", e->dtype,
                     "; only F32, F16, BF16, U8, I32, I64 and F64 load"));
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
    auto not_utf8 = [&](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat("writing safetensors file ", path, ": __metadata__ ",
                       what, " is not UTF-8"));
    };
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) header += ",";
      first = false;
      if (!AppendJsonString(key, header)) return not_utf8("key");
      header += ":";
      if (!AppendJsonString(value, header)) {
        return not_utf8(absl::StrCat("'", key, "'"));
      }
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
    if (!AppendJsonString(name, header)) return bad("is not UTF-8");
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
