#include "comm/rendezvous/tcp_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/gloo/gloo_process_group.h"
#include "comm/rendezvous/tcp_store_server.h"
#include "comm/rendezvous/tcp_store_wire.h"
#include "comm/testing/free_port.h"
#include "gloo/common/error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<TcpStoreServer> StartServer() {
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server =
      TcpStoreServer::Start(0);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

std::unique_ptr<TcpStore> ConnectTo(
    int port, absl::Duration timeout = absl::Seconds(10)) {
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::Connect("127.0.0.1", port, timeout);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

std::vector<char> Bytes(absl::string_view s) {
  return std::vector<char>(s.begin(), s.end());
}

// The exception text a store call throws, or "" if it returns.
template <typename Fn>
std::string ThrownBy(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(TcpStore, ClientsShareTheServersKeys) {
  std::unique_ptr<TcpStoreServer> server = StartServer();
  ASSERT_NE(server, nullptr);
  EXPECT_GT(server->port(), 0);
  std::unique_ptr<TcpStore> a = ConnectTo(server->port());
  std::unique_ptr<TcpStore> b = ConnectTo(server->port());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const std::string binary("x\0y", 3);
  a->set("k1", Bytes(binary));
  b->set("k2", Bytes(""));
  EXPECT_EQ(b->get("k1"), Bytes(binary));
  EXPECT_EQ(a->get("k2"), Bytes(""));
  a->wait({"k1", "k2"}, std::chrono::milliseconds(1));
}

TEST(TcpStore, ASecondSetOfAKeyIsRefusedAndTheFirstValueKept) {
  std::unique_ptr<TcpStoreServer> server = StartServer();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<TcpStore> a = ConnectTo(server->port());
  std::unique_ptr<TcpStore> b = ConnectTo(server->port());
  a->set("rank_0", Bytes("first"));
  EXPECT_THAT(ThrownBy([&] { b->set("rank_0", Bytes("second")); }),
              HasSubstr("key 'rank_0' already set"));
  EXPECT_EQ(b->get("rank_0"), Bytes("first"));
}

TEST(TcpStore, AValueOverTheLimitIsRefusedBeforeItIsSent) {
  std::unique_ptr<TcpStoreServer> server = StartServer();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<TcpStore> a = ConnectTo(server->port());
  const std::vector<char> huge(tcp_store_wire::kMaxBodyBytes, 'x');
  EXPECT_THAT(ThrownBy([&] { a->set("big", huge); }),
              HasSubstr("is over the store's limit of 16777216"));
  // Nothing was sent: the connection is still in step.
  a->set("small", Bytes("v"));
  EXPECT_EQ(a->get("small"), Bytes("v"));
}

TEST(TcpStore, GetWaitsForAKeySetLater) {
  std::unique_ptr<TcpStoreServer> server = StartServer();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<TcpStore> a = ConnectTo(server->port());
  std::unique_ptr<TcpStore> b = ConnectTo(server->port());
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    b->set("late", Bytes("v"));
  });
  EXPECT_EQ(a->get("late"), Bytes("v"));
  setter.join();
}

TEST(TcpStore, WaitGivesUpAtItsTimeoutNamingTheKeys) {
  std::unique_ptr<TcpStoreServer> server = StartServer();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<TcpStore> a = ConnectTo(server->port());
  a->set("here", Bytes("v"));
  const absl::Time start = absl::Now();
  const std::string what = ThrownBy([&] {
    a->wait({"here", "never"}, std::chrono::milliseconds(200));
  });
  const absl::Duration took = absl::Now() - start;
  EXPECT_THAT(what, HasSubstr("Wait timeout for key(s): here, never"));
  EXPECT_GE(took, absl::Milliseconds(200));
  EXPECT_LT(took, absl::Seconds(2));
}

TEST(TcpStore, ConnectWaitsForAServerThatStartsLater) {
  // Take a free port, then give it to a server 300 ms from now.
  std::unique_ptr<TcpStoreServer> probe = StartServer();
  ASSERT_NE(probe, nullptr);
  const int port = probe->port();
  probe.reset();
  std::unique_ptr<TcpStoreServer> server;
  std::thread starter([&] {
    absl::SleepFor(absl::Milliseconds(300));
    absl::StatusOr<std::unique_ptr<TcpStoreServer>> started =
        TcpStoreServer::Start(port);
    if (started.ok()) server = *std::move(started);
  });
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::Connect("localhost", port, absl::Seconds(10));
  starter.join();
  ASSERT_NE(server, nullptr) << "port " << port << " was taken meanwhile";
  ASSERT_TRUE(store.ok()) << store.status();
  (*store)->set("k", Bytes("v"));
  EXPECT_EQ((*store)->get("k"), Bytes("v"));
}

