#include "tools/train/token_data.h"

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace chunkzero {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A file under TEST_TMPDIR named after the test, holding `bytes`.
std::string WriteTestFile(const std::string& suffix, const std::string& bytes) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(
      tmp != nullptr ? tmp : "/tmp", "/token_data_test_",
      ::testing::UnitTest::GetInstance()->current_test_info()->name(), suffix);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  EXPECT_TRUE(out) << path;
  return path;
}

// The synthetic stream t[i] = i % 1000.
std::vector<int32_t> Synthetic(int64_t n) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>(i % 1000);
  return t;
}

TEST(TokenDataTest, FromTokensSizeAndVocabUsed) {
  const TokenData data = TokenData::FromTokens({3, 0, 41, 7});
  EXPECT_EQ(data.size(), 4);
  EXPECT_EQ(data.vocab_used(), 42);
  EXPECT_EQ(TokenData::FromTokens({}).vocab_used(), 0);
}

// The order of token_data.h, written out independently for each sequence:
// global sequence number q = ((step * A + micro) * W + rank) * B + b, where
// A is grad_accum, W the world size and B the batch; it starts at
// (q * T) mod (n - T).
TEST(TokenDataTest, FillBatchFollowsTheDocumentedOrder) {
  constexpr int64_t kN = 5003;  // Not a multiple of anything below.
  const TokenData data = TokenData::FromTokens(Synthetic(kN));
  struct Case {
    BatchOrder order;
    int64_t step;
    int micro;
    int rank;
  };
  const Case cases[] = {
      {{/*batch=*/1, /*world_size=*/1, /*grad_accum=*/1, /*seq_len=*/7},
       0,
       0,
       0},
      {{3, 4, 2, 16}, 0, 0, 0},
      {{3, 4, 2, 16}, 0, 1, 3},
      {{3, 4, 2, 16}, 5, 1, 2},
      {{3, 4, 2, 16}, 17, 0, 1},  // Wraps around the stream.
      {{2, 2, 1, 64}, 123, 0, 1},
      {{4, 1, 3, 10}, 1000, 2, 0},
  };
  for (const Case& c : cases) {
    const BatchOrder& o = c.order;
    SCOPED_TRACE(absl::StrCat("batch ", o.batch, " world ", o.world_size,
                              " accum ", o.grad_accum, " seq ", o.seq_len,
                              " step ", c.step, " micro ", c.micro, " rank ",
                              c.rank));
    const int64_t tokens = static_cast<int64_t>(o.batch) * o.seq_len;
    std::vector<int32_t> inputs(tokens, -1), targets(tokens, -1);
    ASSERT_TRUE(data.FillBatch(o, c.step, c.micro, c.rank,
                               absl::MakeSpan(inputs), absl::MakeSpan(targets))
                    .ok());
    for (int b = 0; b < o.batch; ++b) {
      const int64_t q =
          ((c.step * o.grad_accum + c.micro) * o.world_size + c.rank) *
              o.batch +
          b;
      const int64_t start = (q * o.seq_len) % (kN - o.seq_len);
      for (int i = 0; i < o.seq_len; ++i) {
        ASSERT_EQ(inputs[b * o.seq_len + i], (start + i) % 1000)
            << "sequence " << b << " position " << i;
        ASSERT_EQ(targets[b * o.seq_len + i], (start + i + 1) % 1000)
            << "sequence " << b << " position " << i;
      }
    }
  }
}

// One rank's micro-batch, inputs then targets.
struct Batch {
  std::vector<int32_t> inputs, targets;
};

Batch Fill(const TokenData& data, const BatchOrder& order, int64_t step,
           int micro, int rank) {
  Batch b;
  b.inputs.resize(static_cast<size_t>(order.batch) * order.seq_len);
  b.targets.resize(b.inputs.size());
  const absl::Status status =
      data.FillBatch(order, step, micro, rank, absl::MakeSpan(b.inputs),
                     absl::MakeSpan(b.targets));
  EXPECT_TRUE(status.ok()) << status;
  return b;
}

