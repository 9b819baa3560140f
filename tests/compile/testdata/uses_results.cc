// Must compile: the same calls as the drops_*.cc files, results used.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/file.h"
#include "comm/process_group.h"
#include "comm/work.h"

absl::Status Use(chunkzero::comm::ProcessGroup& group,
                 std::vector<float>& grads) {
  std::unique_ptr<chunkzero::comm::Work> work =
      group.AllReduce(chunkzero::comm::MutableBuffer::Of(grads), {});
  if (absl::Status s = work->Wait(); !s.ok()) return s;
  if (absl::Status s = chunkzero::comm::AllReduce(
          group, chunkzero::comm::MutableBuffer::Of(grads));
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::string> text =
      chunkzero::ReadFileToString("/etc/hostname");
  return text.status();
}
