#include "tensor/device.h"

#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

TEST(Device, NamesRoundTrip) {
  for (Device d : {Device::Cpu(), Device::Cuda(0), Device::Cuda(3),
                   Device::Simulated(0), Device::Simulated(7)}) {
    SCOPED_TRACE(d.ToString());
    absl::StatusOr<Device> parsed = ParseDevice(d.ToString());
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(Device::Cuda(2).ToString(), "cuda:2");
  EXPECT_EQ(Device::Simulated(1).ToString(), "sim:1");
}

TEST(Device, BadNamesAreInvalidArgument) {
  for (const char* text :
       {"", "gpu", "cuda", "cuda:", "cuda:-1", "sim:x", "cpu:0", "cuda:1x"}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(ParseDevice(text).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(Device, HostAccessibility) {
  EXPECT_TRUE(Device::Cpu().is_host_accessible());
  EXPECT_TRUE(Device::Simulated(0).is_host_accessible());
  EXPECT_FALSE(Device::Cuda(0).is_host_accessible());
}

TEST(Device, ComparesAndHashesByTypeAndIndex) {
  EXPECT_NE(Device::Cuda(0), Device::Simulated(0));
  EXPECT_NE(Device::Cuda(0), Device::Cuda(1));
  EXPECT_TRUE(Device::Cpu() < Device::Cuda(0));
  absl::flat_hash_set<Device> set = {Device::Cpu(), Device::Cuda(1),
                                     Device::Cuda(1), Device::Simulated(1)};
  EXPECT_EQ(set.size(), 3u);
  std::ostringstream os;
  os << Device::Simulated(2);
  EXPECT_EQ(os.str(), "sim:2");
}

}  // namespace
}  // namespace chunkzero
