#include "io/safetensors/safetensors.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/" + name;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), bytes.size());
}

// A file with this JSON header and data, built by hand.
std::string MakeFile(const std::string& header, const std::string& data) {
  const uint64_t n = header.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &n, 8);
  return bytes + header + data;
}

// Reads a file of `header` and 4 data bytes and expects DataLoss naming the
// file and containing each of `parts`; returns the message.
std::string ExpectCorruptHeader(
    const std::string& header, std::initializer_list<absl::string_view> parts) {
  const std::string path = TempPath("corrupt.safetensors");
  WriteBytes(path, MakeFile(header, std::string(4, '\0')));
  const absl::Status s = SafetensorsFile::Read(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr(path));
  for (absl::string_view part : parts) {
    EXPECT_THAT(s.message(), HasSubstr(part));
  }
  return std::string(s.message());
}

std::string Bytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw_data()), t.nbytes());
}

TEST(SafetensorsTest, RoundTripIsBitExact) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"a.weight", *Tensor::FromFloats(
                       {1.5f, -0.0f, nan, INFINITY, 1e-40f, 3.14159f}, {2, 3})},
      {"half", *Tensor::FromFloats({0.1f, 65504.0f, -2.0f}, {3}, DType::kF16)},
      {"brain", *Tensor::FromFloats({0.1f, 1e30f}, {1, 2}, DType::kBF16)},
      {"scalar", *Tensor::FromFloats({7.0f}, {})},
      {"empty", *Tensor::Zeros({0, 3}, DType::kF32)},
      {"we\"ird\\name\n", *Tensor::FromFloats({2.0f}, {1})},
  };
  // The non-compute dtypes travel as their bytes (U8, I32, I64, F64).
  for (DType dtype : {DType::kU8, DType::kI32, DType::kI64, DType::kF64}) {
    Tensor t = *Tensor::Zeros({3}, dtype);
    for (size_t b = 0; b < t.nbytes(); ++b) {
      static_cast<unsigned char*>(t.raw_data())[b] =
          static_cast<unsigned char>(37 * b + 1);
    }
    tensors.emplace_back(absl::StrCat("as_", DTypeName(dtype)), std::move(t));
  }
  const std::string path = TempPath("round_trip.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors,
                               {{"format", "pt"}, {"note", "a\"b\\c\td"}})
                  .ok());
  const std::string bytes = ReadBytes(path);
  uint64_t header;
  std::memcpy(&header, bytes.data(), 8);
  EXPECT_EQ((8 + header) % 8, 0u);  // Data aligned.

  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Read(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().at("note"), "a\"b\\c\td");
  EXPECT_EQ(file->metadata().at("format"), "pt");
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    names.push_back(name);
    absl::StatusOr<Tensor> got = file->Get(name);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->dtype(), t.dtype());
    EXPECT_EQ(got->shape(), t.shape());
    EXPECT_EQ(Bytes(*got), Bytes(t));
  }
  EXPECT_EQ(file->names(), names);  // Data order = write order.
  EXPECT_EQ(*file->dtype("brain"), "BF16");
  EXPECT_THAT(*file->shape("a.weight"), ElementsAre(2, 3));
  EXPECT_EQ(file->Get("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(file->Get("nope").status().message(), HasSubstr("'nope'"));
}

TEST(SafetensorsTest, ReadsHandWrittenHeaderWithOtherDTypes) {
  // Spacing, key order, an I64 tensor and a dtype we do not read (I8) as
  // other writers produce them.
  const std::string header =
      "{ \"ids\" : {\"shape\":[2],\"dtype\":\"I64\",\"data_offsets\":[0,16]},"
      "\n \"x\": {\"dtype\": \"F32\", \"data_offsets\": [16, 20], "
      "\"shape\": [1]}, \"__metadata__\": {\"k\": \"\\u00e9\\ud83d\\ude00\"},"
      "\"q\": {\"dtype\": \"I8\", \"shape\": [2], \"data_offsets\": [20, 22]}}";
  std::string data(16, '\1');
  const float one = 1.0f;
  data.append(reinterpret_cast<const char*>(&one), 4);
  data.append(2, '\7');
  const std::string path = TempPath("other.safetensors");
  WriteBytes(path, MakeFile(header, data));
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Read(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(file->names(), ElementsAre("ids", "x", "q"));
  EXPECT_EQ(file->metadata().at("k"), "\xC3\xA9\xF0\x9F\x98\x80");
  EXPECT_EQ(*file->Get("x")->ToFloats(), std::vector<float>{1.0f});
  const absl::StatusOr<Tensor> ids = file->Get("ids");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->dtype(), DType::kI64);
  EXPECT_EQ(ids->data<int64_t>()[1], 0x0101010101010101);
  // Get loads what a Tensor can hold; the message lists it.
  EXPECT_EQ(file->Get("q").status(),
            absl::UnimplementedError(absl::StrCat(
                "safetensors file ", path,
                ": tensor 'q' has dtype I8; only F32, F16, BF16, U8, I32, I64 "
                "and F64 load")));
}

// True if `message` is one line of printable ASCII.
::testing::AssertionResult OnePrintableLine(absl::string_view message) {
  for (size_t i = 0; i < message.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(message[i]);
    if (c < 0x20 || c > 0x7e) {
      return ::testing::AssertionFailure()
             << absl::StrFormat("byte %d is 0x%02x in: ", i, c)
             << absl::CHexEscape(message);
    }
  }
  return ::testing::AssertionSuccess();
}

// Text from the file (tensor names, dtypes, __metadata__ keys, what the JSON
// parser last read) goes into messages C-escaped, names in quotes: a
// crafted file cannot put a NUL, a newline, a terminal escape or bytes that
// are not UTF-8 into the one-line error.
TEST(SafetensorsTest, ErrorsShowTheFilesTextEscapedOnOneLine) {
  struct Case {
    std::string header;
    std::string message;  // After "safetensors file <path>: ".
  };
  const Case cases[] = {
      {"{\"a\\u000ab\\u0000\":{\"dtype\":\"Q\\r7\",\"shape\":[1],"
       "\"data_offsets\":[0,4]}}",
       "tensor 'a\\nb\\x00': unknown dtype 'Q\\r7'"},
      {"{\"\\u001b[31m\":{\"dtype\":\"F32\",\"shape\":[1],"
       "\"data_offsets\":[0,4]},\"\\u001b[31m\":{}}",
       "tensor '\\x1b[31m': listed twice"},
      {"{\"it's\\\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],"
       "\"k\\u0007\":1,\"k\\u0007\":2}}",
       "tensor 'it\\'s\\\"': key 'k\\x07' listed twice"},
      {"{\"__metadata__\":{\"k\\r\\n\":1}}",
       "__metadata__ 'k\\r\\n' is not a string"},
      {"{\"x\\ty\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
       "\"\xC3\xA9\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
       "tensors 'x\\ty' and '\\xc3\\xa9' overlap"},
      {"{\"x\\u007f\":{\"dtype\":\"F32\",\"shape\":[-1],"
       "\"data_offsets\":[0,4]}}",
       "tensor 'x\\x7f': bad shape"},
      // What the JSON parser last read, bytes that are not UTF-8 included.
      {"{\"x\":\"\x7f\xff\"}",
       "bad JSON header: parse error at line 1, column 8: syntax error while "
       "parsing value - invalid string: ill-formed UTF-8 byte; last read: "
       "'\"\\x7f\\xff'"},
      {"{\"x\":\"\x01\"}",
       "bad JSON header: parse error at line 1, column 7: syntax error while "
       "parsing value - invalid string: control character U+0001 (SOH) must be "
       "escaped to \\u0001; last "
       "read: '\"<U+0001>'"},
  };
  const std::string path = TempPath("corrupt.safetensors");
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::CHexEscape(c.header));
    const std::string message = ExpectCorruptHeader(c.header, {});
    EXPECT_EQ(message,
              absl::StrCat("safetensors file ", path, ": ", c.message));
    EXPECT_TRUE(OnePrintableLine(message));
  }
  // Names in Get's and Find's errors too.
  const std::string header =
      "{\"m\\n\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[0,1]}}";
  WriteBytes(path, MakeFile(header, std::string(1, '\1')));
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Read(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->Get("m\n").status(),
            absl::UnimplementedError(absl::StrCat(
                "safetensors file ", path,
                ": tensor 'm\\n' has dtype BOOL; only F32, F16, BF16, U8, I32, "
                "I64 and F64 load")));
  EXPECT_EQ(file->Get(std::string("n\0", 2)).status(),
            absl::NotFoundError(absl::StrCat("safetensors file ", path,
                                             " has no tensor 'n\\x00'")));
}

