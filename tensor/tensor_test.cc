#include "tensor/tensor.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor/half.h"

namespace chunkzero {
namespace {

using ::testing::ElementsAre;

std::vector<float> Iota(int n, float start = 0) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + i;
  return v;
}

TEST(Tensor, ShapeHelpers) {
  EXPECT_EQ(NumElements(Shape{2, 3, 4}), 24);
  EXPECT_EQ(NumElements(Shape{}), 1);
  EXPECT_EQ(NumElements(Shape{5, 0}), 0);
  EXPECT_EQ(ShapeToString(Shape{768, 2304}), "[768, 2304]");
}

TEST(Tensor, EmptyHasShapeStridesAndBytes) {
  absl::StatusOr<Tensor> t = Tensor::Empty({2, 3, 4}, DType::kF16);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->defined());
  EXPECT_EQ(t->numel(), 24);
  EXPECT_EQ(t->nbytes(), 48u);
  EXPECT_EQ(t->rank(), 3);
  EXPECT_THAT(t->strides(), ElementsAre(12, 4, 1));
  EXPECT_EQ(t->device(), Device::Cpu());
  EXPECT_TRUE(t->is_materialized());
  EXPECT_NE(t->data<uint16_t>(), nullptr);
  EXPECT_EQ(t->data<float>(), nullptr);  // Wrong element size.
}

TEST(Tensor, NegativeDimensionIsInvalid) {
  EXPECT_EQ(Tensor::Empty({2, -1}, DType::kF32).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Tensor, UndefinedTensor) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.raw_data(), nullptr);
  EXPECT_EQ(t.DebugString(), "undefined tensor");
}

