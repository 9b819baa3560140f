// The main() of a fuzz target in ordinary builds: calls the target's
// LLVMFuzzerTestOneInput once on every file named on the command line (its
// corpus: seeds and past crashes), so every build replays them as a test.
// Under --config=fuzz libFuzzer's own main() is linked instead.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "base/file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv)
    __attribute__((weak));

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  int replayed = 0;
  for (int i = 1; i < argc; ++i) {
    absl::StatusOr<std::string> input = chunkzero::ReadFileToString(argv[i]);
    if (!input.ok()) {
      std::fprintf(stderr, "cannot read corpus input: %s\n",
                   input.status().ToString().c_str());
      return 1;
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input->data()),
                           input->size());
    ++replayed;
  }
  std::printf("replayed %d corpus inputs\n", replayed);
  return replayed > 0 ? 0 : 1;
}