TEST(TcpStore, ConnectWithNoServerFailsAtTheDeadlineNamingTheAddress) {
  std::unique_ptr<TcpStoreServer> probe = StartServer();
  ASSERT_NE(probe, nullptr);
  const int port = probe->port();
  probe.reset();
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::Connect("127.0.0.1", port, absl::Milliseconds(300));
  const absl::Duration took = absl::Now() - start;
  ASSERT_EQ(store.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(store.status().message(),
              HasSubstr(absl::StrCat("tcp://127.0.0.1:", port,
                                     ": no server answered within 300ms")));
  EXPECT_THAT(store.status().message(), HasSubstr("Connection refused"));
  EXPECT_LT(took, absl::Seconds(2));
}

TEST(TcpStore, ConnectRefusesBadArguments) {
  EXPECT_EQ(TcpStore::Connect("127.0.0.1", 0, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      TcpStore::Connect("127.0.0.1", 70000, absl::Seconds(1)).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      TcpStore::Connect("127.0.0.1", 1, absl::ZeroDuration()).status().code(),
      absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<TcpStore>> unresolvable =
      TcpStore::Connect("no-such-host.invalid", 29500, absl::Seconds(1));
  ASSERT_EQ(unresolvable.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(unresolvable.status().message(),
              HasSubstr("cannot resolve no-such-host.invalid"));
}

TEST(TcpStoreServer, APortInUseIsNamed) {
  std::unique_ptr<TcpStoreServer> first = StartServer();
  ASSERT_NE(first, nullptr);
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> second =
      TcpStoreServer::Start(first->port());
  ASSERT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("cannot listen on port ", first->port(),
                                     ": Address already in use")));
  EXPECT_EQ(TcpStoreServer::Start(-1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TcpStoreServer::Start(65536).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TcpStore, AServerThatGoesAwayFailsTheNextCall) {
  std::unique_ptr<TcpStoreServer> server = StartServer();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<TcpStore> a = ConnectTo(server->port());
  a->set("k", Bytes("v"));
  server.reset();
  EXPECT_THAT(ThrownBy([&] { a->get("k"); }),
              HasSubstr("the server closed the connection"));
  // The connection stays unusable, saying why.
  EXPECT_THAT(ThrownBy([&] { a->set("j", Bytes("v")); }),
              HasSubstr("unusable after: the server closed the connection"));
}

TEST(TcpStore, AServerThatStopsAnsweringTimesOut) {
  // A socket that accepts connections (the kernel does) but never reads.
  int port = 0;
  const int fd = comm_testing::ListeningSocket(&port);
  ASSERT_GE(fd, 0);
  std::unique_ptr<TcpStore> a = ConnectTo(port, absl::Milliseconds(300));
  ASSERT_NE(a, nullptr);
  const absl::Time start = absl::Now();
  EXPECT_THAT(ThrownBy([&] { a->set("k", Bytes("v")); }),
              HasSubstr("waiting for an answer: timed out after 300ms"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  close(fd);
}

// A connected loopback socket to `port` whose reads give up after 5 s.
int RawConnect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
            0);
  const timeval five_seconds = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &five_seconds, sizeof(five_seconds));
  return fd;
}

// Sends raw bytes and returns the server's answer frame.
tcp_store_wire::Frame RawExchange(int port, const std::string& bytes) {
  const int fd = RawConnect(port);
  EXPECT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
  std::string in;
  char buffer[4096];
  ssize_t n;
  // The server hangs up after a bad request: read to the end.
  while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) in.append(buffer, n);
  close(fd);
  tcp_store_wire::Frame frame;
  if (in.size() < tcp_store_wire::kLengthBytes) return frame;
  absl::StatusOr<tcp_store_wire::Frame> decoded =
      tcp_store_wire::DecodeBody(in.substr(tcp_store_wire::kLengthBytes));
  return decoded.ok() ? *decoded : frame;
}

TEST(TcpStoreServer, AnswersMalformedRequestsAndHangsUpOnlyOnThem) {
  std::unique_ptr<TcpStoreServer> server = StartServer();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<TcpStore> good = ConnectTo(server->port());
  good->set("k", Bytes("v"));
  struct Case {
    std::string bytes;
    const char* message;
  };
  const Case cases[] = {
      {tcp_store_wire::EncodeFrame(99, {}), "unknown request code 99"},
      {tcp_store_wire::EncodeFrame(tcp_store_wire::kSet, {"only-key"}),
       "set takes a key and a value, got 1 parts"},
      {tcp_store_wire::EncodeFrame(tcp_store_wire::kGet, {}),
       "get takes one key, got 0 parts"},
      {std::string("\xff\xff\xff\xff", 4), "longer than the 16777216 allowed"},
      {std::string("\x05\x00\x00\x00\x01\x09\x00\x00\x00", 9),
       "announces 9 parts in 0 bytes"},
  };
  for (const Case& c : cases) {
    tcp_store_wire::Frame answer = RawExchange(server->port(), c.bytes);
    EXPECT_EQ(answer.code, tcp_store_wire::kBadRequest) << c.message;
    ASSERT_EQ(answer.parts.size(), 1u) << c.message;
    EXPECT_THAT(answer.parts[0], HasSubstr(c.message));
  }
  // The well-behaved client is still served.
  EXPECT_EQ(good->get("k"), Bytes("v"));
}

TEST(TcpStoreServer, RefusesASetPastItsLimit) {
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server =
      TcpStoreServer::Start(0, /*max_held_bytes=*/1000);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<TcpStore> good = ConnectTo((*server)->port());
  good->set("a", std::vector<char>(599, 'x'));  // 600 bytes with the key.
  tcp_store_wire::Frame answer =
      RawExchange((*server)->port(),
                  tcp_store_wire::EncodeFrame(tcp_store_wire::kSet,
                                              {"b", std::string(599, 'y')}));
  EXPECT_EQ(answer.code, tcp_store_wire::kBadRequest);
  ASSERT_EQ(answer.parts.size(), 1u);
  EXPECT_EQ(answer.parts[0],
            "the store holds 600 bytes; 600 more would pass its limit of "
            "1000");
  // What fits still does, and the first value is whole.
  good->set("c", std::vector<char>(399, 'z'));
  EXPECT_EQ(good->get("a"), std::vector<char>(599, 'x'));
}

// Half-sent requests past the limit: the connection holding the most is
// closed, the others served.
TEST(TcpStoreServer, ClosesTheConnectionHoldingTheMostPastItsLimit) {
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server =
      TcpStoreServer::Start(0, /*max_held_bytes=*/64 << 10);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string frame = tcp_store_wire::EncodeFrame(
      tcp_store_wire::kSet, {"k", std::string(60 << 10, 'x')});
  const int small = RawConnect((*server)->port());
  ASSERT_EQ(send(small, frame.data(), 30 << 10, MSG_NOSIGNAL), 30 << 10);
  // Served before the big one arrives: the small one alone fits.
  std::unique_ptr<TcpStore> good = ConnectTo((*server)->port());
  good->set("before", Bytes("1"));
  const int big = RawConnect((*server)->port());
  ASSERT_EQ(send(big, frame.data(), 40 << 10, MSG_NOSIGNAL), 40 << 10);
  char byte = 0;
  EXPECT_EQ(recv(big, &byte, 1, 0), 0) << "the big one was not closed";
  EXPECT_EQ(recv(small, &byte, 1, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN) << "the small one was closed too";
  good->set("after", Bytes("2"));
  EXPECT_EQ(good->get("before"), Bytes("1"));
  close(big);
  close(small);
}

TEST(TcpStore, CarriesAGlooRendezvous) {
  std::unique_ptr<TcpStoreServer> server = StartServer();
  ASSERT_NE(server, nullptr);
  constexpr int kRanks = 3;
  std::vector<absl::Status> statuses(kRanks);
  std::vector<std::vector<float>> data(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<TcpStore>> store =
          TcpStore::Connect("127.0.0.1", server->port(), absl::Seconds(20));
      if (!store.ok()) {
        statuses[r] = store.status();
        return;
      }
      GlooOptions options;
      options.timeout = absl::Seconds(20);
      absl::StatusOr<std::unique_ptr<GlooProcessGroup>> group =
          GlooProcessGroup::Create(r, kRanks, **store, options);
      if (!group.ok()) {
        statuses[r] = group.status();
        return;
      }
      data[r] = {float(r + 1), float(10 * (r + 1))};
      statuses[r] = AllReduce(**group, MutableBuffer::Of(data[r]));
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    EXPECT_EQ(data[r], (std::vector<float>{6, 60}));
  }
}

TEST(TcpStore, AStoreHoldingAnEarlierJobsKeysIsRefusedByTheRendezvous) {
  std::unique_ptr<TcpStoreServer> server = StartServer();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<TcpStore> earlier = ConnectTo(server->port());
  std::unique_ptr<TcpStore> later = ConnectTo(server->port());
  GlooOptions options;
  options.timeout = absl::Seconds(10);
  absl::StatusOr<std::unique_ptr<GlooProcessGroup>> first =
      GlooProcessGroup::Create(0, 1, *earlier, options);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<GlooProcessGroup>> second =
      GlooProcessGroup::Create(0, 1, *later, options);
  ASSERT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("already set"));
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
