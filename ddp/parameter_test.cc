#include "ddp/parameter.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::testing::HasSubstr;

TEST(Parameter, DeferredKnowsItsShapeAndMakesItsValuesOnce) {
  int calls = 0;
  Parameter p("fc.weight", Shape{2, 3}, [&]() -> absl::StatusOr<Tensor> {
    ++calls;
    return Tensor::FromFloats({1, 2, 3, 4, 5, 6}, {2, 3}, DType::kF32);
  });
  EXPECT_TRUE(p.is_deferred());
  EXPECT_EQ(p.shape(), (Shape{2, 3}));
  EXPECT_EQ(p.numel(), 6);
  EXPECT_FALSE(p.data().is_materialized());
  ASSERT_TRUE(p.Materialize().ok());
  EXPECT_FALSE(p.is_deferred());
  EXPECT_EQ(*p.data().ToFloats(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  ASSERT_TRUE(p.Materialize().ok());  // Made already: nothing to do.
  EXPECT_EQ(calls, 1);
}

TEST(Parameter, SetDataGivesTheShapeAndDeferKeepsIt) {
  // A placeholder filled later (examples/autoencoder does this).
  Parameter p("w", Tensor());
  p.set_data(*Tensor::Zeros({4, 16}, DType::kF32));
  EXPECT_EQ(p.shape(), (Shape{4, 16}));
  EXPECT_EQ(p.numel(), 64);
  p.Defer([]() { return Tensor::Zeros({4, 16}, DType::kF32); });
  EXPECT_TRUE(p.is_deferred());
  EXPECT_EQ(p.shape(), (Shape{4, 16}));
  EXPECT_FALSE(p.data().is_materialized());
  ASSERT_TRUE(p.Materialize().ok());
  EXPECT_EQ(p.shape(), (Shape{4, 16}));
}

TEST(Parameter, SetDataEndsTheDeferral) {
  int calls = 0;
  Parameter p("b", Shape{2}, [&]() -> absl::StatusOr<Tensor> {
    ++calls;
    return Tensor::Zeros({2}, DType::kF32);
  });
  p.set_data(*Tensor::FromFloats({7, 8}, {2}, DType::kF32));
  EXPECT_FALSE(p.is_deferred());
  ASSERT_TRUE(p.Materialize().ok());
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(*p.data().ToFloats(), (std::vector<float>{7, 8}));
}

TEST(Parameter, AFailedInitNamesTheParameterAndStaysDeferred) {
  Parameter failing("h.0.w", Shape{4}, []() -> absl::StatusOr<Tensor> {
    return absl::ResourceExhaustedError("no memory for 16 bytes");
  });
  absl::Status s = failing.Materialize();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "making parameter 'h.0.w': no memory for 16 bytes");
  EXPECT_TRUE(failing.is_deferred());

  Parameter misshapen("h.0.b", Shape{4}, []() -> absl::StatusOr<Tensor> {
    return Tensor::Zeros({2, 2}, DType::kF32);
  });
  s = misshapen.Materialize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("making parameter 'h.0.b': its init made"));
  EXPECT_THAT(s.message(), HasSubstr("expected shape [4]"));
  EXPECT_TRUE(misshapen.is_deferred());
  EXPECT_FALSE(misshapen.data().is_materialized());
}

}  // namespace
}  // namespace chunkzero
