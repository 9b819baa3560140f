// launcher.h: the command line, exit codes, and RunJob called in this
// process over fake_rank (launch_test runs the binary, signals included).
#include "tools/launch/launcher.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/parallel_for.h"
#include "comm/testing/free_port.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/launch/redact_rendezvous.h"

namespace chunkzero {
namespace launch {
namespace {

std::string FakeRank() {
  return absl::StrCat(std::getenv("TEST_SRCDIR"),
                      "/chunkzero/tools/launch/fake_rank");
}

TEST(ParseLaunchArgs, TakesFlagsThenNprocThenBinaryThenArgs) {
  absl::StatusOr<LaunchOptions> options = ParseLaunchArgs(
      {"--grace_period_s=0.25", "3", "/bin/train", "--steps=2", "x"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->nproc, 3);
  EXPECT_EQ(options->binary, "/bin/train");
  EXPECT_EQ(options->args, (std::vector<std::string>{"--steps=2", "x"}));
  EXPECT_EQ(options->grace_period, std::chrono::milliseconds(250));
}

TEST(ParseLaunchArgs, DefaultsToAFiveSecondGracePeriodAndNoArgs) {
  absl::StatusOr<LaunchOptions> options = ParseLaunchArgs({"1", "train"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->nproc, 1);
  EXPECT_EQ(options->binary, "train");
  EXPECT_TRUE(options->args.empty());
  EXPECT_EQ(options->grace_period, std::chrono::seconds(5));
}

TEST(ParseLaunchArgs, NamesWhatIsWrong) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{}, "missing NPROC"},
      {{"--grace_period_s=1"}, "missing NPROC"},
      {{"2"}, "missing BINARY"},
      {{"2", ""}, "missing BINARY"},
      {{"0", "train"}, "NPROC must be a whole number >= 1, not \"0\""},
      {{"-1", "train"}, "NPROC must be a whole number >= 1, not \"-1\""},
      {{"two", "train"}, "NPROC must be a whole number >= 1, not \"two\""},
      {{"--grace_period_s=-1", "2", "train"},
       "--grace_period_s takes seconds from 0 to 86400, not \"-1\""},
      {{"--grace_period_s=abc", "2", "train"},
       "--grace_period_s takes seconds from 0 to 86400, not \"abc\""},
      {{"--grace_period_s=nan", "2", "train"},
       "--grace_period_s takes seconds from 0 to 86400, not \"nan\""},
      {{"--grace_period_s=1e9", "2", "train"},
       "--grace_period_s takes seconds from 0 to 86400, not \"1e9\""},
      {{"--steps=2", "2", "train"},
       "unknown flag --steps=2 (the launcher's flags come before NPROC)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat("args: ", absl::StrJoin(c.args, " ")));
    absl::StatusOr<LaunchOptions> options = ParseLaunchArgs(c.args);
    EXPECT_EQ(options.status(), absl::InvalidArgumentError(c.message));
  }
}

// --rank, --world_size and --rendezvous are the launcher's to set: given to
// the ranks too, the later one wins and the ranks cannot meet (a rename
// deep in Gloo's file store, or a request for --interface).
TEST(ParseLaunchArgs, RefusesTheFlagsItSetsAmongTheRankArgs) {
  const std::string kRank =
      "--rank is set by the launcher (--node_rank x NPROC + the local rank); "
      "drop it from the rank arguments";
  const std::string kWorldSize =
      "--world_size is set by the launcher (NPROC x --nnodes); drop it from "
      "the rank arguments";
  const std::string kRendezvous =
      "--rendezvous is set by the launcher; drop it from the rank arguments "
      "(the launcher's own --rendezvous, before NPROC, chooses it)";
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  // Every spelling Abseil's and gflags' parsers take.
  const Case cases[] = {
      {{"--rank=1"}, kRank},
      {{"--rank", "1"}, kRank},
      {{"-rank=1"}, kRank},
      {{"-rank", "1"}, kRank},
      {{"--rank"}, kRank},
      {{"--rank="}, kRank},
      {{"--steps=3", "--world_size=3"}, kWorldSize},
      {{"--world_size", "3", "--steps=3"}, kWorldSize},
      {{"-world_size=3"}, kWorldSize},
      {{"--rendezvous=/tmp/x"}, kRendezvous},
      {{"-rendezvous", "tcp://h:1"}, kRendezvous},
      // The first one named.
      {{"--layers=1", "--world_size=3", "--rank=1"}, kWorldSize},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat("ARGS: ", absl::StrJoin(c.args, " ")));
    std::vector<std::string> args = {"2", "train"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    EXPECT_EQ(ParseLaunchArgs(args).status(),
              absl::InvalidArgumentError(c.message));
  }
}

TEST(ParseLaunchArgs, PassesOnFlagsItDoesNotOwn) {
  // Other names, a later --backend (the rank's wins over the launcher's
  // --backend=gloo: NCCL with host-side Gloo), and after "--" positional
  // arguments, not flags.
  const std::vector<std::string> rank_args = {
      "--backend=nccl", "--device=cuda", "--ranks=2",
      "--rank_file=f",  "--world",       "--data=--rank",
      "rank",           "---rank=1",     "--",
      "--rank=1",       "--world_size",  "--rendezvous=x"};
  std::vector<std::string> args = {"2", "train"};
  args.insert(args.end(), rank_args.begin(), rank_args.end());
  absl::StatusOr<LaunchOptions> options = ParseLaunchArgs(args);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->args, rank_args);
}

TEST(ParseLaunchArgs, TakesTheHostsOfAJob) {
  absl::StatusOr<LaunchOptions> options = ParseLaunchArgs(
      {"--nnodes=3", "--node_rank=2", "--master_addr=10.0.0.1",
       "--master_port=6380", "--store=redis", "--run_id=job7", "2", "train"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->nnodes, 3);
  EXPECT_EQ(options->node_rank, 2);
  EXPECT_EQ(options->master_addr, "10.0.0.1");
  EXPECT_EQ(options->master_port, 6380);
  EXPECT_EQ(options->store, StoreKind::kRedis);
  EXPECT_EQ(options->run_id, "job7");
  options = ParseLaunchArgs({"--nnodes=2", "--node_rank=1",
                             "--rendezvous=/shared/job", "1", "train"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->rendezvous, "/shared/job");
  EXPECT_EQ(options->master_port, 29500);
  EXPECT_EQ(options->store, StoreKind::kTcp);
}

TEST(ParseLaunchArgs, NamesWhatIsWrongWithTheHosts) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"--nnodes=0", "2", "t"},
       "--nnodes takes a whole number from 1 to 65536, not \"0\""},
      {{"--nnodes=2", "--node_rank=2", "--master_addr=h", "2", "t"},
       "--node_rank=2 is not in [0, --nnodes=2)"},
      {{"--node_rank=-1", "2", "t"},
       "--node_rank takes a whole number from 0 to 65535, not \"-1\""},
      {{"--nnodes=2", "--node_rank=1", "2", "t"},
       "--nnodes=2: the hosts need a place to meet: give --master_addr "
       "(node 0's address) or --rendezvous"},
      {{"--master_addr=h", "--rendezvous=/d", "2", "t"},
       "--master_addr and --rendezvous both say where the ranks meet: give "
       "one"},
      {{"--store=redis", "2", "t"},
       "--store=redis: node 0 starts redis-server at --master_addr and "
       "--master_port; give --master_addr"},
      {{"--store=etcd", "2", "t"}, "--store takes tcp or redis, not \"etcd\""},
      {{"--master_port=0", "2", "t"},
       "--master_port takes a whole number from 1 to 65535, not \"0\""},
      {{"--master_addr=", "2", "t"}, "--master_addr is empty"},
      {{"--nnodes=65536", "--master_addr=h", "17", "t"},
       "--nnodes=65536 hosts of 17 ranks each is more than the 1048576 "
       "ranks a job may have"},
      {{"--run_id=a/b", "2", "t"},
       "--run_id takes a name without spaces or '/', not \"a/b\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat("args: ", absl::StrJoin(c.args, " ")));
    absl::StatusOr<LaunchOptions> options = ParseLaunchArgs(c.args);
    EXPECT_EQ(options.status(), absl::InvalidArgumentError(c.message));
  }
}

TEST(ExitCodeOf, IsTheExitCodeOr128PlusTheSignal) {
  EXPECT_EQ(ExitCodeOf(W_EXITCODE(0, 0)), 0);
  EXPECT_EQ(ExitCodeOf(W_EXITCODE(3, 0)), 3);
  EXPECT_EQ(ExitCodeOf(W_EXITCODE(0, SIGKILL)), 137);
  EXPECT_EQ(ExitCodeOf(W_EXITCODE(0, SIGTERM)), 143);
}

TEST(DescribeWaitStatus, NamesTheCodeOrTheSignal) {
  EXPECT_EQ(DescribeWaitStatus(W_EXITCODE(3, 0)), "exit code 3");
  EXPECT_EQ(DescribeWaitStatus(W_EXITCODE(0, SIGUSR1)),
            "killed by signal SIGUSR1");
  EXPECT_EQ(DescribeWaitStatus(W_EXITCODE(0, SIGSEGV)),
            "killed by signal SIGSEGV");
}

// `text` with `prefix` before each line, as the launcher shows a rank's
// output.
std::string Prefixed(absl::string_view prefix, absl::string_view text) {
  std::string out;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == absl::string_view::npos) end = text.size();
    absl::StrAppend(&out, prefix, text.substr(start, end - start), "\n");
    start = end + 1;
  }
  return out;
}

