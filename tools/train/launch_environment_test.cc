#include "tools/train/launch_environment.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::testing::HasSubstr;

// An environment made of `vars` alone.
EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(LaunchEnvironment, TorchrunsVariablesMakeOneRankPerProcess) {
  TrainOptions o;
  ASSERT_TRUE(ApplyLaunchEnvironment(Env({{"RANK", "3"},
                                          {"WORLD_SIZE", "6"},
                                          {"LOCAL_RANK", "1"},
                                          {"LOCAL_WORLD_SIZE", "2"},
                                          {"MASTER_ADDR", "10.0.0.1"},
                                          {"MASTER_PORT", "29500"}}),
                                     {}, &o)
                  .ok());
  EXPECT_EQ(o.rank, 3);
  EXPECT_EQ(o.world_size, 6);
  EXPECT_EQ(o.local_rank, 1);
  EXPECT_EQ(o.local_world_size, 2);
  EXPECT_EQ(o.core_sharing_ranks, 2);
  EXPECT_EQ(o.backend, Backend::kGloo);
  EXPECT_EQ(o.rendezvous, "tcp://10.0.0.1:29500");
}

TEST(LaunchEnvironment, AnIpv6MasterIsBracketed) {
  TrainOptions o;
  ASSERT_TRUE(ApplyLaunchEnvironment(Env({{"RANK", "0"},
                                          {"WORLD_SIZE", "1"},
                                          {"MASTER_ADDR", "fd00::1"},
                                          {"MASTER_PORT", "1"}}),
                                     {}, &o)
                  .ok());
  EXPECT_EQ(o.rendezvous, "tcp://[fd00::1]:1");
}

TEST(LaunchEnvironment, AStoreUrlAndTheCommandLineComeFirst) {
  const auto env = Env({{"RANK", "1"},
                        {"WORLD_SIZE", "2"},
                        {"CHUNKZERO_RENDEZVOUS", "redis://r:6379/job"},
                        {"MASTER_ADDR", "m"},
                        {"MASTER_PORT", "29500"},
                        {"GLOO_SOCKET_IFNAME", "eth1"}});
  TrainOptions o;
  ASSERT_TRUE(ApplyLaunchEnvironment(env, {}, &o).ok());
  EXPECT_EQ(o.rendezvous, "redis://r:6379/job");
  EXPECT_EQ(o.interface, "eth1");
  EXPECT_EQ(o.interface_source, "GLOO_SOCKET_IFNAME");

  TrainOptions flags;
  flags.rendezvous = "/shared/job";
  flags.interface = "ib0";
  flags.backend = Backend::kNccl;
  ASSERT_TRUE(ApplyLaunchEnvironment(
                  env, {"rendezvous", "interface", "backend"}, &flags)
                  .ok());
  EXPECT_EQ(flags.rendezvous, "/shared/job");
  EXPECT_EQ(flags.interface, "ib0");
  EXPECT_EQ(flags.interface_source, "--interface");
  EXPECT_EQ(flags.backend, Backend::kNccl);
  EXPECT_EQ(flags.rank, 1);

  // With --rank given the environment's rank, size and store are not read.
  TrainOptions ranked;
  ranked.rank = 0;
  ranked.world_size = 4;
  ASSERT_TRUE(ApplyLaunchEnvironment(env, {"rank"}, &ranked).ok());
  EXPECT_EQ(ranked.rank, 0);
  EXPECT_EQ(ranked.world_size, 4);
  EXPECT_EQ(ranked.rendezvous, "");
}

