#include "comm/rendezvous/timed_redis_store.h"

#include <sys/resource.h>

#include <cstdint>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/testing/redis_server.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace {

using comm_testing::FakeRedisServer;

// The peak of this process's address space (VmPeak), in bytes; -1 if
// /proc cannot tell.
int64_t PeakAddressSpace() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    int64_t kib = 0;
    if (absl::ConsumePrefix(&rest, "VmPeak:") &&
        absl::ConsumeSuffix(&rest, "kB") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &kib)) {
      return kib << 10;
    }
  }
  return -1;
}

// The peak resident memory of this process so far, in bytes.
int64_t PeakResident() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t{usage.ru_maxrss} << 10;
}

std::string Repeat(absl::string_view s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) absl::StrAppend(&out, s);
  return out;
}

// Replies no Redis server sends (or something else answering on its port):
// each fails the command at once, naming the server and the command, and
// without the memory or the time the reply asks for.
TEST(TimedRedisStore, RefusesHostileRepliesAtOnce) {
  struct Case {
    const char* name;
    FakeRedisServer::Answer answer;
    std::string want;  // After "redis://127.0.0.1:PORT: ".
  };
  const std::string malformed =
      "the server's reply to SET 'k' is malformed or too large: ";
  const Case cases[] = {
      {"an array of a billion elements",
       {"*1000000000\r\n"},
       malformed + "its arrays hold 1000000000 elements (at most 1048576 in a "
                   "reply)"},
      {"nested arrays that add up past the limit",
       {"*1000000\r\n*100000\r\n"},
       malformed +
           "its arrays hold 1100000 elements (at most 1048576 in a reply)"},
      {"a string of 2 GB, sent as fast as loopback goes",
       {"$2000000000\r\n", /*filler_bytes=*/80 << 20},
       malformed + "more than 67108864 bytes (the most a reply may hold)"},
      {"not Redis at all",
       {"HTTP/1.1 400 Bad Request\r\n\r\n"},
       malformed + "Protocol error, got \"H\" as reply type byte"},
      {"arrays nested 9 deep",
       {Repeat("*1\r\n", 9)},
       malformed + "No support for nested multi bulk replies with depth > 7"},
      {"two replies to one request",
       {"+OK\r\n+OK\r\n"},
       malformed + "more than one reply"},
      {"a connection closed before any answer",
       {"", 0, /*close=*/true},
       "the server closed the connection before answering SET 'k'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<std::unique_ptr<FakeRedisServer>> fake =
        FakeRedisServer::Start({c.answer});
    ASSERT_TRUE(fake.ok()) << fake.status();
    const int64_t space_before = PeakAddressSpace();
    const int64_t resident_before = PeakResident();
    const absl::Time start = absl::Now();
    std::string what;
    {
      absl::StatusOr<std::unique_ptr<TimedRedisStore>> store =
          TimedRedisStore::Connect("127.0.0.1", (*fake)->port(),
                                   absl::Seconds(10));
      ASSERT_TRUE(store.ok()) << store.status();
      try {
        (*store)->set("k", {'v'});
      } catch (const std::exception& e) {
        what = e.what();
      }
    }
    // Freeing the store is included: Gloo's hiredis freed a billion-element
    // array one pointer at a time, for seconds.
    const absl::Duration took = absl::Now() - start;
    EXPECT_EQ(what, absl::StrCat("redis://127.0.0.1:", (*fake)->port(), ": ",
                                 c.want));
    // Well inside the 10 s timeout: the reply is refused, not waited out.
    EXPECT_LT(took, absl::Seconds(5));
#ifndef CHUNKZERO_SANITIZER_BUILD
    // (AddressSanitizer keeps freed buffers in quarantine and maps shadow
    // memory, so the figures only mean this in ordinary builds.)
    if (space_before > 0) {
      EXPECT_LT(PeakAddressSpace() - space_before, int64_t{1} << 30);
    }
    EXPECT_LT(PeakResident() - resident_before, int64_t{256} << 20);
#else
    static_cast<void>(space_before);
    static_cast<void>(resident_before);
#endif
  }
}

// What set() and get() make of replies a server may send but that are not
// what they asked for. Each names the server and the key.
TEST(TimedRedisStore, NamesTheServerForRepliesItCannotUse) {
  using Answer = FakeRedisServer::Answer;
  struct Case {
    const char* name;
    std::vector<Answer> answers;
    bool get;          // get("k") (EXISTS, then GET), else set("k", "v").
    std::string want;  // After "redis://127.0.0.1:PORT: ".
  };
  const Case cases[] = {
      {"an error reply",
       {{"-NOAUTH Authentication required.\r\n"}},
       false,
       "SET 'k': the server answered: NOAUTH Authentication required."},
      {"an integer to SET",
       {{":5\r\n"}},
       false,
       "unexpected reply to SET 'k': the integer 5"},
      {"a key already set, with no expiry",
       {{"$-1\r\n"}, {":-1\r\n"}},
       false,
       "key 'k' already set; it does not expire"},
      {"a key already set, expiring soon",
       {{"$-1\r\n"}, {":400\r\n"}},
       false,
       "key 'k' already set; it expires within a second"},
      {"a key already set, and PTTL not answered",
       {{"$-1\r\n"}, {"-ERR unknown command\r\n"}},
       false,
       "key 'k' already set"},
      {"a key gone between EXISTS and GET",
       {{":1\r\n"}, {"$-1\r\n"}},
       true,
       "key 'k' vanished after it was set"},
      {"an array to GET",
       {{":1\r\n"}, {"*0\r\n"}},
       true,
       "unexpected reply to GET 'k': an array of 0 elements"},
      {"a string to EXISTS",
       {{"$1\r\n1\r\n"}},
       true,
       "unexpected reply to EXISTS 'k': a string of 1 bytes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<std::unique_ptr<FakeRedisServer>> fake =
        FakeRedisServer::Start(c.answers);
    ASSERT_TRUE(fake.ok()) << fake.status();
    absl::StatusOr<std::unique_ptr<TimedRedisStore>> store =
        TimedRedisStore::Connect("127.0.0.1", (*fake)->port(),
                                 absl::Seconds(10));
    ASSERT_TRUE(store.ok()) << store.status();
    std::string what;
    try {
      if (c.get) {
        (*store)->get("k");
      } else {
        (*store)->set("k", {'v'});
      }
    } catch (const std::exception& e) {
      what = e.what();
    }
    EXPECT_EQ(what, absl::StrCat("redis://127.0.0.1:", (*fake)->port(), ": ",
                                 c.want));
  }
}

// A reply in the protocol keeps the connection in step: the next command
// goes out on it.
TEST(TimedRedisStore, AnErrorReplyKeepsTheConnection) {
  absl::StatusOr<std::unique_ptr<FakeRedisServer>> fake =
      FakeRedisServer::Start({{"-LOADING Redis is loading\r\n"}, {"+OK\r\n"}});
  ASSERT_TRUE(fake.ok()) << fake.status();
  absl::StatusOr<std::unique_ptr<TimedRedisStore>> store =
      TimedRedisStore::Connect("127.0.0.1", (*fake)->port(), absl::Seconds(10),
                               "job");
  ASSERT_TRUE(store.ok()) << store.status();
  std::string what;
  try {
    (*store)->set("k", {'v'});
  } catch (const std::exception& e) {
    what = e.what();
  }
  EXPECT_EQ(what, absl::StrCat("redis://127.0.0.1:", (*fake)->port(),
                               "/job: SET 'job/k': the server answered: "
                               "LOADING Redis is loading"));
  (*store)->set("k", {'v'});
  EXPECT_EQ((*fake)->requests(), 2);
}

// A value whose GET could not be read back is refused before it is sent.
TEST(TimedRedisStore, RefusesAValueOverTheLimit) {
  absl::StatusOr<std::unique_ptr<FakeRedisServer>> fake =
      FakeRedisServer::Start({{"+OK\r\n"}});
  ASSERT_TRUE(fake.ok()) << fake.status();
  absl::StatusOr<std::unique_ptr<TimedRedisStore>> store =
      TimedRedisStore::Connect("127.0.0.1", (*fake)->port(), absl::Seconds(10),
                               "job");
  ASSERT_TRUE(store.ok()) << store.status();
  // "job/k" is 5 bytes.
  const std::vector<char> value(TimedRedisStore::kMaxValueBytes - 4, 'v');
  std::string what;
  try {
    (*store)->set("k", value);
  } catch (const std::exception& e) {
    what = e.what();
  }
  EXPECT_EQ(what, absl::StrCat("redis://127.0.0.1:", (*fake)->port(),
                               "/job: a value of ", value.size(),
                               " bytes for key 'job/k' is over the "
                               "store's limit of ",
                               TimedRedisStore::kMaxValueBytes, " bytes"));
  EXPECT_EQ((*fake)->requests(), 0);
}

TEST(TimedRedisStore, KeysLiveTenTimeoutsAndAtLeastAnHour) {
  EXPECT_EQ(TimedRedisStore::KeyLifetime(absl::Seconds(300)), absl::Hours(1));
  EXPECT_EQ(TimedRedisStore::KeyLifetime(absl::Seconds(1000)),
            absl::Seconds(10000));
  EXPECT_EQ(TimedRedisStore::KeyLifetime(absl::Hours(1)), absl::Hours(10));
  EXPECT_EQ(TimedRedisStore::KeyLifetime(absl::InfiniteDuration()),
            absl::Hours(24 * 365));
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