// Where `actual` first differs from `expected`, with the lines around it,
// and both sizes.
std::string DescribeMismatch(const std::string& actual,
                             const std::string& expected) {
  size_t at = 0;
  while (at < actual.size() && at < expected.size() &&
         actual[at] == expected[at]) {
    ++at;
  }
  const size_t from = at < 120 ? 0 : at - 120;
  return absl::StrCat(
      "actual ", actual.size(), " bytes, expected ", expected.size(),
      "; first difference at byte ", at, "\nactual from byte ", from, ":\n",
      actual.substr(from, 240), "\nexpected from byte ", from, ":\n",
      expected.substr(from, 240), "\nactual's last 240 bytes:\n",
      actual.substr(actual.size() < 240 ? 0 : actual.size() - 240));
}

// RunJob with its rendezvous directory under a fresh $TMPDIR and its report
// in a file.
class RunJobTest : public testing::Test {
 protected:
  void SetUp() override {
    const testing::TestInfo* test =
        testing::UnitTest::GetInstance()->current_test_info();
    tmpdir_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", test->name());
    ASSERT_EQ(mkdir(tmpdir_.c_str(), 0700), 0) << tmpdir_;
    ASSERT_EQ(setenv("TMPDIR", tmpdir_.c_str(), 1), 0);
    report_path_ =
        absl::StrCat(std::getenv("TEST_TMPDIR"), "/", test->name(), ".report");
    report_fd_ = open(report_path_.c_str(),
                      O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ASSERT_GE(report_fd_, 0);
  }
  void TearDown() override {
    close(report_fd_);
    unsetenv("TMPDIR");
  }

  LaunchOptions Options(int nproc, std::vector<std::string> args) const {
    LaunchOptions options;
    options.nproc = nproc;
    options.binary = FakeRank();
    options.args = std::move(args);
    options.report_fd = report_fd_;
    return options;
  }

  std::string Report() const {
    std::ifstream in(report_path_);
    return std::string(std::istreambuf_iterator<char>(in),
                       std::istreambuf_iterator<char>());
  }

  // The rendezvous directory as fake_rank prints it, with mkdtemp's random
  // suffix kept as the XXXXXX it replaced (same length).
  std::string Rendezvous() const {
    return absl::StrCat(tmpdir_, "/chunkzero-rendezvous.XXXXXX/store");
  }

  // Replaces every mkdtemp suffix in `text` with XXXXXX.
  std::string Redacted(std::string text) const {
    return RedactRendezvousDirs(std::move(text), tmpdir_);
  }

  std::vector<std::string> TmpdirEntries() const {
    std::vector<std::string> names;
    DIR* dir = opendir(tmpdir_.c_str());
    if (dir == nullptr) return names;
    while (const dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(dir);
    return names;
  }

  std::string tmpdir_;
  std::string report_path_;
  int report_fd_ = -1;
};

TEST_F(RunJobTest, AllRanksExitingZeroIsZeroAndTheDirectoryIsRemoved) {
  absl::StatusOr<int> code = RunJob(Options(3, {"--sleep_s=0.1"}));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  EXPECT_EQ(Report(), "");
  EXPECT_TRUE(TmpdirEntries().empty());
}

TEST_F(RunJobTest, ReportsTheFirstFailureWithItsOutputAndReturnsItsCode) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<int> code =
      RunJob(Options(2, {"--fail_rank=1", "--exit_code=3", "--sleep_s=20"}));
  const std::chrono::duration<double> took =
      std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 3);
  EXPECT_LT(took.count(), 3.0);
  EXPECT_EQ(Redacted(Report()),
            absl::StrCat("launch: rank 1 failed (exit code 3)\n"
                         "[rank 1] fake_rank 1: --world_size=2 --backend=gloo "
                         "--rank=1 --rendezvous=",
                         Rendezvous(),
                         " --fail_rank=1 --exit_code=3 --sleep_s=20\n"
                         "[rank 1] fake_rank 1: exiting with code 3\n"));
  EXPECT_TRUE(TmpdirEntries().empty());
}