// A quoted name is cut at kMaxQuotedBytes and its size said: a hostile
// 70000-byte name of control characters (four bytes each, escaped) makes a
// message of a few hundred bytes, not 280 KB.
TEST(SafetensorsTest, LongNamesAreCutInMessages) {
  EXPECT_EQ(QuoteForMessage(std::string(kMaxQuotedBytes, 'a')),
            absl::StrCat("'", std::string(kMaxQuotedBytes, 'a'), "'"));
  const std::string hostile(70000, '\f');
  std::string expected = "'";
  for (size_t i = 0; i < kMaxQuotedBytes; ++i) expected += "\\x0c";
  expected += "...' (a name of 70000 bytes)";
  EXPECT_EQ(QuoteForMessage(hostile), expected);
  EXPECT_EQ(QuoteForMessage(std::string(kMaxQuotedBytes + 1, 'b')),
            absl::StrCat("'", std::string(kMaxQuotedBytes, 'b'),
                         "...' (a name of 129 bytes)"));
}

TEST(SafetensorsTest, TruncatedFilesNameTheFileAndTensor) {
  const std::string path = TempPath("full.safetensors");
  ASSERT_TRUE(
      WriteSafetensors(path, {{"first", *Tensor::Zeros({4}, DType::kF32)},
                              {"second", *Tensor::Zeros({8}, DType::kF16)}})
          .ok());
  const std::string bytes = ReadBytes(path);
  uint64_t header;
  std::memcpy(&header, bytes.data(), 8);
  struct Case {
    size_t size;
    const char* names;  // What the message must name besides the file.
  };
  for (const Case& c :
       {Case{0, "truncated"}, Case{5, "truncated"},
        Case{8 + header / 2, "truncated"}, Case{bytes.size() - 1, "'second'"},
        Case{8 + header + 3, "'first'"}}) {
    SCOPED_TRACE(c.size);
    const std::string cut = TempPath("cut.safetensors");
    WriteBytes(cut, bytes.substr(0, c.size));
    const absl::Status s = SafetensorsFile::Read(cut).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(s.message(), HasSubstr(cut));
    EXPECT_THAT(s.message(), HasSubstr(c.names));
  }
  const absl::Status missing =
      SafetensorsFile::Read(TempPath("does_not_exist")).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("does_not_exist"));
}

