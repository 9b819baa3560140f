#include "engine/engine_options.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::testing::HasSubstr;

TEST(PlaceMemory, OnTheHostEverythingStaysThere) {
  EngineOptions options;
  options.chunk_size = 4096;
  options.layout = ChunkLayout::kReplicated;
  options.comm_timeout = absl::Seconds(7);
  const absl::StatusOr<Placement> where = PlaceMemory(options);
  ASSERT_TRUE(where.ok()) << where.status();
  EXPECT_EQ(where->chunks.chunk_size, 4096);
  EXPECT_EQ(where->chunks.layout, ChunkLayout::kReplicated);
  EXPECT_EQ(where->chunks.device, Device::Cpu());
  EXPECT_FALSE(where->chunks.rest_device.has_value());
  EXPECT_FALSE(where->chunks.auto_residency);
  EXPECT_EQ(where->chunks.comm_timeout, absl::Seconds(7));
  EXPECT_FALSE(where->masters.has_value());
  EXPECT_FALSE(where->limited.has_value());
}

TEST(PlaceMemory, EachOffloadPolicyMovesWhatItNames) {
  struct Case {
    OffloadPolicy offload;
    bool params_rest_on_host;
    bool auto_residency;
    bool masters_on_host;
  };
  for (const Case& c : {Case{OffloadPolicy::kNone, false, false, false},
                        Case{OffloadPolicy::kOptimizer, false, false, true},
                        Case{OffloadPolicy::kParams, true, false, true},
                        Case{OffloadPolicy::kAuto, true, true, true}}) {
    EngineOptions options;
    options.device = Device::Simulated(0);
    options.offload = c.offload;
    const absl::StatusOr<Placement> where = PlaceMemory(options);
    ASSERT_TRUE(where.ok()) << where.status();
    SCOPED_TRACE(static_cast<int>(c.offload));
    EXPECT_EQ(where->chunks.device, Device::Simulated(0));
    EXPECT_EQ(where->chunks.rest_device.has_value(), c.params_rest_on_host);
    if (c.params_rest_on_host) {
      EXPECT_EQ(*where->chunks.rest_device, Device::Cpu());
    }
    EXPECT_EQ(where->chunks.auto_residency, c.auto_residency);
    EXPECT_EQ(where->masters.has_value(), c.masters_on_host);
    if (c.masters_on_host) {
      EXPECT_EQ(*where->masters, Device::Cpu());
    }
    EXPECT_FALSE(where->limited.has_value());
  }
}

// The NVMe tier takes the masters to host memory first (and from there to
// disk), and works where the model computes on the host.
TEST(PlaceMemory, NvmeNeedsAPathNotADevice) {
  EngineOptions options;
  options.offload = OffloadPolicy::kNvme;
  absl::StatusOr<Placement> where = PlaceMemory(options);
  EXPECT_EQ(where.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(where.status().message(),
              HasSubstr("EngineOptions::nvme_path is empty"));
  options.nvme_path = "/mnt/nvme";
  where = PlaceMemory(options);
  ASSERT_TRUE(where.ok()) << where.status();
  EXPECT_EQ(where->chunks.device, Device::Cpu());
  EXPECT_FALSE(where->chunks.rest_device.has_value());
  EXPECT_EQ(*where->masters, Device::Cpu());
}

TEST(PlaceMemory, TheLimitAppliesToTheComputeDevice) {
  EngineOptions options;
  options.device = Device::Cuda(3);
  options.device_memory_limit = 1 << 20;
  const absl::StatusOr<Placement> where = PlaceMemory(options);
  ASSERT_TRUE(where.ok()) << where.status();
  ASSERT_TRUE(where->limited.has_value());
  EXPECT_EQ(*where->limited, Device::Cuda(3));
  EXPECT_EQ(where->chunks.device, Device::Cuda(3));
}

TEST(PlaceMemory, RefusesWhatCannotBePlacedNamingTheOption) {
  struct Case {
    const char* what;
    EngineOptions options;
    const char* names;
  };
  std::vector<Case> cases;
  {
    EngineOptions o;
    o.offload = OffloadPolicy::kOptimizer;
    cases.push_back({"offload on the host", o, "EngineOptions::offload"});
  }
  {
    EngineOptions o;
    o.device_memory_limit = 1024;
    cases.push_back(
        {"limit on the host", o, "EngineOptions::device_memory_limit caps"});
  }
  {
    EngineOptions o;
    o.device = Device::Simulated(0);
    o.device_memory_limit = -1;
    cases.push_back(
        {"negative limit", o, "EngineOptions::device_memory_limit is -1"});
  }
  {
    EngineOptions o;
    o.chunk_size = 0;
    cases.push_back({"empty chunks", o, "EngineOptions::chunk_size is 0"});
  }
  {
    EngineOptions o;
    o.precision = DType::kI32;
    cases.push_back({"integer precision", o, "EngineOptions::precision is"});
  }
  {
    EngineOptions o;
    o.max_prefetch = -2;
    cases.push_back({"prefetch", o, "EngineOptions::max_prefetch is -2"});
  }
  {
    EngineOptions o;
    o.comm_timeout = absl::ZeroDuration();
    cases.push_back({"no time", o, "EngineOptions::comm_timeout is 0"});
  }
  for (const Case& c : cases) {
    const absl::StatusOr<Placement> where = PlaceMemory(c.options);
    EXPECT_EQ(where.status().code(), absl::StatusCode::kInvalidArgument)
        << c.what;
    EXPECT_THAT(std::string(where.status().message()), HasSubstr(c.names))
        << c.what;
  }
}

}  // namespace
}  // namespace chunkzero
