// The C++ blocks of README.md, compiled into the test that runs them
// (docs/BUILD: readme_code_test; the conventions are in readme_code.awk).
#ifndef CHUNKZERO_DOCS_README_CODE_H_
#define CHUNKZERO_DOCS_README_CODE_H_

#include <vector>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "comm/process_group.h"

namespace chunkzero {

// One function block of README.md.
struct ReadmeBlock {
  int line;  // The README.md line of its opening fence.
  // The block's code on one rank; `group` is that rank's process group.
  absl::Status (*run)(comm::ProcessGroup& group);
};

// Every function block, in README order (generated).
std::vector<ReadmeBlock> ReadmeBlocks();

}  // namespace chunkzero

#endif  // CHUNKZERO_DOCS_README_CODE_H_
