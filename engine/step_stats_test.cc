#include "engine/step_stats.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace chunkzero {
namespace {

TEST(RankStepMetrics, EncodingRoundTripsAndHasAFixedLength) {
  RankStepMetrics m;
  m.peak_bytes = {{"param", 4096}, {"master", 8192}};
  m.peak_total_bytes = 12288;
  m.peak_device_bytes = 17;
  m.peak_host_bytes = 19;
  m.h2d_bytes = 23;
  m.d2h_bytes = 29;
  m.disk = true;
  m.disk_read_bytes = 31;
  m.disk_written_bytes = 37;
  m.disk_wait_s = 0.125;
  m.disk_busy_s = 0.5;
  m.comm_bytes = {{"all_gather", 1397760}, {"reduce_scatter", 698880}};
  const std::vector<int64_t> encoded = EncodeRankStepMetrics(m);
  EXPECT_EQ(encoded.size(), EncodeRankStepMetrics(RankStepMetrics()).size());
  const RankStepMetrics back = DecodeRankStepMetrics(encoded);
  // Every category comes back, absent ones as 0; only the collectives that
  // were present come back.
  for (const auto& [category, bytes] : back.peak_bytes) {
    const auto it = m.peak_bytes.find(category);
    EXPECT_EQ(bytes, it == m.peak_bytes.end() ? 0 : it->second) << category;
  }
  EXPECT_EQ(back.peak_bytes.at("master"), 8192);
  EXPECT_EQ(back.peak_total_bytes, 12288);
  EXPECT_EQ(back.peak_device_bytes, 17);
  EXPECT_EQ(back.peak_host_bytes, 19);
  EXPECT_EQ(back.h2d_bytes, 23);
  EXPECT_EQ(back.d2h_bytes, 29);
  EXPECT_TRUE(back.disk);
  EXPECT_EQ(back.disk_read_bytes, 31);
  EXPECT_EQ(back.disk_written_bytes, 37);
  EXPECT_EQ(back.disk_wait_s, 0.125);
  EXPECT_EQ(back.disk_busy_s, 0.5);
  EXPECT_EQ(back.disk_hidden_s(), 0.375);
  EXPECT_FALSE(DecodeRankStepMetrics(EncodeRankStepMetrics({})).disk);
  EXPECT_EQ(back.comm_bytes, m.comm_bytes);
}

TEST(RankStepMetrics, MeasureCountsPeaksAndOnlyCollectivesThatRan) {
  MemoryTracker tracker;
  tracker.Add(Device::Cpu(), MemoryCategory::kParam, 1000);
  tracker.Add(Device::Cpu(), MemoryCategory::kMaster, 300);
  tracker.Subtract(Device::Cpu(), MemoryCategory::kParam, 1000);
  comm::RecordingSnapshot snapshot;
  snapshot.per_kind[static_cast<int>(comm::CollectiveKind::kAllReduce)].calls =
      2;
  snapshot.per_kind[static_cast<int>(comm::CollectiveKind::kAllReduce)]
      .bus_bytes = 180.4;
  tracker.Add(Device::Simulated(0), MemoryCategory::kActivation, 70);
  const RankStepMetrics m = MeasureRankStep(tracker, snapshot, 11, 13);
  EXPECT_EQ(m.peak_bytes.at("param"), 1000);
  EXPECT_EQ(m.peak_bytes.at("master"), 300);
  EXPECT_EQ(m.peak_bytes.at("activation"), 70);
  // The peak of the sum: the activation came after the param went.
  EXPECT_EQ(m.peak_total_bytes, 1300);
  EXPECT_EQ(m.peak_device_bytes, 70);
  EXPECT_EQ(m.peak_host_bytes, 1300);
  EXPECT_EQ(m.h2d_bytes, 11);
  EXPECT_EQ(m.d2h_bytes, 13);
  EXPECT_EQ(m.comm_bytes,
            (std::map<std::string, int64_t>{{"all_reduce", 180}}));
}

// A rank computing on the host: its memory is counted once, as the host's,
// and it has no device peak.
TEST(RankStepMetrics, OnTheHostEachByteCountsOnce) {
  EXPECT_EQ(MeasuredDevices(Device::Cpu()), std::vector<Device>{Device::Cpu()});
  EXPECT_EQ(MeasuredDevices(Device::Cuda(2)),
            (std::vector<Device>{Device::Cpu(), Device::Cuda(2)}));
  MemoryTracker tracker;
  tracker.Add(Device::Cpu(), MemoryCategory::kParam, 1000);
  const RankStepMetrics m =
      MeasureRankStep(tracker, comm::RecordingSnapshot{}, 0, 0, Device::Cpu());
  EXPECT_EQ(m.peak_bytes.at("param"), 1000);
  EXPECT_EQ(m.peak_host_bytes, 1000);
  EXPECT_EQ(m.peak_device_bytes, 0);
}

}  // namespace
}  // namespace chunkzero
