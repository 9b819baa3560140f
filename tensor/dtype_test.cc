#include "tensor/dtype.h"

#include <sstream>

#include "gtest/gtest.h"

namespace chunkzero {
namespace {

TEST(DType, ElementSizes) {
  EXPECT_EQ(ElementSize(DType::kF32), 4u);
  EXPECT_EQ(ElementSize(DType::kF16), 2u);
  EXPECT_EQ(ElementSize(DType::kBF16), 2u);
  EXPECT_EQ(ElementSize(DType::kU8), 1u);
  EXPECT_EQ(ElementSize(DType::kI32), 4u);
  EXPECT_EQ(ElementSize(DType::kI64), 8u);
  EXPECT_EQ(ElementSize(DType::kF64), 8u);
  EXPECT_EQ(ElementSize(static_cast<DType>(kNumDTypes)), 0u);
}

TEST(DType, OnlyF32F16AndBf16AreComputeTypes) {
  EXPECT_TRUE(IsComputeDType(DType::kF32));
  EXPECT_TRUE(IsComputeDType(DType::kF16));
  EXPECT_TRUE(IsComputeDType(DType::kBF16));
  EXPECT_FALSE(IsComputeDType(DType::kU8));
  EXPECT_FALSE(IsComputeDType(DType::kI32));
  EXPECT_FALSE(IsComputeDType(DType::kI64));
  EXPECT_FALSE(IsComputeDType(DType::kF64));
  EXPECT_TRUE(IsValidDType(DType::kF64));
  EXPECT_FALSE(IsValidDType(static_cast<DType>(kNumDTypes)));
}

TEST(DType, NamesRoundTrip) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType d = static_cast<DType>(i);
    SCOPED_TRACE(DTypeName(d));
    absl::StatusOr<DType> parsed = ParseDType(DTypeName(d));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_EQ(DTypeName(DType::kU8), "u8");
  EXPECT_EQ(DTypeName(DType::kI32), "i32");
  EXPECT_EQ(DTypeName(DType::kI64), "i64");
  EXPECT_EQ(DTypeName(DType::kF64), "f64");
}

TEST(DType, UnknownNameIsInvalidArgument) {
  absl::StatusOr<DType> parsed = ParseDType("f8");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("'f8'"), absl::string_view::npos);
}

TEST(DType, ChecksNameWhatAndTheDType) {
  EXPECT_TRUE(CheckValidDType(DType::kI64, "op").ok());
  EXPECT_EQ(CheckValidDType(static_cast<DType>(9), "op"),
            absl::InvalidArgumentError("op: unknown dtype value 9"));
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    EXPECT_TRUE(CheckComputeDType(d, "op").ok()) << d;
  }
  EXPECT_EQ(CheckComputeDType(DType::kU8, "Scale"),
            absl::InvalidArgumentError("Scale: u8 is not f32, f16 or bf16"));
  EXPECT_EQ(CheckComputeDType(static_cast<DType>(kNumDTypes), "Scale"),
            absl::InvalidArgumentError("Scale: unknown dtype value 7"));
}

TEST(DType, Streams) {
  std::ostringstream os;
  os << DType::kF16;
  EXPECT_EQ(os.str(), "f16");
}

}  // namespace
}  // namespace chunkzero