// A directory was an uncaught std::ios_base::failure (an abort).
TEST(SafetensorsTest, DirectoryIsAnErrorNamingIt) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  const absl::Status s = SafetensorsFile::Read(dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), absl::StrCat("safetensors file: ", dir,
                                      " is a directory, not a file"));
}

TEST(SafetensorsTest, WriteErrorsCarryErrnoText) {
  const absl::Status s =
      WriteSafetensors("/nonexistent_dir/x.safetensors",
                       {{"a", *Tensor::Zeros({4}, DType::kF32)}});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(),
            "cannot create /nonexistent_dir/x.safetensors.tmp: No such file or "
            "directory");
}

TEST(SafetensorsTest, CorruptHeadersAreErrorsNamingTheFile) {
  struct Case {
    const char* header;
    const char* names;
    const char* also = "";  // More the message must contain.
  };
  const Case cases[] = {
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}",
       "bad JSON header", "syntax error while parsing object"},
      {"[1, 2]", "not a JSON object"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}",
       "'x'"},
      {"{\"x\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,4]}}",
       "unknown dtype 'Q7'"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
       "bad shape"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1]}}", "data_offsets"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
       "\"data_offsets\":[0,4]}}",
       "'x'"},
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
       "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
       "overlap"},
      {"{\"__metadata__\":{\"a\":1}}", "__metadata__"},
      {"{\"x\":\"\\q\"}", "bad JSON header",
       "forbidden character after backslash"},
      {"", "bad JSON header", "unexpected end of input"},
      {"{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]"
       "]]]]]]]]]]]]]]]]]]}",
       "nested too deeply"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    ExpectCorruptHeader(c.header, {c.names, c.also});
  }
  // A header length beyond the file.
  const std::string path = TempPath("huge.safetensors");
  std::string bytes = MakeFile("{}", "");
  bytes[5] = 1;
  WriteBytes(path, bytes);
  EXPECT_THAT(SafetensorsFile::Read(path).status().message(),
              HasSubstr("header of"));
}