TEST_F(RunJobTest, KeepsTheLast64KiBOfAFailedRanksOutput) {
  const long spew = 200000;
  absl::StatusOr<int> code =
      RunJob(Options(2, {"--fail_rank=1", "--exit_code=7",
                         absl::StrCat("--spew_bytes=", spew)}));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 7);

  std::string output = absl::StrCat(
      "fake_rank 1: --world_size=2 --backend=gloo --rank=1 --rendezvous=",
      Rendezvous(), " --fail_rank=1 --exit_code=7 --spew_bytes=", spew, "\n");
  for (long i = 0; i * 12 < spew; ++i) {
    char line[32];
    std::snprintf(line, sizeof(line), "line %06ld\n", i);
    output.append(line, std::min<long>(12, spew - i * 12));
  }
  output += "fake_rank 1: exiting with code 7\n";
  ASSERT_GT(output.size(), kKeptOutputBytes);
  const std::string expected = absl::StrCat(
      "launch: rank 1 failed (exit code 7)\n"
      "launch: the first ",
      output.size() - kKeptOutputBytes,
      " bytes of rank 1's output were dropped\n",
      Prefixed("[rank 1] ", output.substr(output.size() - kKeptOutputBytes)));
  // Not EXPECT_EQ on the whole: a 64 KiB diff is cut from CI's log before it
  // shows where the two differ.
  const std::string report = Report();
  EXPECT_TRUE(report == expected) << DescribeMismatch(report, expected);
}

