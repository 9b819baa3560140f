// Reading and writing the safetensors format (huggingface/safetensors).
//
//   CZ_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Read(path));
//   for (const std::string& name : file.names()) { ... }
//   CZ_ASSIGN_OR_RETURN(Tensor wte, file.Get("wte.weight"));   // a CPU copy
//
//   CZ_RETURN_IF_ERROR(WriteSafetensors(path, {{"w", w}, {"b", b}},
//                                       {{"format", "pt"}}));
//
// The format: an 8-byte little-endian header length n, n bytes of JSON, then
// the data. The JSON is an object mapping each tensor name to {"dtype":
// "F32" | "F16" | "BF16" | ..., "shape": [...], "data_offsets": [begin,
// end]} (byte offsets into the data, little-endian elements), plus an
// optional "__metadata__" object of strings.
//
// Reading checks the whole header (strict JSON, parsed with nlohmann/json,
// at most 32 levels deep, no key repeated within an object): every entry's
// byte range lies inside the file and matches its dtype and shape.
// A short, truncated or corrupt file is DataLoss, a missing file NotFound
// and a directory or other non-regular file InvalidArgument, with the path
// and (where one is to blame) the tensor named. What the file supplies
// (tensor names, dtypes, __metadata__ keys) goes into messages through
// QuoteForMessage, so that an error stays one line of printable ASCII.
// Tensors of every safetensors dtype are listed; Get returns those a Tensor
// can hold (F32, F16, BF16, U8, I32, I64, F64); a reader that accepts
// only some dtypes checks dtype() first (as ReadGptCheckpoint does). The
// whole file is read into memory.
//
// Thread-safety: a SafetensorsFile is immutable after Read.
#ifndef CHUNKZERO_IO_SAFETENSORS_SAFETENSORS_H_
#define CHUNKZERO_IO_SAFETENSORS_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tensor/tensor.h"

namespace chunkzero {

class SafetensorsFile {
 public:
  // Reads `path` and checks its header and sizes.
  [[nodiscard]] static absl::StatusOr<SafetensorsFile> Read(
      const std::string& path);
  // The same checks on a file's bytes already in memory; `path` names it in
  // errors.
  [[nodiscard]] static absl::StatusOr<SafetensorsFile> FromBytes(
      std::string bytes, std::string path);

  const std::string& path() const { return path_; }
  // Tensor names in the order of their data in the file.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const {
    return entries_.count(name) > 0;
  }
  // The dtype string as in the file ("F32", "I64", ...) and the shape.
  // NotFound naming the file and tensor if absent.
  [[nodiscard]] absl::StatusOr<std::string> dtype(
      const std::string& name) const;
  [[nodiscard]] absl::StatusOr<Shape> shape(const std::string& name) const;
  // A CPU copy of an F32, F16, BF16, U8, I32, I64 or F64 tensor (kept in
  // its dtype). NotFound if absent, Unimplemented for other dtypes (BOOL,
  // I8, F8_E4M3, ...); both name the file and the tensor.
  [[nodiscard]] absl::StatusOr<Tensor> Get(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }

 private:
  struct Entry {
    std::string dtype;
    Shape shape;
    uint64_t begin = 0;  // Byte range in the data section.
    uint64_t end = 0;
  };

  [[nodiscard]] absl::StatusOr<const Entry*> Find(
      const std::string& name) const;

  std::string path_;
  std::string bytes_;  // The whole file.
  size_t data_start_ = 0;
  std::map<std::string, Entry> entries_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> metadata_;
};

// `text` from a file (a tensor name, a dtype string) as messages show it:
// in single quotes, C-escaped by absl::CHexEscape ('a\nb', 'it\'s',
// '\xc3\xa9'), so that whatever bytes a file holds, an error naming them
// is one line of printable ASCII. Text longer than kMaxQuotedBytes is cut
// there and its size said ('aaaa...' (a name of 70000 bytes)), so that a
// hostile name cannot make an error of megabytes; two quoted names and a
// path stay well under 2 KiB.
inline constexpr size_t kMaxQuotedBytes = 128;
std::string QuoteForMessage(absl::string_view text);

// Writes `tensors` (of any DType, readable on the host; unique UTF-8
// names, "__metadata__" excluded) in this order, with `metadata` (UTF-8
// keys and values), to `path`. The header is padded with spaces to a
// multiple of 8 bytes so the data is aligned. Writes `path`.tmp, fsyncs and
// renames it, so a failed write leaves no partial file under `path`. Errors
// name the path (and the tensor); file system errors carry errno's code and
// text.
[[nodiscard]] absl::Status WriteSafetensors(
    const std::string& path,
    const std::vector<std::pair<std::string, Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata = {});

}  // namespace chunkzero

#endif  // CHUNKZERO_IO_SAFETENSORS_SAFETENSORS_H_