// A few starts spelled out by hand (n = 5003, T = 16, so n - T = 4987).
TEST(TokenDataTest, FillBatchHandComputedStarts) {
  const TokenData data = TokenData::FromTokens(Synthetic(5003));
  const BatchOrder order{/*batch=*/2, /*world_size=*/4, /*grad_accum=*/2,
                         /*seq_len=*/16};
  // Step 0, micro 0, rank 0: q = 0 and 1, starts 0 and 16.
  Batch b = Fill(data, order, 0, 0, 0);
  EXPECT_EQ(b.inputs[0], 0);
  EXPECT_EQ(b.inputs[16], 16);
  EXPECT_EQ(b.targets[15], 16);
  // Step 0, micro 1, rank 1: q = 8 + 2 = 10 and 11, starts 160 and 176.
  b = Fill(data, order, 0, 1, 1);
  EXPECT_EQ(b.inputs[0], 160);
  EXPECT_EQ(b.inputs[16], 176);
  // Step 20, micro 1, rank 3: q = (41 * 8) + 6 = 334, start 5344 mod 4987 =
  // 357; q = 335, start 5360 mod 4987 = 373.
  b = Fill(data, order, 20, 1, 3);
  EXPECT_EQ(b.inputs[0], 357);
  EXPECT_EQ(b.inputs[15], 372);
  EXPECT_EQ(b.targets[15], 373);
  EXPECT_EQ(b.inputs[16], 373);
  // Step 40, micro 1, rank 3: q = 81 * 8 + 6 = 654, start 10464 mod 4987 =
  // 490; the stream value is 490 % 1000.
  EXPECT_EQ(Fill(data, order, 40, 1, 3).inputs[0], 490);
}

// The last token a sequence can read is t[n - 1] (a target), never past it.
TEST(TokenDataTest, FillBatchStaysInsideTheStream) {
  const TokenData data = TokenData::FromTokens({10, 11, 12, 13, 14});
  const BatchOrder order{/*batch=*/3, /*world_size=*/1, /*grad_accum=*/1,
                         /*seq_len=*/2};
  // n - T = 3: q = 0, 1, 2 start at 0, 2, 1.
  const Batch b = Fill(data, order, 0, 0, 0);
  EXPECT_THAT(b.inputs, ElementsAre(10, 11, 12, 13, 11, 12));
  EXPECT_THAT(b.targets, ElementsAre(11, 12, 13, 14, 12, 13));
}

TEST(TokenDataTest, FillBatchRejectsShortStreamsAndWrongBuffers) {
  const BatchOrder order{/*batch=*/1, /*world_size=*/1, /*grad_accum=*/1,
                         /*seq_len=*/4};
  std::vector<int32_t> in(4), tgt(4);
  // Exactly seq_len tokens: no room for the shifted target.
  absl::Status status =
      TokenData::FromTokens({1, 2, 3, 4})
          .FillBatch(order, 0, 0, 0, absl::MakeSpan(in), absl::MakeSpan(tgt));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("4 tokens"));
  EXPECT_TRUE(
      TokenData::FromTokens({1, 2, 3, 4, 5})
          .FillBatch(order, 0, 0, 0, absl::MakeSpan(in), absl::MakeSpan(tgt))
          .ok());

  std::vector<int32_t> small(3);
  status = TokenData::FromTokens(Synthetic(100))
               .FillBatch(order, 0, 0, 0, absl::MakeSpan(small),
                          absl::MakeSpan(tgt));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  status =
      TokenData::FromTokens(Synthetic(100))
          .FillBatch(order, 0, 0, 0, absl::MakeSpan(in), absl::MakeSpan(small));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

TEST(TokenDataTest, FromTokenFileIsLittleEndianUint16) {
  // 0x0102 = 258, 0xFFFF = 65535, 0x00FF = 255, 0xFF00 = 65280, 0.
  const std::string bytes("\x02\x01\xFF\xFF\xFF\x00\x00\xFF\x00\x00", 10);
  const std::string path = WriteTestFile(".bin", bytes);
  absl::StatusOr<TokenData> data = TokenData::FromTokenFile(path, 65536);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->size(), 5);
  EXPECT_EQ(data->vocab_used(), 65536);
  const BatchOrder order{/*batch=*/1, /*world_size=*/1, /*grad_accum=*/1,
                         /*seq_len=*/4};
  const Batch b = Fill(*data, order, 0, 0, 0);
  EXPECT_THAT(b.inputs, ElementsAre(258, 65535, 255, 65280));
  EXPECT_THAT(b.targets, ElementsAre(65535, 255, 65280, 0));
}

TEST(TokenDataTest, FromTokenFileNamesTheFileAndPositionOfABadId) {
  // Ids 5, 9, 50257 (0xC451), 7: the third is outside GPT-2's vocabulary.
  const std::string bytes("\x05\x00\x09\x00\x51\xC4\x07\x00", 8);
  const std::string path = WriteTestFile(".bin", bytes);
  absl::StatusOr<TokenData> data = TokenData::FromTokenFile(path, 50257);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(data.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(data.status().message()), HasSubstr("token 2 "));
  EXPECT_THAT(std::string(data.status().message()), HasSubstr("50257"));
  // One more id in the vocabulary and it loads.
  EXPECT_TRUE(TokenData::FromTokenFile(path, 50258).ok());
}