// Each rank gets its share of the cores as CHUNKZERO_NUM_THREADS, unless the
// launcher's environment sets it; the rest of the environment passes on.
TEST_F(RunJobTest, GivesEachRankItsShareOfTheCores) {
  ASSERT_EQ(unsetenv("CHUNKZERO_NUM_THREADS"), 0);
  const std::vector<std::string> args = {"--fail_rank=1", "--exit_code=3",
                                         "--print_env=CHUNKZERO_NUM_THREADS"};
  absl::StatusOr<int> code = RunJob(Options(2, args));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_THAT(Report(), testing::HasSubstr(
                            absl::StrCat("fake_rank 1: CHUNKZERO_NUM_THREADS=",
                                         ParallelThreadsShare(2), "\n")));

  ASSERT_EQ(setenv("CHUNKZERO_NUM_THREADS", "7", 1), 0);
  code = RunJob(Options(2, args));
  unsetenv("CHUNKZERO_NUM_THREADS");
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_THAT(Report(),
              testing::HasSubstr("fake_rank 1: CHUNKZERO_NUM_THREADS=7\n"));
  // TMPDIR (set by the fixture) reaches the rank too.
  code = RunJob(Options(2, {"--fail_rank=1", "--print_env=TMPDIR"}));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_THAT(Report(), testing::HasSubstr(absl::StrCat(
                            "fake_rank 1: TMPDIR=", tmpdir_, "\n")));
}

