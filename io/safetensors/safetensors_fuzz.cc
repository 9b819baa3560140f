// Fuzzes the safetensors reader: any bytes must give a SafetensorsFile whose
// every tensor can be read, or an error; never a crash, a hang or a read
// outside the file.
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/safetensors/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<chunkzero::SafetensorsFile> file =
      chunkzero::SafetensorsFile::FromBytes(
          std::string(reinterpret_cast<const char*>(data), size),
          "fuzz.safetensors");
  if (!file.ok()) return 0;
  for (const std::string& name : file->names()) {
    absl::StatusOr<chunkzero::Tensor> t = file->Get(name);
    if (t.ok() && t->nbytes() > size) __builtin_trap();  // Read past the end.
  }
  return 0;
}
