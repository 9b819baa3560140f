// The train job across three hosts made of network namespaces
// (netns_testbed.h): two ranks per host, one launcher per host, meeting in a
// Redis server that node 0's launcher starts (in the fault case, in the TCP
// store the job's rank 0 hosts). Checks that the 6-rank job's
// losses are the in-process job's bit for bit, that a host dropping off
// fails every launcher within the collective deadline and leaves a
// checkpoint that resumes at a smaller world size, and that 100 ms of
// latency on one link still trains (the step time is reported).
// The fault case prints the errors the launchers reported.
//
// Needs root; where namespaces cannot be made every test skips, saying why.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/multihost/netns_testbed.h"
#include "tests/multihost/subprocess.h"

namespace chunkzero {
namespace multihost {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int kHosts = 3;
constexpr int kRanksPerHost = 2;
constexpr int kStorePort = 6379;
// "rank 4", "ranks 0, 4, 5", ...: a list of ranks that holds 4 or 5.
const std::regex kNamesALostRank(R"(ranks? (\d+, )*[45]\b)");

std::string Runfile(const std::string& path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/chunkzero/", path);
}

// One step's line of --metrics_out, as the strings it holds: equal strings
// are equal bits (9 significant digits pin an f32; the job's doubles are
// printed from the f32 they hold).
struct StepLine {
  int step = 0;
  std::string loss;
  std::string grad_norm;
  double step_time_s = 0;
};

// The value after "key": up to the next ',' or '}'.
std::string Field(absl::string_view line, absl::string_view key) {
  const std::string quoted = absl::StrCat("\"", key, "\":");
  const size_t at = line.find(quoted);
  if (at == absl::string_view::npos) return "";
  absl::string_view rest = line.substr(at + quoted.size());
  return std::string(rest.substr(0, rest.find_first_of(",}")));
}

std::vector<StepLine> ReadMetrics(const std::string& path) {
  std::vector<StepLine> steps;
  for (absl::string_view line :
       absl::StrSplit(ReadFileOrEmpty(path), '\n', absl::SkipEmpty())) {
    StepLine s;
    if (!absl::SimpleAtoi(Field(line, "step"), &s.step)) continue;
    s.loss = Field(line, "loss");
    s.grad_norm = Field(line, "grad_norm");
    if (!absl::SimpleAtod(Field(line, "step_time_s"), &s.step_time_s)) {
      s.step_time_s = 0;
    }
    steps.push_back(s);
  }
  return steps;
}

// The median step time after the first step (which also sets up).
double MedianStepTime(const std::vector<StepLine>& steps) {
  std::vector<double> times;
  for (size_t i = 1; i < steps.size(); ++i)
    times.push_back(steps[i].step_time_s);
  if (times.empty()) return 0;
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

class NetnsTrainTest : public testing::Test {
 protected:
  void SetUp() override {
    if (access("/usr/bin/redis-server", X_OK) != 0) {
      GTEST_SKIP() << "no /usr/bin/redis-server (Debian package "
                      "redis-server; tools/setup.sh installs it)";
    }
    absl::StatusOr<std::unique_ptr<NetnsTestbed>> bed =
        NetnsTestbed::Create(TestbedOptions{kHosts, {}, ""});
    if (!bed.ok()) GTEST_SKIP() << bed.status();
    bed_ = *std::move(bed);
    dir_ = absl::StrCat(
        std::getenv("TEST_TMPDIR"), "/",
        testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }

  // Starts one launcher per host, meeting in the store `store` ("redis":
  // node 0's launcher starts redis-server; "tcp": the job's rank 0 hosts
  // it). Every rank gets `flags` after the launcher's.
  std::vector<Child> StartJob(const std::string& name,
                              const std::vector<std::string>& flags,
                              const std::string& store = "redis") {
    std::vector<Child> launchers;
    for (int host = 0; host < kHosts; ++host) {
      std::vector<std::string> argv = {
          Runfile("tools/launch/launch"),
          absl::StrCat("--nnodes=", kHosts),
          absl::StrCat("--node_rank=", host),
          absl::StrCat("--master_addr=", bed_->address(0)),
          absl::StrCat("--master_port=", kStorePort),
          absl::StrCat("--store=", store),
          "--grace_period_s=2",
          absl::StrCat(kRanksPerHost),
          Runfile("tools/train/train")};
      argv.insert(argv.end(), flags.begin(), flags.end());
      absl::StatusOr<Child> child =
          Child::Start(bed_->OnHost(host, argv), Log(name, host));
      EXPECT_TRUE(child.ok()) << child.status();
      if (child.ok()) launchers.push_back(*std::move(child));
    }
    return launchers;
  }

  // Waits for every launcher; their exit codes.
  std::vector<int> WaitAll(std::vector<Child>& launchers,
                           absl::Duration timeout) {
    std::vector<int> codes;
    const absl::Time deadline = absl::Now() + timeout;
    for (Child& c : launchers) {
      absl::StatusOr<int> code = c.Wait(deadline - absl::Now());
      EXPECT_TRUE(code.ok()) << code.status();
      codes.push_back(code.ok() ? *code : -1);
    }
    return codes;
  }

  // The in-process job (threads) on the machine's own loopback.
  int RunInProcess(const std::string& name, std::vector<std::string> flags) {
    std::vector<std::string> argv = {Runfile("tools/train/train")};
    argv.insert(argv.end(), flags.begin(), flags.end());
    absl::StatusOr<Child> child = Child::Start(argv, Log(name, -1));
    EXPECT_TRUE(child.ok()) << child.status();
    if (!child.ok()) return -1;
    absl::StatusOr<int> code = child->Wait(absl::Minutes(5));
    EXPECT_TRUE(code.ok()) << code.status();
    return code.ok() ? *code : -1;
  }

  std::string Log(const std::string& name, int host) const {
    return host < 0 ? absl::StrCat(dir_, "/", name, ".inprocess.log")
                    : absl::StrCat(dir_, "/", name, ".host", host, ".log");
  }
  std::string Path(const std::string& name) const {
    return absl::StrCat(dir_, "/", name);
  }
  std::string Logs(const std::string& name) const {
    std::string all;
    for (int host = 0; host < kHosts; ++host) {
      absl::StrAppend(&all, "--- host ", host, ":\n",
                      ReadFileOrEmpty(Log(name, host)));
    }
    return all;
  }

  std::unique_ptr<NetnsTestbed> bed_;
  std::string dir_;
};

TEST_F(NetnsTrainTest, SixRanksOnThreeHostsLoseWhatSixThreadsLose) {
  const std::vector<std::string> flags = {"--steps=20", "--comm_timeout_s=60"};
  std::vector<std::string> hosts = flags;
  hosts.push_back("--metrics_out=" + Path("hosts.jsonl"));
  std::vector<Child> launchers = StartJob("hosts", hosts);
  const std::vector<int> codes = WaitAll(launchers, absl::Minutes(5));
  ASSERT_EQ(codes, std::vector<int>(kHosts, 0)) << Logs("hosts");
  // Over TCP between the hosts: no shared memory across namespaces.
  EXPECT_THAT(ReadFileOrEmpty(Log("hosts", 0)), HasSubstr("gloo over TCP"));

  std::vector<std::string> threads = flags;
  threads.push_back("--world_size=6");
  threads.push_back("--metrics_out=" + Path("threads.jsonl"));
  ASSERT_EQ(RunInProcess("threads", threads), 0)
      << ReadFileOrEmpty(Log("threads", -1));

  const std::vector<StepLine> a = ReadMetrics(Path("hosts.jsonl"));
  const std::vector<StepLine> b = ReadMetrics(Path("threads.jsonl"));
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].step, b[i].step);
    EXPECT_EQ(a[i].loss, b[i].loss) << "step " << a[i].step;
    EXPECT_EQ(a[i].grad_norm, b[i].grad_norm) << "step " << a[i].step;
  }
  RecordProperty("step_time_s_three_hosts", absl::StrCat(MedianStepTime(a)));
  RecordProperty("step_time_s_in_process", absl::StrCat(MedianStepTime(b)));
}

TEST_F(NetnsTrainTest, AHostThatDropsOffFailsTheJobAndItsCheckpointResumes) {
  constexpr int kTimeoutS = 8;
  const std::string save = Path("save");
  std::vector<Child> launchers =
      StartJob("fault",
               {"--steps=200", absl::StrCat("--comm_timeout_s=", kTimeoutS),
                "--save=" + save, "--save_every=4",
                "--metrics_out=" + Path("fault.jsonl")},
               /*store=*/"tcp");
  // Mid-run: after step 9, so that checkpoints of steps 4 and 8 exist.
  const absl::Time wait_until = absl::Now() + absl::Minutes(3);
  while (ReadMetrics(Path("fault.jsonl")).size() < 9 &&
         absl::Now() < wait_until) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  const size_t steps_done = ReadMetrics(Path("fault.jsonl")).size();
  ASSERT_GE(steps_done, 9u) << Logs("fault");
  ASSERT_TRUE(bed_->SetLink(2, /*up=*/false).ok());
  const absl::Time down = absl::Now();
  std::vector<absl::Duration> took;
  std::vector<int> codes;
  for (Child& c : launchers) {
    absl::StatusOr<int> code = c.Wait(absl::Seconds(4 * kTimeoutS + 30));
    ASSERT_TRUE(code.ok()) << code.status() << "\n" << Logs("fault");
    codes.push_back(*code);
    took.push_back(absl::Now() - down);
  }
  const std::string logs = Logs("fault");
  for (absl::string_view line : absl::StrSplit(logs, '\n')) {
    if (absl::StrContains(line, "error:")) {
      std::printf("%s\n", std::string(line).c_str());
    }
  }
  for (int host = 0; host < kHosts; ++host) {
    EXPECT_NE(codes[host], 0) << "host " << host << "\n" << logs;
  }
  // The hosts still connected fail within the deadline (a collective's
  // timeout, or two if one had just begun, and the grace period), naming a
  // rank of the lost host (4 or 5) or its address.
  for (int host = 0; host < 2; ++host) {
    EXPECT_LE(took[host], absl::Seconds(2 * kTimeoutS + 2 + 5))
        << "host " << host;
    const std::string log = ReadFileOrEmpty(Log("fault", host));
    EXPECT_THAT(log, HasSubstr("launch: rank "));
    EXPECT_TRUE(std::regex_search(log, kNamesALostRank) ||
                absl::StrContains(log, bed_->address(2)))
        << log;
  }
  // The last checkpoint resumes on 4 ranks (threads) and trains on.
  ASSERT_EQ(RunInProcess("resume",
                         {"--resume=" + save, "--world_size=4", "--steps=16",
                          "--metrics_out=" + Path("resume.jsonl")}),
            0)
      << ReadFileOrEmpty(Log("resume", -1));
  const std::vector<StepLine> resumed = ReadMetrics(Path("resume.jsonl"));
  ASSERT_FALSE(resumed.empty());
  EXPECT_EQ((resumed.front().step - 1) % 4, 0) << "resumed at a save";
  EXPECT_GE(resumed.front().step, 9);
  EXPECT_LE(resumed.front().step, static_cast<int>(steps_done) + 4);
  EXPECT_EQ(resumed.back().step, 16);
}

TEST_F(NetnsTrainTest, HundredMillisecondsOnOneLinkStillTrains) {
  const std::vector<std::string> flags = {"--steps=4", "--comm_timeout_s=120"};
  std::vector<std::string> before = flags;
  before.push_back("--metrics_out=" + Path("before.jsonl"));
  std::vector<Child> fast = StartJob("before", before);
  ASSERT_EQ(WaitAll(fast, absl::Minutes(5)), std::vector<int>(kHosts, 0))
      << Logs("before");
  // The same hosts, host 2's link now delaying what it sends by 100 ms
  // (this machine's kernel has no sch_netem: a delay line stands in).
  bed_.reset();
  TestbedOptions options;
  options.hosts = kHosts;
  options.latency[2] = absl::Milliseconds(100);
  options.delay_link = Runfile("tests/multihost/delay_link");
  absl::StatusOr<std::unique_ptr<NetnsTestbed>> delayed =
      NetnsTestbed::Create(options);
  ASSERT_TRUE(delayed.ok()) << delayed.status();
  bed_ = *std::move(delayed);
  std::vector<std::string> after = flags;
  after.push_back("--metrics_out=" + Path("after.jsonl"));
  std::vector<Child> slow = StartJob("after", after);
  ASSERT_EQ(WaitAll(slow, absl::Minutes(8)), std::vector<int>(kHosts, 0))
      << Logs("after");
  const std::vector<StepLine> a = ReadMetrics(Path("before.jsonl"));
  const std::vector<StepLine> b = ReadMetrics(Path("after.jsonl"));
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].loss, b[i].loss) << "step " << a[i].step;
  }
  const double t0 = MedianStepTime(a), t1 = MedianStepTime(b);
  RecordProperty("step_time_s_no_latency", absl::StrCat(t0));
  RecordProperty("step_time_s_100ms_on_one_link", absl::StrCat(t1));
  std::printf(
      "step time: %.3f s without latency, %.3f s with 100 ms on one "
      "link (%.1fx)\n",
      t0, t1, t0 > 0 ? t1 / t0 : 0.0);
  EXPECT_GT(t1, t0);
}

}  // namespace
}  // namespace multihost
}  // namespace chunkzero