// Node 1 of 2 with 2 ranks each runs the job's ranks 2 and 3, each told
// its place on the host; rank 2 is not the job's rank 0, so its output is
// kept too. The store is rank 0's on node 0: no directory is made.
TEST_F(RunJobTest, RunsThisHostsShareOfTheRanks) {
  LaunchOptions options =
      Options(2, {"--fail_rank=2", "--print_env=LOCAL_RANK",
                  "--print_env=LOCAL_WORLD_SIZE", "--sleep_s=20"});
  options.nnodes = 2;
  options.node_rank = 1;
  options.master_addr = "10.0.0.9";
  ASSERT_EQ(setenv("LOCAL_RANK", "7", 1),
            0);  // The launcher's own: not passed.
  absl::StatusOr<int> code = RunJob(options);
  unsetenv("LOCAL_RANK");
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
  EXPECT_EQ(Report(),
            "launch: rank 2 failed (exit code 1) on node 1\n"
            "[rank 2] fake_rank 2: --world_size=4 --backend=gloo --rank=2 "
            "--rendezvous=tcp://10.0.0.9:29500 --fail_rank=2 "
            "--print_env=LOCAL_RANK --print_env=LOCAL_WORLD_SIZE --sleep_s=20\n"
            "[rank 2] fake_rank 2: LOCAL_RANK=0\n"
            "[rank 2] fake_rank 2: LOCAL_WORLD_SIZE=2\n"
            "[rank 2] fake_rank 2: exiting with code 1\n");
  EXPECT_TRUE(TmpdirEntries().empty());
}

TEST_F(RunJobTest, PassesARendezvousOnAndBracketsAnIpv6Master) {
  LaunchOptions options = Options(1, {"--fail_rank=1"});
  options.nnodes = 2;
  options.node_rank = 1;
  options.master_addr = "fd00::1";
  options.master_port = 1234;
  absl::StatusOr<int> code = RunJob(options);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_THAT(Report(),
              testing::HasSubstr("--rendezvous=tcp://[fd00::1]:1234 "));
  options.master_addr = "[fd00::1]";  // Bracketed already: kept as it is.
  code = RunJob(options);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_THAT(Report(), testing::Not(testing::HasSubstr("[[")));
  options.master_addr = "";
  options.rendezvous = "redis://r:6379/job";
  code = RunJob(options);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_THAT(Report(), testing::HasSubstr("--rendezvous=redis://r:6379/job "));
}

bool HaveRedisServer() { return access("/usr/bin/redis-server", X_OK) == 0; }

