#include "comm/rendezvous/job_config.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "comm/rendezvous/rendezvous_join.h"

namespace chunkzero {
namespace comm_internal {
namespace {

JobConfig ParseJoinValue(absl::string_view text) {
  JobConfig out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) continue;
    out[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  return out;
}

}  // namespace

std::string JobConfigJoinValue(int size, const JobConfig& config) {
  JobConfig all = config;
  all["world_size"] = absl::StrCat(size);
  std::string out;
  for (const auto& [key, value] : all) {
    absl::StrAppend(&out, absl::StrReplaceAll(key, {{"\n", "\\n"}}), "=",
                    absl::StrReplaceAll(value, {{"\n", "\\n"}}), "\n");
  }
  return out;
}

absl::Status CompareJobConfigs(absl::string_view caller, int rank,
                               const std::string& mine, int peer,
                               const std::string& theirs) {
  if (mine == theirs) return absl::OkStatus();
  const JobConfig a = ParseJoinValue(mine), b = ParseJoinValue(theirs);
  std::string key, here = "(unset)", there = "(unset)";
  // The world size first: other settings (a chunk size aligned to it) may
  // differ only because it does.
  if (a.count("world_size") > 0 && b.count("world_size") > 0 &&
      a.at("world_size") != b.at("world_size")) {
    key = "world_size";
    here = a.at("world_size");
    there = b.at("world_size");
  }
  for (const auto& [k, v] : a) {
    if (!key.empty()) break;
    auto it = b.find(k);
    if (it == b.end() || it->second != v) {
      key = k;
      here = v;
      if (it != b.end()) there = it->second;
      break;
    }
  }
  if (key.empty()) {
    for (const auto& [k, v] : b) {
      if (a.count(k) == 0) {
        key = k;
        there = v;
        break;
      }
    }
  }
  return absl::FailedPreconditionError(absl::StrCat(
      caller, ": rank ", peer,
      " was started with another configuration than rank ", rank, ": ", key,
      " is ", there, " on rank ", peer, " but ", here, " on rank ", rank,
      " (every rank of a job must be started with the same flags)"));
}

absl::Status AgreeOnJobConfig(gloo::rendezvous::Store& store,
                              absl::string_view prefix, int rank, int size,
                              const JobConfig& config, absl::Time deadline,
                              absl::Duration timeout, absl::string_view caller,
                              absl::string_view where, bool* announced) {
  if (announced != nullptr) *announced = false;
  const std::string mine = JobConfigJoinValue(size, config);
  if (absl::Status s = AnnounceJoin(store, prefix, rank, mine, where);
      !s.ok()) {
    return s;
  }
  if (announced != nullptr) *announced = true;
  return AwaitJoins(store, prefix, rank, size, deadline, timeout,
                    absl::StrCat(caller, ": rank ", rank, " of ", size),
                    [&](int peer, const std::string& theirs) {
                      return CompareJobConfigs(caller, rank, mine, peer,
                                               theirs);
                    });
}

}  // namespace comm_internal
}  // namespace chunkzero
