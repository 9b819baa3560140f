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

// The table-driven version, for any CPU.
uint32_t Crc32cPortable(const void* data, size_t n);

}  // namespace chunkzero

#endif  // CHUNKZERO_BASE_CRC32C_H_
