#include "comm/net/peer_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/testing/free_port.h"
#include "gloo/rendezvous/hash_store.h"
#include "gloo/rendezvous/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace gloo_internal {
namespace {

using ::testing::HasSubstr;
using Reach = PeerProbe::Reach;

// Opens `n` probes over one store, rank r on hostnames[r].
std::vector<std::unique_ptr<PeerProbe>> OpenAll(
    const std::vector<std::string>& hostnames) {
  gloo::rendezvous::HashStore store;
  const int n = static_cast<int>(hostnames.size());
  std::vector<absl::StatusOr<std::unique_ptr<PeerProbe>>> opened(n);
  std::vector<std::thread> threads;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      opened[r] = PeerProbe::Open(r, n, hostnames[r], store, deadline);
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<std::unique_ptr<PeerProbe>> out;
  for (auto& o : opened) {
    EXPECT_TRUE(o.ok()) << o.status();
    out.push_back(o.ok() ? *std::move(o) : nullptr);
  }
  return out;
}

TEST(PeerProbe, LivePeersAnswer) {
  std::vector<std::unique_ptr<PeerProbe>> probes =
      OpenAll({"127.0.0.1", "127.0.0.1", "127.0.0.1"});
  ASSERT_NE(probes[1], nullptr);
  const std::vector<PeerProbe::Finding> found =
      probes[1]->Probe(absl::Seconds(2));
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].rank, 0);
  EXPECT_EQ(found[1].rank, 2);
  EXPECT_EQ(found[0].reach, Reach::kAnswers);
  EXPECT_EQ(found[1].reach, Reach::kAnswers);
  EXPECT_THAT(found[0].address, testing::StartsWith("127.0.0.1:"));
  EXPECT_EQ(probes[1]->Describe(absl::Seconds(2)),
            "every peer's host answers (so a rank stopped, or the network "
            "between some hosts is down)");
  // Probing again (this rank's queue drained, the peers' grown) still works.
  EXPECT_EQ(probes[0]->Probe(absl::Seconds(2))[1].reach, Reach::kAnswers);
}

TEST(PeerProbe, APeerWhosePortIsClosedIsGone) {
  std::vector<std::unique_ptr<PeerProbe>> probes =
      OpenAll({"127.0.0.1", "127.0.0.1", "127.0.0.1"});
  probes[2].reset();  // Its process exited: the port refuses.
  const std::vector<PeerProbe::Finding> found =
      probes[0]->Probe(absl::Seconds(2));
  EXPECT_EQ(found[0].reach, Reach::kAnswers);
  EXPECT_EQ(found[1].reach, Reach::kRefuses);
  EXPECT_EQ(probes[0]->Describe(absl::Seconds(2)),
            "rank 2's process is gone (127.0.0.1 refuses)");
}

// A port that accepts nothing more: a listener with a full accept queue
// drops new SYNs, so a connect to it gets no answer, as with a lost host.
// Returns "127.0.0.1:port"; the descriptors stay open in `fds`.
std::string SilentAddress(std::vector<int>& fds) {
  int port = 0;
  const int listener = comm_testing::ListeningSocket(&port, /*backlog=*/0);
  EXPECT_GE(listener, 0);
  fds.push_back(listener);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  // Fill the queue (a backlog of 0 holds one connection).
  for (int i = 0; i < 2; ++i) {
    const int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    connect(c, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    fds.push_back(c);
  }
  absl::SleepFor(absl::Milliseconds(50));
  return absl::StrCat("127.0.0.1:", port);
}

TEST(PeerProbe, UnreachableHostsAreGroupedAndNamed) {
  std::vector<int> fds;
  const std::string silent = SilentAddress(fds);
  gloo::rendezvous::HashStore store;
  store.set("chunkzero_gloo_probe_1",
            std::vector<char>(silent.begin(), silent.end()));
  store.set("chunkzero_gloo_probe_2",
            std::vector<char>(silent.begin(), silent.end()));
  absl::StatusOr<std::unique_ptr<PeerProbe>> probe =
      PeerProbe::Open(0, 3, "127.0.0.1", store, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(probe.ok()) << probe.status();
  const absl::Time start = absl::Now();
  EXPECT_EQ((*probe)->Describe(absl::Milliseconds(300)),
            "ranks 1, 2 (127.0.0.1) cannot be reached");
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Seconds(2));
  for (int fd : fds) close(fd);
}

TEST(PeerProbe, APeerWhoseAddressNeverComesTimesOut) {
  gloo::rendezvous::HashStore store;
  absl::StatusOr<std::unique_ptr<PeerProbe>> probe = PeerProbe::Open(
      0, 2, "127.0.0.1", store, absl::Now() + absl::Milliseconds(100));
  ASSERT_EQ(probe.status().code(), absl::StatusCode::kDeadlineExceeded)
      << probe.status();
  EXPECT_THAT(probe.status().message(),
              HasSubstr("exchanging probe addresses"));
}

TEST(PeerProbe, APeerThatCannotBeProbedFromHereIsSaidSo) {
  gloo::rendezvous::HashStore store;
  const std::string bad = "no-such-host.invalid:1";
  store.set("chunkzero_gloo_probe_1",
            std::vector<char>(bad.begin(), bad.end()));
  absl::StatusOr<std::unique_ptr<PeerProbe>> probe =
      PeerProbe::Open(0, 2, "127.0.0.1", store, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_EQ((*probe)->Describe(absl::Milliseconds(100)),
            "rank 1 (no-such-host.invalid) could not be probed from here");
}

TEST(PeerProbe, AnAddressThatIsNotThisHostsIsUnavailable) {
  gloo::rendezvous::HashStore store;
  absl::StatusOr<std::unique_ptr<PeerProbe>> probe =
      PeerProbe::Open(0, 1, "192.0.2.1", store, absl::Now() + absl::Seconds(1));
  ASSERT_EQ(probe.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(probe.status().message(), HasSubstr("probe port on 192.0.2.1"));
}

}  // namespace
}  // namespace gloo_internal
}  // namespace comm
}  // namespace chunkzero
