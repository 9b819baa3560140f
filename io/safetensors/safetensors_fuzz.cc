// Fuzzes the safetensors reader: any bytes must give a SafetensorsFile whose
// every tensor can be read, or an error that is one line of printable ASCII
// (the file's text escaped); never a crash, a hang or a read outside the
// file.
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/safetensors/safetensors.h"

namespace {

// Traps unless `status`'s message is one line of printable ASCII.
void CheckPrintable(const absl::Status& status) {
  for (const char c : status.message()) {
    if (c < 0x20 || c > 0x7e) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<chunkzero::SafetensorsFile> file =
      chunkzero::SafetensorsFile::FromBytes(
          std::string(reinterpret_cast<const char*>(data), size),
          "fuzz.safetensors");
  if (!file.ok()) {
    CheckPrintable(file.status());
    return 0;
  }
  for (const std::string& name : file->names()) {
    absl::StatusOr<chunkzero::Tensor> t = file->Get(name);
    if (t.ok() && t->nbytes() > size) __builtin_trap();  // Read past the end.
    if (!t.ok()) CheckPrintable(t.status());
  }
  return 0;
}
