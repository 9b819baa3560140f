// EditManifest: rewrites a checkpoint's manifest through a function, with a
// valid checksum: what a buggy or hostile writer could leave, for tests of
// the readers' checks.
//
//   CZ_RETURN_IF_ERROR(EditManifest(dir, [](CheckpointManifest& m) {
//     m.set_iterations(-100);
//   }));
#ifndef CHUNKZERO_CHECKPOINT_TESTING_EDIT_MANIFEST_H_
#define CHUNKZERO_CHECKPOINT_TESTING_EDIT_MANIFEST_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "checkpoint/checkpoint.pb.h"

namespace chunkzero {
namespace checkpoint_testing {

// Reads `dir`/manifest.pb, applies `edit` and writes it back with the
// checksum of the edited manifest. The read and write errors, or
// DataLoss for a manifest that does not parse.
[[nodiscard]] absl::Status EditManifest(
    const std::string& dir,
    const std::function<void(CheckpointManifest&)>& edit);

}  // namespace checkpoint_testing
}  // namespace chunkzero

#endif  // CHUNKZERO_CHECKPOINT_TESTING_EDIT_MANIFEST_H_