// Exported files are compared byte for byte: the header's keys, order,
// spacing and escapes are fixed.
TEST(SafetensorsTest, WrittenHeaderIsByteExact) {
  const std::string path = TempPath("golden.safetensors");
  ASSERT_TRUE(
      WriteSafetensors(
          path,
          {{"w\"\\\n\x01\xC3\xA9", *Tensor::FromFloats({1.0f}, {1})},
           {"h", *Tensor::Zeros({2, 0}, DType::kF16)},
           {"b", *Tensor::FromFloats({2.0f, 3.0f}, {2, 1}, DType::kBF16)}},
          {{"z", "1"}, {"a", "q\"\t/"}})
          .ok());
  const std::string bytes = ReadBytes(path);
  const std::string header =
      "{\"__metadata__\":{\"a\":\"q\\\"\\u0009/\",\"z\":\"1\"},"
      "\"w\\\"\\\\\\u000a\\u0001\xC3\xA9\":{\"dtype\":\"F32\",\"shape\":[1],"
      "\"data_offsets\":[0,4]},"
      "\"h\":{\"dtype\":\"F16\",\"shape\":[2,0],\"data_offsets\":[4,4]},"
      "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,1],\"data_offsets\":[4,8]}}";
  const std::string padded =
      header + std::string((8 - header.size() % 8) % 8, ' ');
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n, padded.size());
  EXPECT_EQ(bytes.substr(8, n), padded);
  EXPECT_EQ(bytes.size(), 8 + padded.size() + 8);
}

