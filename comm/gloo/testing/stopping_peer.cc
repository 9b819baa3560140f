// A Gloo rank that stops itself (SIGSTOP) in the middle of connecting: it
// joins the rendezvous in DIR, creates its pairs and publishes their
// addresses, then stops before dialing any, holding its sockets open and
// never answering.
//
//   stopping_peer RANK SIZE DIR
//
// For tests of how long a rank waits on such a peer; the test kills it.
#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/time.h"
#include "comm/gloo/gloo_process_group.h"
#include "gloo/rendezvous/file_store.h"

namespace {

// Stops the process once the second key is set: the first is the rank's
// join key, the second the address of its pairs (Gloo's connectFullMesh).
class StopAfterTheAddress final : public gloo::rendezvous::Store {
 public:
  explicit StopAfterTheAddress(gloo::rendezvous::Store& base) : base_(base) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    base_.set(key, data);
    if (++sets_ == 2) raise(SIGSTOP);
  }
  std::vector<char> get(const std::string& key) override {
    return base_.get(key);
  }
  void wait(const std::vector<std::string>& keys) override { base_.wait(keys); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    base_.wait(keys, timeout);
  }

 private:
  gloo::rendezvous::Store& base_;
  int sets_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int rank = 0, size = 0;
  if (argc != 4 || !absl::SimpleAtoi(argv[1], &rank) ||
      !absl::SimpleAtoi(argv[2], &size)) {
    std::fprintf(stderr, "usage: %s RANK SIZE DIR\n", argv[0]);
    return 2;
  }
  gloo::rendezvous::FileStore files(argv[3]);
  StopAfterTheAddress store(files);
  chunkzero::comm::GlooOptions options;
  options.timeout = absl::Seconds(60);
  auto group =
      chunkzero::comm::GlooProcessGroup::Create(rank, size, store, options);
  std::fprintf(stderr, "stopping_peer: %s\n",
               group.ok() ? "connected" : group.status().ToString().c_str());
  return group.ok() ? 0 : 1;
}
