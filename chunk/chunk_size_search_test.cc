#include "chunk/chunk_size_search.h"

#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

TEST(PackInOrder, PacksGreedilyInOrder) {
  // 6 | 5 4 | 3 with room for 10 each: 3 chunks, 30 allocated, 18 used.
  absl::StatusOr<ChunkPacking> p = PackInOrder({6, 5, 4, 3}, 10);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->chunk_size, 10);
  EXPECT_EQ(p->num_chunks, 3);
  EXPECT_EQ(p->used_elements, 18);
  EXPECT_EQ(p->wasted_elements, 12);
  EXPECT_DOUBLE_EQ(p->utilisation, 0.6);
}

TEST(PackInOrder, ExactFitAndZeroSizedTensors) {
  absl::StatusOr<ChunkPacking> p = PackInOrder({1, 8, 0, 8, 1}, 9);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->num_chunks, 2);
  EXPECT_EQ(p->wasted_elements, 0);
  EXPECT_DOUBLE_EQ(p->utilisation, 1.0);
  absl::StatusOr<ChunkPacking> none = PackInOrder({}, 9);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->num_chunks, 0);
  EXPECT_DOUBLE_EQ(none->utilisation, 1.0);
}

TEST(PackInOrder, TooLargeOrNegativeIsNamed) {
  EXPECT_EQ(PackInOrder({3, 11}, 10).status().message(),
            "tensor #1 has 11 elements and does not fit in a chunk of 10 "
            "elements");
  EXPECT_EQ(PackInOrder({-2}, 10).status().message(),
            "tensor #0 has negative size -2");
  EXPECT_EQ(PackInOrder({1}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SearchChunkSize, FindsTheBestUtilisation) {
  // Candidates 6..12 (the largest tensor is 6): utilisations are
  // 6: .75, 7: .857 (6 | 5 | 4 3), 8: .75, 9: .667, 10: .6, 11: .818,
  // 12: .75.
  ChunkSizeSearchOptions options;
  options.min_chunk_size = 1;
  options.max_chunk_size = 12;
  options.grid = 1;
  absl::StatusOr<ChunkSizeReport> r = SearchChunkSize({6, 5, 4, 3}, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->candidates_tried, 7);
  EXPECT_EQ(r->best.chunk_size, 7);
  EXPECT_EQ(r->best.num_chunks, 3);
  EXPECT_EQ(r->best.wasted_elements, 3);
  EXPECT_DOUBLE_EQ(r->best.utilisation, 18.0 / 21);
}

TEST(SearchChunkSize, PrefersTheSmallerSizeOnATie) {
  // 4 4 | 4 4 fills 8 exactly and 4 4 4 4 fills 16 exactly.
  ChunkSizeSearchOptions options;
  options.min_chunk_size = 8;
  options.max_chunk_size = 16;
  options.grid = 8;
  absl::StatusOr<ChunkSizeReport> r = SearchChunkSize({4, 4, 4, 4}, options);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->best.chunk_size, 8);
  EXPECT_DOUBLE_EQ(r->best.utilisation, 1.0);
}

TEST(SearchChunkSize, ReportsWhatReorderingWouldGain) {
  // Registration order 2 9 2 9 2 over 9..13: best is 13 (2 9 2 | 9 2,
  // 24 of 26). Sorted 9 9 2 2 2 and small-last (2s are below 13/4) give the
  // same order, also best at 13. Over 9..12 alone registration order peaks
  // at 11 (2 9 | 2 9 | 2: 24/33) while sorted peaks at 9 (9 | 9 | 2 2 2:
  // 24/27).
  ChunkSizeSearchOptions options;
  options.min_chunk_size = 9;
  options.max_chunk_size = 12;
  options.grid = 1;
  options.small_tensor_fraction = 0.25;
  absl::StatusOr<ChunkSizeReport> r = SearchChunkSize({2, 9, 2, 9, 2}, options);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->best.chunk_size, 11);
  EXPECT_DOUBLE_EQ(r->best.utilisation, 24.0 / 33);
  EXPECT_EQ(r->sorted_by_size.chunk_size, 9);
  EXPECT_DOUBLE_EQ(r->sorted_by_size.utilisation, 24.0 / 27);
  EXPECT_EQ(r->small_together.chunk_size, 9);
  EXPECT_EQ(r->small_together.num_chunks, 3);

  options.max_chunk_size = 13;
  r = SearchChunkSize({2, 9, 2, 9, 2}, options);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->best.chunk_size, 13);
  EXPECT_EQ(r->best.wasted_elements, 2);
  EXPECT_NE(r->Summary().find("registration order: chunk size 13 elements: 2 "
                              "chunks, utilisation 92.31%, 2 elements wasted"),
            std::string::npos)
      << r->Summary();
}

