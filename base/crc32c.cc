#include "base/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace chunkzero {
namespace {

// CRC-32C uses the Castagnoli polynomial 0x1EDC6F41 (RFC 3720, iSCSI), here
// bit-reflected, as the SSE4.2 crc32 instruction computes it.
constexpr uint32_t kCastagnoliReflected = 0x82F63B78u;

constexpr std::array<uint32_t, 256> MakeCrc32cTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc >> 1) ^ ((crc & 1) ? kCastagnoliReflected : 0);
    }
    table[byte] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kCrc32cTable = MakeCrc32cTable();

#if defined(__x86_64__)
// Eight bytes per instruction: several GB/s, so checksumming costs little
// beside the disk.
__attribute__((target("sse4.2"))) uint32_t Crc32cSse42(uint32_t start,
                                                       const void* data,
                                                       size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t crc = ~start;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, sizeof(word));
    crc = _mm_crc32_u64(crc, word);
  }
  auto crc32 = static_cast<uint32_t>(crc);
  for (; n > 0; ++p, --n) crc32 = _mm_crc32_u8(crc32, *p);
  return ~crc32;
}
#endif

}  // namespace

uint32_t Crc32cPortableExtend(uint32_t start, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t crc = ~start;
  for (size_t i = 0; i < n; ++i) {
    crc = (crc >> 8) ^ kCrc32cTable[(crc ^ p[i]) & 0xFF];
  }
  return ~crc;
}

uint32_t Crc32cPortable(const void* data, size_t n) {
  return Crc32cPortableExtend(0, data, n);
}

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  static const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");
  if (kHaveSse42) return Crc32cSse42(crc, data, n);
#endif
  return Crc32cPortableExtend(crc, data, n);
}

uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

}  // namespace chunkzero