// What the reader has always refused beyond the corrupt headers above: each
// is DataLoss naming the file.
TEST(SafetensorsTest, HeaderChecks) {
  auto entry = [](const std::string& fields) {
    return "{\"x\":{\"dtype\":\"F32\"," + fields + "}}";
  };
  const std::string nested31 = std::string(31, '[') + std::string(31, ']');
  const std::string nested32 = std::string(32, '[') + std::string(32, ']');
  struct Case {
    std::string header;
    const char* names;
    const char* also = "";  // More the message must contain.
  };
  const Case cases[] = {
      {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
       "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
       "tensor 'x': listed twice"},
      {entry("\"shape\":[1],\"data_offsets\":[-0,4]"), "bad data_offsets"},
      {entry("\"shape\":[1],\"data_offsets\":[-1,4]"), "bad data_offsets"},
      {entry("\"shape\":[1],\"data_offsets\":[0,4.0]"), "bad data_offsets"},
      {entry("\"shape\":[1],\"data_offsets\":[0,4e0]"), "bad data_offsets"},
      {entry("\"shape\":[1],\"data_offsets\":[0,4E0]"), "bad data_offsets"},
      {entry("\"shape\":[1],\"data_offsets\":[0,\"4\"]"), "bad data_offsets"},
      {entry("\"shape\":[1],\"data_offsets\":[0,18446744073709551616]"),
       "bad data_offsets"},
      {entry("\"shape\":[1],\"data_offsets\":[0,18446744073709551615]"),
       "truncated"},
      {entry("\"shape\":[1],\"data_offsets\":[4,0]"), "bad data_offsets"},
      {entry("\"shape\":[1],\"data_offsets\":[0,4,8]"), "data_offsets"},
      {entry("\"shape\":[1],\"data_offsets\":{}"), "data_offsets"},
      {entry("\"shape\":[1.0],\"data_offsets\":[0,4]"), "bad shape"},
      {entry("\"shape\":[1e0],\"data_offsets\":[0,4]"), "bad shape"},
      {entry("\"shape\":[-0],\"data_offsets\":[0,4]"), "bad shape"},
      {entry("\"shape\":[null],\"data_offsets\":[0,4]"), "bad shape"},
      {entry("\"shape\":[[1]],\"data_offsets\":[0,4]"), "bad shape"},
      {entry("\"shape\":[4611686018427387905],\"data_offsets\":[0,4]"),
       "bad shape"},
      {entry("\"shape\":[18446744073709551616],\"data_offsets\":[0,4]"),
       "bad shape"},
      {entry("\"shape\":[4611686018427387904],\"data_offsets\":[0,4]"),
       "truncated: shape"},
      {entry("\"shape\":1,\"data_offsets\":[0,4]"), "needs dtype"},
      {"{\"x\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}",
       "needs dtype"},
      {"{\"x\":[1]}", "tensor 'x': needs dtype"},
      {"{\"x\":null}", "tensor 'x': needs dtype"},
      {"{\"__metadata__\":\"a\"}", "__metadata__ is not an object"},
      {"{\"__metadata__\":{\"a\":\"b\",\"a\":1}}",
       "__metadata__: key 'a' listed twice"},
      {"{\"__metadata__\":{\"a\":null}}", "__metadata__ 'a' is not a string"},
      {"null", "not a JSON object"},
      {"\"x\"", "not a JSON object"},
      {"7", "not a JSON object"},
      // nlohmann would take a NUL for the end of the input and skip a byte
      // order mark: both are refused before it parses.
      {std::string("{}\0", 3), "bad JSON header: NUL byte at byte 2"},
      {std::string("{\"x\":\0}", 7), "bad JSON header: NUL byte at byte 5"},
      {std::string("{\"x\":\"\0\"}", 8), "bad JSON header: NUL byte"},
      {"\xEF\xBB\xBF{}", "bad JSON header: byte order mark"},
      // Syntax errors: the library's message after "bad JSON header: ".
      {"{} x", "bad JSON header", "expected end of input"},
      {"{}{}", "bad JSON header", "expected end of input"},
      {"{\"x\":1.2.3}", "bad JSON header", "syntax error"},
      {"{\"x\":01}", "bad JSON header", "syntax error"},
      {"{\"x\":+1}", "bad JSON header", "syntax error"},
      {"{\"x\":tru}", "bad JSON header", "syntax error"},
      {"{\"x\":1e999}", "bad JSON header", "number overflow"},
      {"{\"x\":\"\x01\"}", "bad JSON header", "control character"},
      {"{\"x\":\"\xff\"}", "bad JSON header", "ill-formed UTF-8"},
      {"{\"x\":\"abc", "bad JSON header", "missing closing quote"},
      {"{\"x\":\"\\u12\"}", "bad JSON header", "'\\u' must be followed"},
      {"{\"x\":\"\\ud800\"}", "bad JSON header", "surrogate"},
      {"{\"x\":\"\\ud800\\u0041\"}", "bad JSON header", "surrogate"},
      {"{\"a\",1}", "bad JSON header", "syntax error"},
      {"{\"a\":1,}", "bad JSON header", "syntax error"},
      {"{1:2}", "bad JSON header", "syntax error"},
      {"[1 2]", "bad JSON header", "syntax error"},
      {"{\"a\":}", "bad JSON header", "syntax error"},
      {"{\"a\":", "bad JSON header", "unexpected end of input"},
      // A hostile string is not copied whole into the message.
      {"{\"x\":\"" + std::string(100000, 'a'), "bad JSON header", "aaa..."},
      {entry("\"shape\":[1],\"data_offsets\":[0,4],\"e\":" + nested32),
       "nested too deeply"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    const std::string message =
        ExpectCorruptHeader(c.header, {c.names, c.also});
    EXPECT_LT(message.size(), TempPath("corrupt.safetensors").size() + 300);
  }
  // As deep as the reader goes: 32 levels.
  const std::string path = TempPath("deep.safetensors");
  WriteBytes(path, MakeFile(entry("\"shape\":[1],\"data_offsets\":[0,4],"
                                  "\"e\":" +
                                  nested31),
                            std::string(4, '\0')));
  EXPECT_TRUE(SafetensorsFile::Read(path).ok());
}

// Repeated keys, which JSON permits and writers do not produce, are
// DataLoss in any object of the header: a tensor listed twice (as before;
// see HeaderChecks), and now also a key repeated within a tensor entry
// (the first used to count), within __metadata__ (the last used to count)
// or anywhere deeper, and __metadata__ listed twice (the two used to merge).
TEST(SafetensorsTest, RepeatedKeysAreErrors) {
  const std::string x =
      "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]";
  struct Case {
    std::string header;
    const char* names;
  };
  const Case cases[] = {
      {"{" + x + ",\"dtype\":\"F16\"}}",
       "tensor 'x': key 'dtype' listed twice"},
      {"{" + x + ",\"shape\":[1]}}", "tensor 'x': key 'shape' listed twice"},
      {"{" + x + ",\"e\":[{\"a\":1,\"a\":1}]}}",
       "tensor 'x': key 'a' listed twice"},
      {"{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}",
       "__metadata__: key 'k' listed twice"},
      {"{\"__metadata__\":{},\"__metadata__\":{}}",
       "__metadata__: listed twice"},
      {"[{\"a\":1,\"a\":1}]", "the header: key 'a' listed twice"},
      // What this test read successfully before the rule.
      {"{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\",\"j\":\"c\"},"
       "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],"
       "\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,2],"
       "\"extra\":[true,false,null,-1.5e3,{\"\":{}}]},"
       "\"__metadata__\":{\"j\":\"d\",\"\\u0000\":\"\\/\"}}",
       "__metadata__: key 'k' listed twice"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    ExpectCorruptHeader(c.header, {c.names});
  }
}

// Members other than dtype, shape and data_offsets, and values of any type
// in them, are ignored; __metadata__ keys may be any string.
TEST(SafetensorsTest, UnknownMembersAreIgnored) {
  const std::string header =
      "{\"__metadata__\":{\"k\":\"b\",\"j\":\"d\",\"\\u0000\":\"\\/\"},"
      "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],"
      "\"extra\":[true,false,null,-1.5e3,{\"\":{}}]}}";
  const std::string path = TempPath("unknown_members.safetensors");
  const float one = 1.0f;
  WriteBytes(
      path,
      MakeFile(header, std::string(reinterpret_cast<const char*>(&one), 4)));
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Read(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*file->dtype("x"), "F32");
  EXPECT_THAT(*file->shape("x"), ElementsAre(1));
  EXPECT_EQ(*file->Get("x")->ToFloats(), std::vector<float>{1.0f});
  EXPECT_EQ(file->metadata().size(), 3u);
  EXPECT_EQ(file->metadata().at("k"), "b");
  EXPECT_EQ(file->metadata().at("j"), "d");
  EXPECT_EQ(file->metadata().at(std::string(1, '\0')), "/");
}

TEST(SafetensorsTest, WriteRejectsBadInput) {
  const std::string path = TempPath("bad_write.safetensors");
  Tensor t = *Tensor::Zeros({2}, DType::kF32);
  absl::Status s = WriteSafetensors(path, {{"x", t}, {"x", t}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'x'"));
  EXPECT_FALSE(WriteSafetensors(path, {{"__metadata__", t}}).ok());
  s = WriteSafetensors("/nonexistent_dir/x.safetensors", {{"x", t}});
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent_dir/x.safetensors"));
}

// JSON text is UTF-8 and the reader rejects anything else, so the writer
// refuses to write what could not be read back.
TEST(SafetensorsTest, WriteRejectsNamesThatAreNotUtf8) {
  const std::string path = TempPath("not_utf8.safetensors");
  Tensor t = *Tensor::Zeros({2}, DType::kF32);
  for (const std::string& name : {std::string("a\xff"), std::string("\xC3"),
                                  std::string("\xED\xA0\x80")}) {
    const absl::Status s = WriteSafetensors(path, {{name, t}});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("'" + name + "' is not UTF-8"));
  }
  absl::Status s = WriteSafetensors(path, {{"x", t}}, {{"k", "\xff"}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("__metadata__ 'k' is not UTF-8"));
  s = WriteSafetensors(path, {{"x", t}}, {{"\xff", "v"}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("__metadata__ key is not UTF-8"));
  EXPECT_FALSE(SafetensorsFile::Read(path).ok());  // Nothing was written.
  // Control characters, NUL included, are escaped and read back.
  const std::string odd("\0\x1f\x7f\xF0\x9F\x98\x80", 7);
  ASSERT_TRUE(WriteSafetensors(path, {{odd, t}}, {{odd, odd}}).ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Read(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(file->names(), ElementsAre(odd));
  EXPECT_EQ(file->metadata().at(odd), odd);
}

}  // namespace
}  // namespace chunkzero