TEST(SearchChunkSize, CandidatesFollowAlignment) {
  // World size 4: candidates are multiples of 4 starting at the largest
  // tensor (10) rounded up: 12, 16 (12 + 3 rounded up), 20.
  ChunkSizeSearchOptions options;
  options.min_chunk_size = 1;
  options.max_chunk_size = 20;
  options.grid = 3;
  options.alignment = 4;
  absl::StatusOr<ChunkSizeReport> r = SearchChunkSize({10, 10}, options);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->candidates_tried, 3);
  EXPECT_EQ(r->best.chunk_size, 20);
  EXPECT_EQ(r->best.chunk_size % 4, 0);
}

TEST(SearchChunkSize, BadOptionsAreInvalidArgument) {
  ChunkSizeSearchOptions options;
  options.min_chunk_size = 1;
  options.max_chunk_size = 8;
  options.grid = 1;
  absl::Status s = SearchChunkSize({10}, options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("largest tensor 10"), std::string::npos) << s;
  options.grid = 0;
  EXPECT_EQ(SearchChunkSize({1}, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.grid = 1;
  EXPECT_EQ(SearchChunkSize({1, -1}, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
// A maximum near the int64 limit used to overflow RoundUp(size + grid) and
// loop until memory ran out.
TEST(SearchChunkSize, HugeSizesNeitherOverflowNorLoop) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  ChunkSizeSearchOptions options;
  options.min_chunk_size = kMax - 10;
  options.max_chunk_size = kMax;
  options.grid = 4;
  options.alignment = 1;
  absl::StatusOr<ChunkSizeReport> report = SearchChunkSize({3, 5}, options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->candidates_tried, 3);  // kMax - 10, - 6, - 2.
  EXPECT_EQ(report->best.chunk_size, kMax - 10);
  EXPECT_EQ(report->best.num_chunks, 1);

  options.alignment = 8;  // kMax - 10 rounds up past kMax.
  options.min_chunk_size = kMax - 2;
  EXPECT_EQ(SearchChunkSize({3, 5}, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SearchChunkSize, TooManyCandidatesIsInvalidArgument) {
  ChunkSizeSearchOptions options;
  options.min_chunk_size = 1;
  options.max_chunk_size = std::numeric_limits<int64_t>::max();
  options.grid = 1;
  const absl::Status status = SearchChunkSize({3, 5}, options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              ::testing::HasSubstr("would try more than 1048576 candidates"));
}

TEST(PackInOrder, AllocatedElementsOverflowIsInvalidArgument) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  absl::StatusOr<ChunkPacking> one = PackInOrder({3, 5}, kMax);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->num_chunks, 1);
  EXPECT_EQ(one->wasted_elements, kMax - 8);
  // The sizes' sum overflows (UBSAN caught it being added unchecked).
  absl::Status sum =
      PackInOrder({kMax / 2 + 1, kMax / 2 + 1}, kMax / 2 + 1).status();
  EXPECT_EQ(sum.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sum.message(),
            "tensors #0 to #1 hold more elements than an int64 counts");
  // The sum fits, three chunks of kMax / 3 + 1 do not.
  absl::Status chunks =
      PackInOrder({kMax / 3, kMax / 3, 2}, kMax / 3 + 1).status();
  EXPECT_EQ(chunks.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(chunks.message(),
            absl::StrCat("3 chunks of ", kMax / 3 + 1,
                         " elements hold more elements than an int64 counts"));
}

}  // namespace chunkzero
