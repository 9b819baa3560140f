#include "base/system_memory.h"

#include <unistd.h>

#include "gtest/gtest.h"

namespace chunkzero {
namespace {

TEST(AvailableMemoryBytes, PositiveAndAtMostThePhysicalMemory) {
  absl::StatusOr<int64_t> available = AvailableMemoryBytes();
  ASSERT_TRUE(available.ok()) << available.status();
  const int64_t physical =
      static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  EXPECT_GT(*available, 0);
  EXPECT_LE(*available, physical);
}

TEST(FormatBytes, BinaryUnits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(3.0 * (int64_t{1} << 40)), "3.00 TiB");
  EXPECT_EQ(FormatBytes(1.5 * (int64_t{1} << 60) * 1024), "1536.00 EiB");
}

}  // namespace
}  // namespace chunkzero
