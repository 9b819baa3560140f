#include "tensor/dtype.h"

#include <sstream>

#include "gtest/gtest.h"

namespace chunkzero {
namespace {

TEST(DType, ElementSizes) {
  EXPECT_EQ(ElementSize(DType::kF32), 4u);
  EXPECT_EQ(ElementSize(DType::kF16), 2u);
  EXPECT_EQ(ElementSize(DType::kBF16), 2u);
}

TEST(DType, NamesRoundTrip) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(d));
    absl::StatusOr<DType> parsed = ParseDType(DTypeName(d));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(DTypeName(DType::kBF16), "bf16");
}

TEST(DType, UnknownNameIsInvalidArgument) {
  absl::StatusOr<DType> parsed = ParseDType("f64");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("'f64'"), absl::string_view::npos);
}

TEST(DType, Streams) {
  std::ostringstream os;
  os << DType::kF16;
  EXPECT_EQ(os.str(), "f16");
}

}  // namespace
}  // namespace chunkzero