TEST(TokenDataTest, Uint32FilesHoldLargeVocabularies) {
  // 128255 (0x0001F4FF, Llama 3's last id), 0x01020304 = 16909060, 7.
  const std::string bytes("\xFF\xF4\x01\x00\x04\x03\x02\x01\x07\x00\x00\x00",
                          12);
  const std::string path = WriteTestFile(".u32", bytes);
  absl::StatusOr<TokenData> data =
      TokenData::FromTokenFile(path, 128256, TokenDType::kU32);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().message(),
            absl::StrCat(path,
                         ": token 1 (byte offset 4) is 16909060, "
                         "outside the vocabulary of 128256"));
  data = TokenData::FromTokenFile(path, 16909061, TokenDType::kU32);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->size(), 3);
  EXPECT_EQ(data->vocab_used(), 16909061);
  const Batch b = Fill(*data, BatchOrder{1, 1, 1, 2}, 0, 0, 0);
  EXPECT_THAT(b.inputs, ElementsAre(128255, 16909060));
  // The same bytes as uint16: 0xF4FF first. (The next files replace this
  // one.)
  EXPECT_THAT(std::string(TokenData::FromTokenFile(path, 10, TokenDType::kU16)
                              .status()
                              .message()),
              HasSubstr("token 0 (byte offset 0) is 62719"));
  // Ids past 2^31 are refused, not wrapped to negative ones.
  const std::string high =
      WriteTestFile(".u32", std::string("\x00\x00\x00\x80", 4));
  EXPECT_THAT(
      std::string(TokenData::FromTokenFile(high, 1 << 30, TokenDType::kU32)
                      .status()
                      .message()),
      HasSubstr("is 2147483648, outside"));
  const std::string odd = WriteTestFile(".u32", std::string(6, '\0'));
  EXPECT_THAT(std::string(TokenData::FromTokenFile(odd, 10, TokenDType::kU32)
                              .status()
                              .message()),
              HasSubstr("6 bytes, not a whole number of uint32 token ids"));
}

TEST(TokenDataTest, FromTokenFileRejectsAnOddByteCount) {
  const std::string path =
      WriteTestFile(".bin", std::string("\x01\x00\x02", 3));
  absl::StatusOr<TokenData> data = TokenData::FromTokenFile(path, 256);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(data.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(data.status().message()), HasSubstr("3 bytes"));
}

TEST(TokenDataTest, MissingFilesAreNotFound) {
  const std::string path = "/nonexistent/chunkzero/token_data_test.bin";
  EXPECT_EQ(TokenData::FromTokenFile(path, 256).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(TokenData::FromByteFile(path).status().code(),
            absl::StatusCode::kNotFound);
}

// A directory given as a data file was an uncaught std::ios_base::failure
// (an abort); it is an error naming the path.
TEST(TokenDataTest, DirectoriesAreInvalidArgumentNamingThePath) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  for (const absl::Status& status :
       {TokenData::FromTokenFile(dir, 256).status(),
        TokenData::FromByteFile(dir).status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), dir + " is a directory, not a file");
  }
}

// start = (q * seq_len) mod (n - seq_len) holds where q * seq_len does not
// fit in 64 bits (a long run), instead of overflowing.
TEST(TokenDataTest, FillBatchStartHasNoOverflowOnLongRuns) {
  const TokenData data = TokenData::FromTokens(Synthetic(1000));
  const BatchOrder order{/*batch=*/1, /*world_size=*/1, /*grad_accum=*/1,
                         /*seq_len=*/3};
  // q = 2^62 + 5, and q * 3 overflows int64. 2^62 mod 997 = 988, so q mod
  // 997 = 993 and the start is 993 * 3 mod 997 = 985 (t[985] = 985).
  const int64_t step = (int64_t{1} << 62) + 5;
  EXPECT_EQ(Fill(data, order, step, 0, 0).inputs[0], 985);
}

TEST(TokenDataTest, FromByteFileReadsEveryByteUnsigned) {
  const std::string bytes("A\x00\xFF\x80z", 5);
  const std::string path = WriteTestFile(".txt", bytes);
  absl::StatusOr<TokenData> data = TokenData::FromByteFile(path);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->size(), 5);
  EXPECT_EQ(data->vocab_used(), 256);
  const BatchOrder order{/*batch=*/1, /*world_size=*/1, /*grad_accum=*/1,
                         /*seq_len=*/4};
  const Batch b = Fill(*data, order, 0, 0, 0);
  EXPECT_THAT(b.inputs, ElementsAre('A', 0, 255, 128));
  EXPECT_THAT(b.targets, ElementsAre(0, 255, 128, 'z'));
}

TEST(TokenDataTest, BuiltInIsBytes) {
  const TokenData data = TokenData::BuiltIn();
  EXPECT_GT(data.size(), 1000);
  EXPECT_GT(data.vocab_used(), 0);
  EXPECT_LE(data.vocab_used(), 256);
}

}  // namespace
}  // namespace chunkzero