TEST(LaunchEnvironment, LocalRankPlacesARankGivenOnTheCommandLine) {
  TrainOptions o;
  o.rank = 5;
  o.world_size = 6;
  ASSERT_TRUE(ApplyLaunchEnvironment(
                  Env({{"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}}),
                  {"rank", "world_size"}, &o)
                  .ok());
  EXPECT_EQ(o.local_rank, 1);
  EXPECT_EQ(o.local_world_size, 2);
  // Ranks that are threads of one process have no place of their own.
  TrainOptions threads;
  ASSERT_TRUE(
      ApplyLaunchEnvironment(Env({{"LOCAL_RANK", "1"}}), {}, &threads).ok());
  EXPECT_EQ(threads.local_rank, -1);
}

// A cluster may export these everywhere: ranks that are threads of one
// process (no RANK, no --rank) read none of them.
TEST(LaunchEnvironment, WithoutRankNothingChanges) {
  TrainOptions o;
  const TrainOptions before = o;
  ASSERT_TRUE(ApplyLaunchEnvironment(Env({{"WORLD_SIZE", "1"},
                                          {"MASTER_ADDR", "m"},
                                          {"MASTER_PORT", "29500"},
                                          {"GLOO_SOCKET_IFNAME", "eth0"},
                                          {"LOCAL_RANK", "1"},
                                          {"LOCAL_WORLD_SIZE", "2"}}),
                                     {}, &o)
                  .ok());
  EXPECT_EQ(o.rank, before.rank);
  EXPECT_EQ(o.world_size, before.world_size);
  EXPECT_EQ(o.backend, before.backend);
  EXPECT_EQ(o.rendezvous, before.rendezvous);
  EXPECT_EQ(o.interface, "");
  EXPECT_EQ(o.local_rank, -1);
  EXPECT_EQ(o.local_world_size, 0);
}

// What only a launcher sets, without the RANK that would make this process
// one of its ranks: training alone would succeed at a job nobody asked for.
TEST(LaunchEnvironment, ALauncherEnvironmentWithoutRankIsRefused) {
  struct Case {
    std::map<std::string, std::string> vars;
    const char* message;
  };
  const Case cases[] = {
      {{{"RANK", ""}, {"WORLD_SIZE", "2"}},
       "RANK=\"\" (from the environment) is empty: want this process's rank, "
       "or unset it to train as one process"},
      {{{"RANK", ""}}, "RANK=\"\" (from the environment) is empty"},
      {{{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "1"}},
       "WORLD_SIZE=\"2\" is set in the environment but RANK is not: a "
       "launcher that sets one sets both (unset WORLD_SIZE to train as one "
       "process)"},
      {{{"CHUNKZERO_RENDEZVOUS", "tcp://m:1"}},
       "CHUNKZERO_RENDEZVOUS=\"tcp://m:1\" is set in the environment but "
       "RANK is not"},
  };
  for (const Case& c : cases) {
    TrainOptions o;
    const absl::Status s = ApplyLaunchEnvironment(Env(c.vars), {}, &o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
  // With --rank on the command line the environment's RANK is not read.
  TrainOptions o;
  o.rank = 0;
  o.world_size = 2;
  o.rendezvous = "/tmp/x";
  EXPECT_TRUE(ApplyLaunchEnvironment(Env({{"RANK", ""}, {"WORLD_SIZE", "2"}}),
                                     {"rank", "world_size", "rendezvous"}, &o)
                  .ok());
}

TEST(LaunchEnvironment, ChunkzeroNumThreadsMustBeACount) {
  for (const char* bad :
       {"", "abc", "0", "-1", "1x", "4097", "9223372036854775808"}) {
    TrainOptions o;
    const absl::Status s =
        ApplyLaunchEnvironment(Env({{"CHUNKZERO_NUM_THREADS", bad}}), {}, &o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(),
                HasSubstr(absl::StrCat("CHUNKZERO_NUM_THREADS=\"", bad,
                                       "\" (from the environment): want "
                                       "threads per process, in [1, 4096]")));
  }
  TrainOptions o;
  EXPECT_TRUE(
      ApplyLaunchEnvironment(Env({{"CHUNKZERO_NUM_THREADS", "4096"}}), {}, &o)
          .ok());
}

TEST(LaunchEnvironment, ThreadsAreLeftToChunkzeroNumThreads) {
  TrainOptions o;
  ASSERT_TRUE(ApplyLaunchEnvironment(Env({{"RANK", "0"},
                                          {"WORLD_SIZE", "4"},
                                          {"LOCAL_WORLD_SIZE", "4"},
                                          {"CHUNKZERO_NUM_THREADS", "2"},
                                          {"MASTER_ADDR", "m"},
                                          {"MASTER_PORT", "1"}}),
                                     {}, &o)
                  .ok());
  EXPECT_EQ(o.local_world_size, 4);
  EXPECT_EQ(o.core_sharing_ranks, 1);
}

TEST(LaunchEnvironment, BadValuesAreNamed) {
  struct Case {
    std::map<std::string, std::string> vars;
    std::set<std::string> given;
    int world_size_flag;
    const char* message;
  };
  const std::map<std::string, std::string> master = {{"MASTER_ADDR", "m"},
                                                     {"MASTER_PORT", "29500"}};
  auto with = [&](std::map<std::string, std::string> vars) {
    vars.insert(master.begin(), master.end());
    return vars;
  };
  const Case cases[] = {
      {with({{"RANK", "0"}}), {}, 4, "WORLD_SIZE is not"},
      {with({{"RANK", "x"}, {"WORLD_SIZE", "2"}}),
       {},
       4,
       "RANK=\"x\" (from the environment): want this process's rank in [0, "
       "WORLD_SIZE=2)"},
      {with({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), {}, 4, "RANK=\"2\""},
      {with({{"RANK", "0"}, {"WORLD_SIZE", "0"}}),
       {},
       4,
       "WORLD_SIZE=\"0\" (from the environment): want the job's ranks, in [1, "
       "1048576]"},
      {with({{"RANK", "0"}, {"WORLD_SIZE", "6"}}),
       {"world_size"},
       4,
       "--world_size=4 disagrees with WORLD_SIZE=6 from the environment"},
      {with({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "-1"}}),
       {},
       4,
       "LOCAL_RANK=\"-1\" (from the environment): want this rank's index on "
       "its host, in [0, 2)"},
      {with({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "3"}}),
       {},
       4,
       "LOCAL_WORLD_SIZE=\"3\""},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}},
       {},
       4,
       "set MASTER_ADDR and MASTER_PORT"},
      {{{"RANK", "0"},
        {"WORLD_SIZE", "2"},
        {"MASTER_ADDR", "m"},
        {"MASTER_PORT", "70000"}},
       {},
       4,
       "MASTER_PORT=\"70000\" (from the environment): want a TCP port"},
  };
  for (const Case& c : cases) {
    TrainOptions o;
    o.world_size = c.world_size_flag;
    const absl::Status s = ApplyLaunchEnvironment(Env(c.vars), c.given, &o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

TEST(LaunchEnvironment, NumbersAreDigitsAlone) {
  for (const char* rank : {" 0", "+1", "0 ", "1e0", "0x1", "", "00000000001"}) {
    SCOPED_TRACE(rank);
    TrainOptions o;
    const absl::Status s = ApplyLaunchEnvironment(Env({{"RANK", rank},
                                                       {"WORLD_SIZE", "2"},
                                                       {"MASTER_ADDR", "m"},
                                                       {"MASTER_PORT", "1"}}),
                                                  {}, &o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    if (rank[0] != '\0') {
      EXPECT_EQ(s.message(),
                absl::StrCat("RANK=\"", rank,
                             "\" (from the environment): want this process's "
                             "rank in [0, WORLD_SIZE=2)"));
    }
  }
  TrainOptions o;
  EXPECT_EQ(ApplyLaunchEnvironment(Env({{"RANK", "1"},
                                        {"WORLD_SIZE", "2"},
                                        {"MASTER_ADDR", "m"},
                                        {"MASTER_PORT", "\x01"}}),
                                   {}, &o)
                .message(),
            "MASTER_PORT=\"\\x01\" (from the environment): want a TCP port in "
            "[1, 65535]");
}

// The command line wins, but --backend=inproc cannot run the one rank the
// environment makes of this process: refused naming both.
TEST(LaunchEnvironment, InprocOnTheCommandLineContradictsTheEnvironment) {
  const auto env = Env({{"RANK", "0"},
                        {"WORLD_SIZE", "2"},
                        {"MASTER_ADDR", "127.0.0.1"},
                        {"MASTER_PORT", "29801"}});
  TrainOptions o;
  o.backend = Backend::kInProcess;
  const absl::Status s = ApplyLaunchEnvironment(env, {"backend"}, &o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "--backend=inproc runs every rank as a thread of one process, but "
            "RANK=0 and WORLD_SIZE=2 in the environment make this process one "
            "rank of 2: give --backend=gloo (or nccl), or unset RANK to train "
            "as one process");
  TrainOptions nccl;
  nccl.backend = Backend::kNccl;
  ASSERT_TRUE(ApplyLaunchEnvironment(env, {"backend"}, &nccl).ok());
  EXPECT_EQ(nccl.backend, Backend::kNccl);
  TrainOptions unset;
  ASSERT_TRUE(ApplyLaunchEnvironment(env, {}, &unset).ok());
  EXPECT_EQ(unset.backend, Backend::kGloo);
}

TEST(LaunchEnvironment, SrunTasksAreRanks) {
  TrainOptions o;
  ASSERT_EQ(ApplyLaunchEnvironment(
                Env({{"SLURM_PROCID", "5"},
                     {"SLURM_NTASKS", "8"},
                     {"SLURM_LOCALID", "1"},
                     {"SLURM_NTASKS_PER_NODE", "2"},
                     {"SLURM_JOB_NODELIST", "gpu-a[07-10,12],gpu-b3"}}),
                {}, &o),
            absl::OkStatus());
  EXPECT_EQ(o.rank, 5);
  EXPECT_EQ(o.world_size, 8);
  EXPECT_EQ(o.local_rank, 1);
  EXPECT_EQ(o.local_world_size, 2);
  EXPECT_EQ(o.core_sharing_ranks, 2);
  EXPECT_EQ(o.backend, Backend::kGloo);
  EXPECT_EQ(o.rendezvous, "tcp://gpu-a07:29500");
  // MASTER_ADDR and MASTER_PORT, LOCAL_RANK and RANK come first.
  TrainOptions m;
  ASSERT_EQ(ApplyLaunchEnvironment(Env({{"SLURM_PROCID", "5"},
                                        {"SLURM_NTASKS", "8"},
                                        {"SLURM_LOCALID", "1"},
                                        {"LOCAL_RANK", "0"},
                                        {"SLURM_JOB_NODELIST", "n[1-8]"},
                                        {"MASTER_ADDR", "10.0.0.9"},
                                        {"MASTER_PORT", "6000"}}),
                                   {}, &m),
            absl::OkStatus());
  EXPECT_EQ(m.rendezvous, "tcp://10.0.0.9:6000");
  EXPECT_EQ(m.local_rank, 0);
  TrainOptions r;
  ASSERT_EQ(ApplyLaunchEnvironment(Env({{"SLURM_PROCID", "5"},
                                        {"SLURM_NTASKS", "8"},
                                        {"RANK", "2"},
                                        {"WORLD_SIZE", "4"},
                                        {"MASTER_ADDR", "m"},
                                        {"MASTER_PORT", "1"}}),
                                   {}, &r),
            absl::OkStatus());
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.world_size, 4);
}

TEST(LaunchEnvironment, OneSlurmTaskTrainsAsOneProcess) {
  TrainOptions o;
  const TrainOptions before;
  ASSERT_EQ(ApplyLaunchEnvironment(Env({{"SLURM_PROCID", "0"},
                                        {"SLURM_NTASKS", "1"},
                                        {"SLURM_JOB_NODELIST", "n1"}}),
                                   {}, &o),
            absl::OkStatus());
  EXPECT_EQ(o.rank, -1);
  EXPECT_EQ(o.world_size, before.world_size);
}

TEST(LaunchEnvironment, BadSlurmVariablesAreNamed) {
  struct Case {
    std::map<std::string, std::string> vars;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {{{"SLURM_PROCID", "8"}, {"SLURM_NTASKS", "8"}},
            "SLURM_PROCID=\"8\" (from the environment): want this process's "
            "rank in [0, SLURM_NTASKS=8)"},
           {{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "x"}},
            "SLURM_NTASKS=\"x\" (from the environment): want the job's ranks, "
            "in [1, 1048576]"},
           {{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}},
            "SLURM_PROCID and SLURM_NTASKS are set in the environment but not "
            "where the ranks meet: set MASTER_ADDR (and MASTER_PORT, default "
            "29500), SLURM_JOB_NODELIST, or CHUNKZERO_RENDEZVOUS, or give "
            "--rendezvous"},
           {{{"SLURM_PROCID", "1"},
             {"SLURM_NTASKS", "2"},
             {"SLURM_JOB_NODELIST", "n[1-2"}},
            "SLURM_JOB_NODELIST=\"n[1-2\" (from the environment): unbalanced "
            "brackets"},
           {{{"SLURM_PROCID", "1"},
             {"SLURM_NTASKS", "2"},
             {"SLURM_LOCALID", "2"},
             {"SLURM_JOB_NODELIST", "n1"}},
            "SLURM_LOCALID=\"2\" (from the environment): want this rank's "
            "index on its host, in [0, 2)"},
       }) {
    SCOPED_TRACE(c.says);
    TrainOptions o;
    const absl::Status s = ApplyLaunchEnvironment(Env(c.vars), {}, &o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), c.says);
  }
}

TEST(FirstSlurmHost, ExpandsTheFirstEntry) {
  EXPECT_EQ(*FirstSlurmHost("node1"), "node1");
  EXPECT_EQ(*FirstSlurmHost("node1,node2"), "node1");
  EXPECT_EQ(*FirstSlurmHost("node[01-04,07],gpu5"), "node01");
  EXPECT_EQ(*FirstSlurmHost("node[7,9]"), "node7");
  EXPECT_EQ(*FirstSlurmHost("rack[3-4]-n"), "rack3-n");
  for (const char* bad : {"", "[1-2]x[", "n[]", "n[a-b]", "n[[1]]", "n]1["}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(FirstSlurmHost(bad).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace chunkzero
