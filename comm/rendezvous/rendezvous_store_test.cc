#include "comm/rendezvous/rendezvous_store.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/gloo/gloo_process_group.h"
#include "comm/rendezvous/timed_redis_store.h"
#include "comm/testing/free_port.h"
#include "comm/testing/redis_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace comm {
namespace {

using ::testing::HasSubstr;
using Kind = RendezvousAddress::Kind;

TEST(ParseRendezvousAddress, ReadsEachForm) {
  struct Case {
    const char* text;
    Kind kind;
    const char* directory;
    const char* host;
    int port;
    const char* prefix;
    const char* round_trip;
  };
  const Case cases[] = {
      {"/tmp/job", Kind::kDirectory, "/tmp/job", "", 0, "", "/tmp/job"},
      {"rel/dir", Kind::kDirectory, "rel/dir", "", 0, "", "rel/dir"},
      {"redis://10.0.0.1:6380/job42", Kind::kRedis, "", "10.0.0.1", 6380,
       "job42", "redis://10.0.0.1:6380/job42"},
      {"redis://node0/a/b", Kind::kRedis, "", "node0", 6379, "a/b",
       "redis://node0:6379/a/b"},
      {"redis://[::1]:7000/j", Kind::kRedis, "", "::1", 7000, "j",
       "redis://[::1]:7000/j"},
      {"tcp://node0:29500", Kind::kTcp, "", "node0", 29500, "",
       "tcp://node0:29500"},
      {"tcp://[fe80::1]:1", Kind::kTcp, "", "fe80::1", 1, "",
       "tcp://[fe80::1]:1"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<RendezvousAddress> a = ParseRendezvousAddress(c.text);
    ASSERT_TRUE(a.ok()) << c.text << ": " << a.status();
    EXPECT_EQ(a->kind, c.kind) << c.text;
    EXPECT_EQ(a->directory, c.directory) << c.text;
    EXPECT_EQ(a->host, c.host) << c.text;
    EXPECT_EQ(a->port, c.port) << c.text;
    EXPECT_EQ(a->prefix, c.prefix) << c.text;
    EXPECT_EQ(a->ToString(), c.round_trip) << c.text;
    EXPECT_EQ(a->IsNetworked(), c.kind != Kind::kDirectory) << c.text;
  }
}

TEST(ParseRendezvousAddress, RefusesWhatItCannotUse) {
  struct Case {
    const char* text;
    const char* why;
  };
  const Case cases[] = {
      {"", "empty"},
      {"redis://host:6379", "no job prefix"},
      {"redis://host:6379/", "no job prefix"},
      {"redis://:6379/job", "no host"},
      {"redis://host:0/job", "port \"0\" is not in [1, 65535]"},
      {"redis://host:65536/job", "port \"65536\" is not in [1, 65535]"},
      {"redis://host:-5/job", "port \"-5\" is not in [1, 65535]"},
      {"redis://host:http/job", "port \"http\" is not in [1, 65535]"},
      {"redis://host/job 1", "space or control character"},
      {"tcp://node0", "no port (HOST:PORT)"},
      {"tcp://node0:29500/x", "with no path"},
      {"tcp://::1:29500", "write an IPv6 host in brackets"},
      {"tcp://[::1:29500", "has no ']'"},
      {"tcp://[::1]x", "after ']' comes ':PORT'"},
      {"http://node0:80", "unknown scheme \"http\""},
      {"redis:127.0.0.1:6379/x", "write redis://HOST:PORT/PREFIX"},
      {"Redis:/h:1/x", "write redis://HOST:PORT/PREFIX"},
      {"tcp:/127.0.0.1:29650", "write tcp://HOST:PORT"},
      {" ", "blank"},
      {"/", "the root directory"},
      {"//", "the root directory"},
      {"/./", "the root directory"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<RendezvousAddress> a = ParseRendezvousAddress(c.text);
    ASSERT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(a.status().message(), HasSubstr(c.why)) << c.text;
    EXPECT_THAT(a.status().message(),
                HasSubstr(absl::StrCat("\"", c.text, "\"")));
  }
}

// Runs `ranks` Gloo ranks, each opening `address` itself, through one
// all-reduce and a barrier, after which each deletes the store keys it set
// (unless `keys` is kLeftBehind); returns each rank's status.
enum class Keys { kDeleted, kLeftBehind };

std::vector<absl::Status> AllReduceThrough(const std::string& address,
                                           int ranks,
                                           Keys keys = Keys::kDeleted) {
  std::vector<absl::Status> statuses(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<RendezvousAddress> parsed =
          ParseRendezvousAddress(address);
      if (!parsed.ok()) {
        statuses[r] = parsed.status();
        return;
      }
      absl::StatusOr<std::unique_ptr<RendezvousStore>> store =
          RendezvousStore::Open(*parsed, r, absl::Seconds(20));
      if (!store.ok()) {
        statuses[r] = store.status();
        return;
      }
      GlooOptions options;
      options.timeout = absl::Seconds(20);
      absl::StatusOr<std::unique_ptr<GlooProcessGroup>> group =
          GlooProcessGroup::Create(r, ranks, (*store)->store(), options);
      if (!group.ok()) {
        statuses[r] = group.status();
        return;
      }
      std::vector<float> x = {float(r + 1)};
      statuses[r] = AllReduce(**group, MutableBuffer::Of(x));
      if (statuses[r].ok() && x[0] != ranks * (ranks + 1) / 2) {
        statuses[r] = absl::InternalError(absl::StrCat("sum ", x[0]));
      }
      // Every rank holds its store until all have reduced (rank 0's tcp://
      // server must outlive the others' rendezvous), and deletes its keys
      // only then, as the train job does. kLeftBehind: as a job killed
      // before that.
      statuses[r].Update(Barrier(**group));
      if (statuses[r].ok() && keys == Keys::kDeleted) {
        statuses[r] = (*store)->DeleteKeysItSet();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return statuses;
}

TEST(RendezvousStore, ADirectoryMeetsThreeRanks) {
  const std::string dir =
      absl::StrCat(testing::TempDir(), "/rendezvous_dir_", getpid());
  std::filesystem::remove_all(dir);
  for (const absl::Status& s : AllReduceThrough(dir, 3)) {
    EXPECT_TRUE(s.ok()) << s;
  }
}

using comm_testing::FreeLoopbackPort;

TEST(RendezvousStore, RankZeroHostsTheTcpStore) {
  const std::string address =
      absl::StrCat("tcp://127.0.0.1:", FreeLoopbackPort());
  for (const absl::Status& s : AllReduceThrough(address, 3)) {
    EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(RendezvousStore, TcpErrorsNameTheAddress) {
  const int port = FreeLoopbackPort();
  absl::StatusOr<std::unique_ptr<RendezvousStore>> host = RendezvousStore::Open(
      {Kind::kTcp, "", "127.0.0.1", port, ""}, 0, absl::Seconds(5));
  ASSERT_TRUE(host.ok()) << host.status();
  // A second rank 0 on the same port.
  absl::StatusOr<std::unique_ptr<RendezvousStore>> twice =
      RendezvousStore::Open({Kind::kTcp, "", "127.0.0.1", port, ""}, 0,
                            absl::Seconds(5));
  ASSERT_EQ(twice.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(twice.status().message(),
              HasSubstr(absl::StrCat("rank 0 hosts tcp://127.0.0.1:", port,
                                     ": rendezvous store: cannot listen on "
                                     "port ",
                                     port, ": Address already in use")));
  // A rank whose rank 0 never comes.
  const int nobody = FreeLoopbackPort();
  absl::StatusOr<std::unique_ptr<RendezvousStore>> lonely =
      RendezvousStore::Open({Kind::kTcp, "", "127.0.0.1", nobody, ""}, 2,
                            absl::Milliseconds(300));
  ASSERT_EQ(lonely.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(lonely.status().message(),
              HasSubstr(absl::StrCat("tcp://127.0.0.1:", nobody,
                                     ": no server answered within 300ms")));
}

TEST(RendezvousStore, ADirectoryThatCannotBeMadeIsNamed) {
  const std::string file =
      absl::StrCat(testing::TempDir(), "/rendezvous_file_", getpid());
  FILE* f = fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  absl::StatusOr<std::unique_ptr<RendezvousStore>> store =
      RendezvousStore::Open({Kind::kDirectory, file + "/sub", "", 0, ""}, 0,
                            absl::Seconds(1));
  ASSERT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(store.status().message(),
              HasSubstr(absl::StrCat("rendezvous directory ", file, "/sub")));
}

// The Redis tests need Debian's redis-server (tools/packages.txt).
class RedisRendezvous : public testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<comm_testing::RedisServer>> server =
        comm_testing::RedisServer::Start();
    if (absl::IsNotFound(server.status())) GTEST_SKIP() << server.status();
    ASSERT_TRUE(server.ok()) << server.status();
    redis_ = *std::move(server);
  }
  std::string Address(absl::string_view prefix) const {
    return absl::StrCat("redis://127.0.0.1:", redis_->port(), "/", prefix);
  }

  std::unique_ptr<comm_testing::RedisServer> redis_;
};

TEST_F(RedisRendezvous, JobsMeetUnderTheirOwnPrefixes) {
  for (const absl::Status& s : AllReduceThrough(Address("job1"), 3)) {
    EXPECT_TRUE(s.ok()) << s;
  }
  // Another job on the same server, under its own prefix.
  for (const absl::Status& s : AllReduceThrough(Address("job2"), 2)) {
    EXPECT_TRUE(s.ok()) << s;
  }
}

TEST_F(RedisRendezvous, AJobLeavesNoKeysAndItsPrefixServesTheNext) {
  for (int job = 0; job < 2; ++job) {
    for (const absl::Status& s : AllReduceThrough(Address("reused"), 2)) {
      ASSERT_TRUE(s.ok()) << "job " << job << ": " << s;
    }
    EXPECT_EQ(redis_->KeyCount(), 0) << "job " << job;
  }
}

TEST_F(RedisRendezvous, AKilledJobsKeysMakeItsPrefixRefusedUntilTheyExpire) {
  for (const absl::Status& s :
       AllReduceThrough(Address("killed"), 2, Keys::kLeftBehind)) {
    ASSERT_TRUE(s.ok()) << s;
  }
  EXPECT_GT(redis_->KeyCount(), 0);
  // Every key lives an hour (ten timeouts, at least an hour) at most.
  const int64_t ms =
      redis_->MillisecondsToLive("killed/chunkzero_gloo_joined_0");
  EXPECT_GT(ms, absl::ToInt64Milliseconds(absl::Minutes(59))) << ms;
  EXPECT_LE(ms, absl::ToInt64Milliseconds(absl::Hours(1))) << ms;
  const std::vector<absl::Status> statuses =
      AllReduceThrough(Address("killed"), 2);
  for (int r = 0; r < 2; ++r) {
    const absl::Status& s = statuses[r];
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(s.message(), HasSubstr("already holds this rank's key"));
    // The key, the store and when the prefix is free again.
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(
                                 "redis://127.0.0.1:", redis_->port(),
                                 "/killed: key 'killed/chunkzero_gloo_"
                                 "joined_",
                                 r, "' already set; it expires in 59m5")));
  }
}

TEST_F(RedisRendezvous, DeletingKeysFromAStoppedServerTimesOut) {
  absl::StatusOr<std::unique_ptr<RendezvousStore>> store =
      RendezvousStore::Open(
          {Kind::kRedis, "", "127.0.0.1", redis_->port(), "job"}, 0,
          absl::Milliseconds(300));
  ASSERT_TRUE(store.ok()) << store.status();
  (*store)->store().set("a", {'1'});
  (*store)->store().set("b", {'2'});
  redis_->Pause();
  const absl::Status s = (*store)->DeleteKeysItSet();
  redis_->Resume();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_EQ(s.message(),
            absl::StrCat("cannot delete the 2 rendezvous key(s) this rank set "
                         "from redis://127.0.0.1:",
                         redis_->port(),
                         "/job: timed out: the server did not answer DEL "
                         "'job/a', 'job/b' within 300ms (is it stopped or "
                         "overloaded?)"));
}

TEST_F(RedisRendezvous, AServerThatCannotBeReachedIsNamed) {
  const int port = FreeLoopbackPort();
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<RendezvousStore>> store =
      RendezvousStore::Open({Kind::kRedis, "", "127.0.0.1", port, "job"}, 0,
                            absl::Milliseconds(300));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  ASSERT_EQ(store.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(store.status().message(),
              HasSubstr(absl::StrCat(
                  "cannot reach the rendezvous store redis://127.0.0.1:", port,
                  "/job within 300ms")));
}

// Another host's launcher may start the server after this rank.
TEST(RedisRendezvousStart, WaitsForAServerThatStartsLater) {
  const int port = FreeLoopbackPort();
  absl::StatusOr<std::unique_ptr<comm_testing::RedisServer>> redis =
      absl::UnknownError("not started");
  std::thread server([&] {
    absl::SleepFor(absl::Milliseconds(300));
    redis = comm_testing::RedisServer::StartOnPort(port);
  });
  absl::StatusOr<std::unique_ptr<TimedRedisStore>> store =
      TimedRedisStore::Connect("127.0.0.1", port, absl::Seconds(10));
  server.join();
  if (absl::IsNotFound(redis.status())) GTEST_SKIP() << redis.status();
  ASSERT_TRUE(redis.ok()) << redis.status();
  ASSERT_TRUE(store.ok()) << store.status();
  (*store)->set("k", {'v'});
  EXPECT_EQ((*store)->get("k"), std::vector<char>{'v'});
}

// The command fails after the timeout naming the server and what it did not
// answer, and the connection is given up: what the server sends (or does)
// later is not read as the answer to a later command.
TEST_F(RedisRendezvous, AServerThatStopsAnsweringTimesOut) {
  absl::StatusOr<std::unique_ptr<RendezvousStore>> store =
      RendezvousStore::Open(
          {Kind::kRedis, "", "127.0.0.1", redis_->port(), "job"}, 0,
          absl::Milliseconds(300));
  ASSERT_TRUE(store.ok()) << store.status();
  gloo::rendezvous::Store& job = (*store)->store();
  job.set("before", {'v'});
  redis_->Pause();
  const absl::Time start = absl::Now();
  std::string what, later;
  try {
    job.set("after", {'v'});
  } catch (const std::exception& e) {
    what = e.what();
  }
  const absl::Duration took = absl::Now() - start;
  try {
    job.get("before");
  } catch (const std::exception& e) {
    later = e.what();
  }
  redis_->Resume();
  const std::string timed_out =
      "timed out: the server did not answer SET 'job/after' within 300ms (is "
      "it stopped or overloaded?)";
  const std::string where =
      absl::StrCat("redis://127.0.0.1:", redis_->port(), "/job: ");
  EXPECT_EQ(what, where + timed_out);
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Seconds(3));
  EXPECT_EQ(later, absl::StrCat(where, "unusable after: ", timed_out));
}

// A write queued in a stopped server lands when it resumes, after the job
// gave up on it; the job undoes it behind it, so the next job under the
// prefix is not refused for a key of a job that never met.
TEST_F(RedisRendezvous, AJobWhoseServerStalledLeavesNoKeyForTheNext) {
  {
    absl::StatusOr<std::unique_ptr<RendezvousStore>> store =
        RendezvousStore::Open(
            {Kind::kRedis, "", "127.0.0.1", redis_->port(), "stalled"}, 0,
            absl::Milliseconds(300));
    ASSERT_TRUE(store.ok()) << store.status();
    redis_->Pause();
    GlooOptions options;
    options.timeout = absl::Seconds(5);
    absl::StatusOr<std::unique_ptr<GlooProcessGroup>> group =
        GlooProcessGroup::Create(0, 2, (*store)->store(), options);
    // The job ends (its store closed) before the server resumes.
    store->reset();
    redis_->Resume();
    // The rendezvous reports any store error at its first write as
    // Unavailable (comm/rendezvous/rendezvous_join.cc).
    EXPECT_EQ(group.status().code(), absl::StatusCode::kUnavailable)
        << group.status();
    EXPECT_THAT(
        group.status().message(),
        HasSubstr(absl::StrCat(
            "rendezvous store: redis://127.0.0.1:", redis_->port(),
            "/stalled: timed out: the server did not answer SET "
            "'stalled/chunkzero_gloo_joined_0' within 300ms (is it stopped "
            "or overloaded?)")));
  }
  // Let the server apply what it had queued (it does so before answering
  // anything sent after it resumed, such as KeyCount's DBSIZE).
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(redis_->KeyCount(), 0);
  for (const absl::Status& s : AllReduceThrough(Address("stalled"), 2)) {
    EXPECT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(redis_->KeyCount(), 0);
}

// A write that timed out is undone only where it is what the server holds:
// a key another store set is kept. The rank's other keys go with it.
TEST_F(RedisRendezvous, UndoingATimedOutWriteKeepsWhatOthersSet) {
  const RendezvousAddress job = {Kind::kRedis, "", "127.0.0.1", redis_->port(),
                                 "job"};
  absl::StatusOr<std::unique_ptr<RendezvousStore>> theirs =
      RendezvousStore::Open(job, 1, absl::Seconds(5));
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  (*theirs)->store().set("taken", {'t'});
  {
    absl::StatusOr<std::unique_ptr<RendezvousStore>> mine =
        RendezvousStore::Open(job, 0, absl::Milliseconds(300));
    ASSERT_TRUE(mine.ok()) << mine.status();
    (*mine)->store().set("mine", {'m'});
    redis_->Pause();
    std::string what;
    try {
      (*mine)->store().set("taken", {'m'});
    } catch (const std::exception& e) {
      what = e.what();
    }
    mine->reset();
    redis_->Resume();
    EXPECT_THAT(what, HasSubstr("timed out"));
  }
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_GT(redis_->MillisecondsToLive("job/taken"), 0);
  EXPECT_EQ(redis_->MillisecondsToLive("job/mine"), -2);
  EXPECT_EQ(redis_->KeyCount(), 1);
  EXPECT_EQ((*theirs)->store().get("taken"), std::vector<char>{'t'});
}

// The largest value a store takes goes out and comes back whole (many
// sends and reads, within the reply limit).
TEST_F(RedisRendezvous, AValueAtTheLimitRoundTrips) {
  absl::StatusOr<std::unique_ptr<RendezvousStore>> store =
      RendezvousStore::Open(
          {Kind::kRedis, "", "127.0.0.1", redis_->port(), "job"}, 0,
          absl::Seconds(20));
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<char> value(TimedRedisStore::kMaxValueBytes - 7);  // "job/big"
  for (size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>(i);
  (*store)->store().set("big", value);
  EXPECT_TRUE((*store)->store().get("big") == value);
  EXPECT_TRUE((*store)->DeleteKeysItSet().ok());
  EXPECT_EQ(redis_->KeyCount(), 0);
}

TEST_F(RedisRendezvous, WaitHonoursItsTimeoutToTheMillisecond) {
  absl::StatusOr<std::unique_ptr<TimedRedisStore>> store =
      TimedRedisStore::Connect("127.0.0.1", redis_->port(), absl::Seconds(5));
  ASSERT_TRUE(store.ok()) << store.status();
  const absl::Time start = absl::Now();
  std::string what;
  try {
    (*store)->wait({"never"}, std::chrono::milliseconds(50));
  } catch (const std::exception& e) {
    what = e.what();
  }
  const absl::Duration took = absl::Now() - start;
  EXPECT_THAT(what, HasSubstr("Wait timeout for key(s): never"));
  EXPECT_GE(took, absl::Milliseconds(50));
  // Gloo's own RedisStore would wait a whole second.
  EXPECT_LT(took, absl::Milliseconds(800));
  EXPECT_EQ(TimedRedisStore::Connect("127.0.0.1", redis_->port(),
                                     absl::ZeroDuration())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace comm
}  // namespace chunkzero