// With --store=redis node 0 starts redis-server before its ranks and stops
// it after them.
TEST_F(RunJobTest, NodeZeroRunsTheRedisServerForTheJob) {
  if (!HaveRedisServer()) {
    GTEST_SKIP() << "no /usr/bin/redis-server (Debian package redis-server)";
  }
  const int port = comm_testing::FreeLoopbackPort();
  LaunchOptions options =
      Options(2, {"--fail_rank=1", absl::StrCat("--probe_port=", port)});
  options.nnodes = 2;
  options.master_addr = "127.0.0.1";
  options.master_port = port;
  options.store = StoreKind::kRedis;
  options.run_id = "job9";
  absl::StatusOr<int> code = RunJob(options);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 1);
  EXPECT_THAT(Report(),
              testing::HasSubstr(absl::StrCat(
                  "--rendezvous=redis://127.0.0.1:", port, "/job9 ")));
  EXPECT_THAT(Report(),
              testing::HasSubstr(absl::StrCat("[rank 1] fake_rank 1: port ",
                                              port, " answers\n")));
  // Stopped with the job.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_NE(
      connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)),
      0);
  close(fd);
}

TEST_F(RunJobTest, ARedisServerThatCannotStartIsNamed) {
  if (!HaveRedisServer()) {
    GTEST_SKIP() << "no /usr/bin/redis-server (Debian package redis-server)";
  }
  // The port is taken.
  int port = 0;
  const int taken = comm_testing::ListeningSocket(&port, /*backlog=*/1,
                                                  /*every_address=*/true);
  ASSERT_GE(taken, 0);
  LaunchOptions options = Options(1, {});
  options.master_addr = "127.0.0.1";
  options.master_port = port;
  options.store = StoreKind::kRedis;
  absl::StatusOr<int> code = RunJob(options);
  close(taken);
  EXPECT_EQ(code.status(),
            absl::UnavailableError(absl::StrCat(
                "--store=redis: something already answers on port ", port,
                " (another job's store?); choose another --master_port")));
  options.redis_server = "/nonexistent/redis-server";
  options.master_port = comm_testing::FreeLoopbackPort();
  code = RunJob(options);
  EXPECT_EQ(code.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(code.status().message(),
              testing::HasSubstr("--store=redis: cannot execute "
                                 "/nonexistent/redis-server: No such file"));
  // An address of another host (TEST-NET-1): redis-server cannot bind it.
  options.redis_server = "redis-server";
  options.master_addr = "192.0.2.77";
  options.master_port = comm_testing::FreeLoopbackPort();
  code = RunJob(options);
  EXPECT_EQ(code.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(code.status().message(),
              testing::HasSubstr("before answering: is the port taken, or is "
                                 "--master_addr=192.0.2.77 not an address of "
                                 "this host (node 0 runs the store)?"));
}

TEST_F(RunJobTest, AMissingBinaryIsNamedWithTheErrnoText) {
  LaunchOptions options = Options(2, {});
  options.binary = "/nonexistent/fake_rank";
  absl::StatusOr<int> code = RunJob(options);
  EXPECT_EQ(code.status(),
            absl::NotFoundError("cannot execute /nonexistent/fake_rank for "
                                "rank 0: No such file or directory"));
  EXPECT_TRUE(TmpdirEntries().empty());
}

TEST_F(RunJobTest, RejectsBadOptions) {
  LaunchOptions options = Options(0, {});
  EXPECT_EQ(RunJob(options).status(),
            absl::InvalidArgumentError("nproc must be >= 1, not 0"));
  options = Options(1, {});
  options.binary = "";
  EXPECT_EQ(RunJob(options).status(),
            absl::InvalidArgumentError("no binary to run"));
  options = Options(1, {});
  options.grace_period = std::chrono::milliseconds(-1);
  EXPECT_EQ(RunJob(options).status(),
            absl::InvalidArgumentError("the grace period is negative"));
}

TEST_F(RunJobTest, RestoresTheSignalDispositions) {
  struct sigaction before {};
  ASSERT_EQ(sigaction(SIGTERM, nullptr, &before), 0);
  absl::StatusOr<int> code = RunJob(Options(1, {}));
  ASSERT_TRUE(code.ok()) << code.status();
  struct sigaction after {};
  ASSERT_EQ(sigaction(SIGTERM, nullptr, &after), 0);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

}  // namespace
}  // namespace launch
}  // namespace chunkzero
