// CRC-32C (Castagnoli, RFC 3720), the checksum of checkpoint files.
//
//   uint32_t crc = Crc32c(bytes.data(), bytes.size());
//   Crc32c("123456789", 9) == 0xE3069283;  // the standard check value
//
// Thread-safe; no state.
#ifndef CHUNKZERO_BASE_CRC32C_H_
#define CHUNKZERO_BASE_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace chunkzero {

// CRC-32C of `n` bytes at `data`: the SSE4.2 instruction where the CPU has
// it, else Crc32cPortable. Both give the same value.
uint32_t Crc32c(const void* data, size_t n);

// The CRC-32C of the bytes `crc` was the CRC of, followed by these `n`:
// Crc32cExtend(Crc32c(a, i), a + i, n - i) == Crc32c(a, n), and
// Crc32cExtend(0, a, n) == Crc32c(a, n). For data read in pieces.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

// The table-driven version, for any CPU.
uint32_t Crc32cPortable(const void* data, size_t n);
// Its Crc32cExtend.
uint32_t Crc32cPortableExtend(uint32_t crc, const void* data, size_t n);

}  // namespace chunkzero

#endif  // CHUNKZERO_BASE_CRC32C_H_
