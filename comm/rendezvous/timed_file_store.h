// TimedFileStore: Gloo's FileStore (a rendezvous store in a directory: one
// file per key, for ranks on one machine or a shared filesystem) whose
// waits are timed to the millisecond.
//
//   TimedFileStore store("/tmp/job42");
//   GlooProcessGroup::Create(rank, size, store, options);
//
// Gloo's own wait counts whole seconds, so a wait of 1 ms lasted a second,
// and naming the ranks missing from a rendezvous (a probe of each one's
// key) took a second per missing rank. The constructor throws as Gloo's
// does for a directory it cannot use.
#ifndef CHUNKZERO_COMM_RENDEZVOUS_TIMED_FILE_STORE_H_
#define CHUNKZERO_COMM_RENDEZVOUS_TIMED_FILE_STORE_H_

#include <chrono>
#include <string>
#include <vector>

#include "gloo/rendezvous/file_store.h"

namespace chunkzero {
namespace comm {

class TimedFileStore final : public gloo::rendezvous::FileStore {
 public:
  explicit TimedFileStore(const std::string& path)
      : gloo::rendezvous::FileStore(path) {}

  void wait(const std::vector<std::string>& keys) override;
  // Looks every 10 ms until every key is set; gloo::IoException "rendezvous
  // directory DIR: Wait timeout for key(s): ..." once `timeout` has passed.
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
};

}  // namespace comm
}  // namespace chunkzero

#endif  // CHUNKZERO_COMM_RENDEZVOUS_TIMED_FILE_STORE_H_
