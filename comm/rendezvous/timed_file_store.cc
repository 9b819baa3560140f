#include "comm/rendezvous/timed_file_store.h"

#include "absl/strings/str_cat.h"
#include "comm/rendezvous/store_wait.h"

namespace chunkzero {
namespace comm {

void TimedFileStore::wait(const std::vector<std::string>& keys) {
  wait(keys, kDefaultTimeout);
}

void TimedFileStore::wait(const std::vector<std::string>& keys,
                          const std::chrono::milliseconds& timeout) {
  PollForKeys(keys, timeout, absl::StrCat("rendezvous directory ", basePath_),
              [&] { return check(keys); });
}

}  // namespace comm
}  // namespace chunkzero