TEST(Tensor, FromFloatsRoundsTo16Bit) {
  absl::StatusOr<Tensor> t =
      Tensor::FromFloats({1.0f, 0.1f, 65520.0f}, {3}, DType::kF16);
  ASSERT_TRUE(t.ok());
  EXPECT_THAT(
      std::vector<uint16_t>(t->data<uint16_t>(), t->data<uint16_t>() + 3),
      ElementsAre(0x3c00, 0x2e66, 0x7c00));
  absl::StatusOr<Tensor> b =
      Tensor::FromFloats({1.0f, -2.0f}, {2}, DType::kBF16);
  ASSERT_TRUE(b.ok());
  EXPECT_THAT(*b->ToFloats(), ElementsAre(1.0f, -2.0f));
  EXPECT_EQ(Tensor::FromFloats({1.0f}, {2}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Tensors hold every DType; only the compute types convert to and from
// floats.
TEST(Tensor, HoldsEveryDTypeButConvertsOnlyComputeTypes) {
  absl::StatusOr<Tensor> ids = Tensor::Zeros({3}, DType::kI64);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->nbytes(), 24u);
  ids->data<int64_t>()[2] = int64_t{1} << 60;
  EXPECT_EQ(ids->data<int64_t>()[2], int64_t{1} << 60);
  EXPECT_EQ(ids->ToFloats().status(),
            absl::InvalidArgumentError(absl::StrCat(
                ids->DebugString(), ": i64 is not f32, f16 or bf16")));
  EXPECT_EQ(Tensor::FromFloats({1.0f}, {1}, DType::kF64).status(),
            absl::InvalidArgumentError(
                "Tensor::FromFloats: f64 is not f32, f16 or bf16"));
  const DType bad = static_cast<DType>(9);
  EXPECT_EQ(Tensor::Empty({2}, bad).status(),
            absl::InvalidArgumentError("Tensor::Empty: unknown dtype value 9"));
  EXPECT_EQ(Tensor::View(ids->storage(), 0, {1}, bad).status(),
            absl::InvalidArgumentError("Tensor::View: unknown dtype value 9"));
}

TEST(Tensor, ZerosIsZero) {
  Tensor t = *Tensor::Zeros({5}, DType::kBF16, Device::Simulated(0));
  EXPECT_THAT(*t.ToFloats(), ElementsAre(0, 0, 0, 0, 0));
}

TEST(Tensor, SliceReshapeAndRangeShareStorage) {
  Tensor t = *Tensor::FromFloats(Iota(12), {4, 3});
  Tensor rows = *t.Slice(1, 3);
  EXPECT_THAT(rows.shape(), ElementsAre(2, 3));
  EXPECT_EQ(rows.byte_offset(), 12u);
  EXPECT_THAT(*rows.ToFloats(), ElementsAre(3, 4, 5, 6, 7, 8));
  Tensor col = *t.Reshape({12});
  Tensor mid = *col.ViewRange(5, {2, 2});
  EXPECT_THAT(*mid.ToFloats(), ElementsAre(5, 6, 7, 8));
  mid.data<float>()[0] = 50;
  EXPECT_EQ(t.data<float>()[5], 50);
  EXPECT_EQ(rows.storage(), t.storage());
  EXPECT_THAT(t.Flatten().shape(), ElementsAre(12));
  Tensor empty_rows = *t.Slice(4, 4);
  EXPECT_EQ(empty_rows.numel(), 0);
}

TEST(Tensor, OutOfRangeViewsAreInvalid) {
  Tensor t = *Tensor::Empty({4, 3}, DType::kF32);
  EXPECT_EQ(t.Slice(3, 5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Slice(-1, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Reshape({5, 3}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.ViewRange(10, {3}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Tensor::View(t.storage(), 2, {1}, DType::kF32).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status too_big =
      Tensor::View(t.storage(), 40, {3}, DType::kF32).status();
  EXPECT_EQ(too_big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(too_big.message(),
            "view f32[3] at byte 40 does not fit in a storage of 48 bytes");
}

// The central promise: a view never caches a pointer, so it follows its
// storage through free, reallocation and device moves.
TEST(Tensor, ViewsFollowStorageThroughFreeReallocAndMove) {
  std::shared_ptr<Storage> storage = *Storage::Create(64, Device::Cpu());
  Tensor a = *Tensor::View(storage, 0, {4}, DType::kF32);
  Tensor b = *Tensor::View(storage, 32, {8}, DType::kF16);
  std::vector<float> values = {1, 2, 3, 4};
  std::memcpy(a.raw_data(), values.data(), 16);
  for (int i = 0; i < 8; ++i) b.data<uint16_t>()[i] = FloatToHalfBits(i * 0.5f);

  ASSERT_TRUE(storage->MoveTo(Device::Simulated(0)).ok());
  EXPECT_EQ(a.device(), Device::Simulated(0));
  EXPECT_EQ(a.raw_data(), storage->data());
  EXPECT_EQ(b.raw_data(), static_cast<char*>(storage->data()) + 32);
  EXPECT_THAT(*a.ToFloats(), ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(*b.ToFloats(), ElementsAre(0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5));

  storage->Free();
  EXPECT_FALSE(a.is_materialized());
  EXPECT_EQ(a.raw_data(), nullptr);
  EXPECT_EQ(b.data<uint16_t>(), nullptr);
  EXPECT_EQ(a.ToFloats().status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(a.DebugString().find("not materialised"), std::string::npos);

  ASSERT_TRUE(storage->Allocate().ok());
  EXPECT_EQ(a.raw_data(), storage->data());
  a.data<float>()[3] = 9;
  EXPECT_EQ(static_cast<float*>(storage->data())[3], 9);

  ASSERT_TRUE(storage->MoveTo(Device::Cpu()).ok());
  EXPECT_EQ(a.device(), Device::Cpu());
  EXPECT_EQ(a.data<float>()[3], 9);
}

TEST(Tensor, CloneAndToCopyIntoNewStorage) {
  Tensor t = *Tensor::FromFloats(Iota(6, 1), {2, 3}, DType::kBF16);
  Tensor c = *t.Clone();
  EXPECT_NE(c.storage(), t.storage());
  EXPECT_THAT(*c.ToFloats(), ElementsAre(1, 2, 3, 4, 5, 6));
  Tensor s = *t.To(Device::Simulated(1));
  EXPECT_EQ(s.device(), Device::Simulated(1));
  EXPECT_THAT(s.shape(), ElementsAre(2, 3));
  EXPECT_THAT(*s.ToFloats(), ElementsAre(1, 2, 3, 4, 5, 6));
  EXPECT_EQ(t.To(Device::Cuda(64)).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(Tensor, CopyFromChecksDtypeCountAndMaterialisation) {
  Tensor dst = *Tensor::Zeros({3}, DType::kF32);
  Tensor src = *Tensor::FromFloats({7, 8, 9}, {3});
  ASSERT_TRUE(dst.CopyFrom(src).ok());
  EXPECT_THAT(*dst.ToFloats(), ElementsAre(7, 8, 9));
  Tensor f16 = *Tensor::Zeros({3}, DType::kF16);
  EXPECT_EQ(f16.CopyFrom(src).code(), absl::StatusCode::kInvalidArgument);
  Tensor four = *Tensor::Zeros({4}, DType::kF32);
  EXPECT_EQ(four.CopyFrom(src).code(), absl::StatusCode::kInvalidArgument);
  src.storage()->Free();
  EXPECT_EQ(dst.CopyFrom(src).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(Tensor, AccountsThroughStorageOptions) {
  MemoryTracker tracker;
  StorageOptions options;
  options.category = MemoryCategory::kMaster;
  options.tracker = &tracker;
  {
    Tensor t = *Tensor::Empty({10, 10}, DType::kF32, Device::Cpu(), options);
    Tensor view = *t.Slice(0, 5);
    EXPECT_EQ(tracker.Current(Device::Cpu(), MemoryCategory::kMaster), 400);
    Tensor copy = *t.To(Device::Simulated(0), options);
    EXPECT_EQ(tracker.Current(Device::Simulated(0), MemoryCategory::kMaster),
              400);
  }
  EXPECT_EQ(tracker.CurrentTotal(Device::Cpu()), 0);
  EXPECT_EQ(tracker.CurrentTotal(Device::Simulated(0)), 0);
  EXPECT_EQ(tracker.PeakTotal(Device::Cpu()), 400);
}

}  // namespace
}  // namespace chunkzero
