#include "base/system_memory.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file.h"

namespace chunkzero {
namespace {

// A cgroup v2 memory file: a byte count, or "max" (no limit: nullopt).
std::optional<int64_t> ReadCgroupValue(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path, 4096);
  if (!text.ok()) return std::nullopt;
  int64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &value)) {
    return std::nullopt;
  }
  return value;
}

}  // namespace

absl::StatusOr<int64_t> AvailableMemoryBytes() {
  absl::StatusOr<std::string> meminfo = ReadFileToString("/proc/meminfo");
  if (!meminfo.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot tell the available memory: ", meminfo.status().message()));
  }
  int64_t available = -1;
  for (absl::string_view line : absl::StrSplit(*meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemAvailable:")) continue;
    line = absl::StripAsciiWhitespace(line);
    if (absl::ConsumeSuffix(&line, "kB")) {
      int64_t kib = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib)) {
        available = kib * 1024;
      }
    }
  }
  if (available < 0) {
    return absl::UnavailableError(
        "cannot tell the available memory: /proc/meminfo has no "
        "MemAvailable line");
  }
  const std::optional<int64_t> limit =
      ReadCgroupValue("/sys/fs/cgroup/memory.max");
  const std::optional<int64_t> used =
      ReadCgroupValue("/sys/fs/cgroup/memory.current");
  if (limit.has_value() && used.has_value()) {
    available = std::min(available, std::max<int64_t>(0, *limit - *used));
  }
  return available;
}

std::string FormatBytes(double bytes) {
  static constexpr const char* kUnits[] = {"B",   "KiB", "MiB", "GiB",
                                           "TiB", "PiB", "EiB"};
  int unit = 0;
  while (bytes >= 1024 && unit + 1 < static_cast<int>(std::size(kUnits))) {
    bytes /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrFormat("%.0f B", bytes);
  return absl::StrFormat("%.2f %s", bytes, kUnits[unit]);
}

}  // namespace chunkzero
