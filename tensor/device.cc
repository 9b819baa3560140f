#include "tensor/device.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace chunkzero {

std::string Device::ToString() const {
  switch (type_) {
    case DeviceType::kCpu:
      return "cpu";
    case DeviceType::kCuda:
      return absl::StrCat("cuda:", index_);
    case DeviceType::kSimulated:
      return absl::StrCat("sim:", index_);
  }
  return "invalid";
}

absl::StatusOr<Device> ParseDevice(absl::string_view text) {
  if (text == "cpu") return Device::Cpu();
  absl::string_view rest = text;
  const bool cuda = absl::ConsumePrefix(&rest, "cuda:");
  const bool sim = !cuda && absl::ConsumePrefix(&rest, "sim:");
  int index = -1;
  if ((cuda || sim) && absl::SimpleAtoi(rest, &index) && index >= 0) {
    return cuda ? Device::Cuda(index) : Device::Simulated(index);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown device '", text, "' (expected cpu, cuda:N or sim:N)"));
}

std::ostream& operator<<(std::ostream& os, Device device) {
  return os << device.ToString();
}

}  // namespace chunkzero
