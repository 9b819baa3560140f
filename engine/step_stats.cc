#include "engine/step_stats.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace chunkzero {
namespace {

// "AllGather" -> "all_gather".
std::string SnakeCase(absl::string_view camel) {
  std::string out;
  for (char c : camel) {
    if (c >= 'A' && c <= 'Z') {
      if (!out.empty()) out += '_';
      out += static_cast<char>(c - 'A' + 'a');
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::vector<int64_t> EncodeRankStepMetrics(const RankStepMetrics& m) {
  std::vector<int64_t> v;
  for (int k = 0; k < kNumMemoryCategories; ++k) {
    auto it = m.peak_bytes.find(
        std::string(MemoryCategoryName(static_cast<MemoryCategory>(k))));
    v.push_back(it == m.peak_bytes.end() ? 0 : it->second);
  }
  v.push_back(m.peak_total_bytes);
  v.push_back(m.peak_device_bytes);
  v.push_back(m.peak_host_bytes);
  v.push_back(m.h2d_bytes);
  v.push_back(m.d2h_bytes);
  v.push_back(m.disk);
  v.push_back(m.disk_read_bytes);
  v.push_back(m.disk_written_bytes);
  v.push_back(static_cast<int64_t>(std::llround(m.disk_wait_s * 1e6)));
  v.push_back(static_cast<int64_t>(std::llround(m.disk_busy_s * 1e6)));
  for (int k = 0; k < comm::kNumCollectiveKinds; ++k) {
    auto it = m.comm_bytes.find(SnakeCase(
        comm::CollectiveKindName(static_cast<comm::CollectiveKind>(k))));
    v.push_back(it != m.comm_bytes.end());
    v.push_back(it == m.comm_bytes.end() ? 0 : it->second);
  }
  return v;
}

RankStepMetrics DecodeRankStepMetrics(const std::vector<int64_t>& v) {
  RankStepMetrics m;
  size_t i = 0;
  for (int k = 0; k < kNumMemoryCategories; ++k) {
    m.peak_bytes[std::string(
        MemoryCategoryName(static_cast<MemoryCategory>(k)))] = v[i++];
  }
  m.peak_total_bytes = v[i++];
  m.peak_device_bytes = v[i++];
  m.peak_host_bytes = v[i++];
  m.h2d_bytes = v[i++];
  m.d2h_bytes = v[i++];
  m.disk = v[i++] != 0;
  m.disk_read_bytes = v[i++];
  m.disk_written_bytes = v[i++];
  m.disk_wait_s = static_cast<double>(v[i++]) / 1e6;
  m.disk_busy_s = static_cast<double>(v[i++]) / 1e6;
  for (int k = 0; k < comm::kNumCollectiveKinds; ++k) {
    const bool present = v[i++] != 0;
    const int64_t bytes = v[i++];
    if (present) {
      m.comm_bytes[SnakeCase(comm::CollectiveKindName(
          static_cast<comm::CollectiveKind>(k)))] = bytes;
    }
  }
  return m;
}

std::vector<Device> MeasuredDevices(Device device) {
  if (device == Device::Cpu()) return {Device::Cpu()};
  return {Device::Cpu(), device};
}

RankStepMetrics MeasureRankStep(const MemoryTracker& tracker,
                                const comm::RecordingSnapshot& comm,
                                int64_t h2d_bytes, int64_t d2h_bytes,
                                Device device) {
  RankStepMetrics m;
  m.h2d_bytes = h2d_bytes;
  m.d2h_bytes = d2h_bytes;
  m.peak_total_bytes = tracker.PeakAll();
  for (Device d : MeasuredDevices(device)) {
    for (int k = 0; k < kNumMemoryCategories; ++k) {
      const auto category = static_cast<MemoryCategory>(k);
      const int64_t peak = tracker.Peak(d, category);
      if (peak > 0 || d == Device::Cpu()) {
        m.peak_bytes[std::string(MemoryCategoryName(category))] += peak;
      }
    }
    if (d != Device::Cpu()) m.peak_device_bytes += tracker.PeakTotal(d);
    if (d == Device::Cpu()) m.peak_host_bytes += tracker.PeakTotal(d);
  }
  for (int k = 0; k < comm::kNumCollectiveKinds; ++k) {
    const auto kind = static_cast<comm::CollectiveKind>(k);
    if (comm[kind].calls == 0) continue;
    m.comm_bytes[SnakeCase(comm::CollectiveKindName(kind))] =
        std::llround(comm[kind].bus_bytes);
  }
  return m;
}

}  // namespace chunkzero
