#include "chunk/chunk_manager.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "google/protobuf/text_format.h"

namespace chunkzero {

absl::StatusOr<ChunkManagerOptions> ChunkManagerOptionsFromProto(
    const ChunkManagerConfig& config) {
  ChunkManagerOptions options;
  if (config.has_chunk_size() && config.chunk_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_size must be positive (or 0 for no chunking), got ",
                     config.chunk_size()));
  }
  if (config.has_chunk_size() && config.chunk_size() > 0) {
    options.chunk_size = config.chunk_size();
  }
  switch (config.layout()) {
    case ChunkManagerConfig::REPLICATED:
      options.layout = ChunkLayout::kReplicated;
      break;
    case ChunkManagerConfig::OWNER:
      options.layout = ChunkLayout::kOwner;
      break;
    default:
      options.layout = ChunkLayout::kSharded;
      break;
  }
  if (!config.device().empty()) {
    CZ_ASSIGN_OR_RETURN(options.device, ParseDevice(config.device()));
  }
  if (config.comm_timeout_ms() < 0) {
    return absl::InvalidArgumentError("comm_timeout_ms must not be negative");
  }
  if (config.comm_timeout_ms() > 0) {
    options.comm_timeout = absl::Milliseconds(config.comm_timeout_ms());
  }
  return options;
}

absl::StatusOr<ChunkManagerOptions> ParseChunkManagerOptions(
    absl::string_view text_proto) {
  ChunkManagerConfig config;
  if (!google::protobuf::TextFormat::ParseFromString(std::string(text_proto),
                                                     &config)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot parse ChunkManagerConfig text: '", text_proto, "'"));
  }
  return ChunkManagerOptionsFromProto(config);
}

ChunkManager::ChunkManager(comm::ProcessGroup* group,
                           const ChunkManagerOptions& options,
                           MemoryTracker* tracker,
                           AllocatorRegistry* allocators)
    : tracked_(*group),
      group_(&tracked_),
      options_(options),
      tracker_(tracker),
      base_allocators_(allocators != nullptr ? allocators
                                             : &AllocatorRegistry::Default()) {
  if (options_.auto_residency && options_.rest_device.has_value() &&
      *options_.rest_device != options_.device) {
    residency_ = std::make_unique<ChunkResidency>(
        options_.device, *options_.rest_device, tracker_);
    if (tracker_ != nullptr) {
      tracker_->SetReclaimer(options_.device, [this](int64_t bytes) {
        return residency_->Reclaim(bytes);
      });
    }
  }
  if (options_.disk_residency && options_.disk != nullptr) {
    disk_residency_ = std::make_unique<ChunkDiskResidency>(
        options_.disk, tracker_, options_.disk_lookahead);
    if (tracker_ != nullptr) {
      tracker_->SetReclaimer(Device::Cpu(), [this](int64_t bytes) {
        return disk_residency_->Reclaim(bytes);
      });
    }
  }
}

ChunkManager::~ChunkManager() {
  // Collectives still running read and write the chunks' buffers, freed
  // below; a peer may reach them much later (see "Lifetime").
  tracked_.AbortIfInFlight(absl::CancelledError(absl::StrCat(
      "rank ", group_->rank(),
      " destroyed its chunks with collectives on them in flight (it failed "
      "or stopped in the middle of a step)")));
  // Copies still running write into chunks and free through the caches.
  if (copy_stream_ != nullptr) copy_stream_->Drain();
  if (residency_ != nullptr && tracker_ != nullptr) {
    tracker_->ClearReclaimer(options_.device);
  }
  if (disk_residency_ != nullptr && tracker_ != nullptr) {
    tracker_->ClearReclaimer(Device::Cpu());
  }
  // Chunks hand their memory back to the caches, which then empty into the
  // base allocators: in that order. Views of chunks (a model's parameters)
  // may outlive the manager, so the payload is freed explicitly rather than
  // when the last view goes.
  for (Chunk* chunk : AllChunks()) chunk->DropPayload();
  groups_.clear();
  caches_.clear();
}

absl::StatusOr<ChunkManager::Group*> ChunkManager::FindGroup(
    absl::string_view name) const {
  for (const auto& g : groups_) {
    if (g->name == name) return g.get();
  }
  return absl::NotFoundError(absl::StrCat("no chunk group '", name, "'"));
}

absl::Status ChunkManager::CreateGroup(absl::string_view name, DType dtype,
                                       MemoryCategory category,
                                       std::optional<Device> device) {
  if (FindGroup(name).ok()) {
    return absl::AlreadyExistsError(
        absl::StrCat("chunk group '", name, "' exists"));
  }
  auto group = std::make_unique<Group>();
  group->name = std::string(name);
  group->dtype = dtype;
  group->category = category;
  group->device = device.value_or(options_.device);
  // A group given its own device lives there; the others rest where the
  // manager's chunks rest.
  group->rest_device = device.has_value()
                           ? *device
                           : options_.rest_device.value_or(options_.device);
  group->elements_per_rank.assign(group_->size(), 0);
  groups_.push_back(std::move(group));
  return absl::OkStatus();
}

absl::Status ChunkManager::CreatePairedGroup(absl::string_view name,
                                             absl::string_view source,
                                             DType dtype,
                                             MemoryCategory category,
                                             std::optional<Device> device) {
  CZ_RETURN_IF_ERROR(FindGroup(source).status(), "pairing '", name, "'");
  CZ_RETURN_IF_ERROR(CreateGroup(name, dtype, category, device));
  groups_.back()->source = std::string(source);
  return absl::OkStatus();
}

StorageOptions ChunkManager::StorageFor(const Group& group) {
  return StorageOptions{group.category, tracker_, &allocators_};
}

absl::Status ChunkManager::EnsureCache(Device device) {
  if (caches_.count(device)) return absl::OkStatus();
  Allocator* inner = &pinned_;
  if (device != Device::Cpu() || options_.device.type() != DeviceType::kCuda) {
    CZ_ASSIGN_OR_RETURN(inner, base_allocators_->Get(device));
  }
  auto cache = std::make_unique<CachingAllocator>(inner);
  allocators_.Register(cache.get());
  caches_[device] = std::move(cache);
  return absl::OkStatus();
}

absl::StatusOr<Chunk*> ChunkManager::NewChunk(Group& group, int64_t capacity,
                                              int owner) {
  CZ_RETURN_IF_ERROR(EnsureCache(group.device));
  CZ_RETURN_IF_ERROR(EnsureCache(group.rest_device));
  ChunkOptions opts;
  opts.group = group.name;
  opts.index = static_cast<int>(group.chunks.size());
  opts.dtype = group.dtype;
  opts.capacity = capacity;
  opts.layout = options_.layout;
  opts.owner = owner;
  opts.device = group.device;
  opts.rest_device = group.rest_device;
  opts.storage = StorageFor(group);
  if (group.rest_device != group.device) {
    if (copy_stream_ == nullptr) copy_stream_ = std::make_unique<CopyStream>();
    opts.copy_stream = copy_stream_.get();
  }
  opts.comm_timeout = options_.comm_timeout;
  // Tensors go only into a group's last chunk (chunk_packing.h): the one
  // before is complete, and may make room for the new one.
  if (!group.chunks.empty()) {
    CZ_RETURN_IF_ERROR(ManageOnDisk(group, group.chunks.back().get()));
  }
  CZ_ASSIGN_OR_RETURN(std::unique_ptr<Chunk> chunk,
                      Chunk::Create(opts, group_));
  if (residency_ != nullptr && group.device == residency_->device() &&
      group.rest_device == residency_->host()) {
    residency_->Manage(chunk.get());
  }
  group.chunks.push_back(std::move(chunk));
  return group.chunks.back().get();
}

int ChunkManager::NextOwner(const Group& group) const {
  if (options_.chunk_size.has_value()) {
    return RoundRobinOwner(static_cast<int>(group.chunks.size()),
                           group_->size());
  }
  return LeastLoadedOwner(group.elements_per_rank);
}

absl::StatusOr<Tensor> ChunkManager::AppendTensor(absl::string_view group_name,
                                                  absl::string_view name,
                                                  const Tensor& values) {
  CZ_ASSIGN_OR_RETURN(Group * group, FindGroup(group_name));
  if (group->closed) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot append tensor '", name, "' to closed group '",
                     group->name, "'"));
  }
  if (group->tensors.count(name)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "tensor '", name, "' is already in group '", group->name, "'"));
  }
  if (values.dtype() != group->dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' is ", DTypeName(values.dtype()), " but group '",
        group->name, "' holds ", DTypeName(group->dtype)));
  }
  if (!group->source.empty()) return AppendPaired(*group, name, values);

  const int64_t n = values.numel();
  if (options_.chunk_size.has_value() && n > *options_.chunk_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' ", ShapeToString(values.shape()), " has ", n,
        " elements, more than the chunk size ", *options_.chunk_size,
        " of group '", group->name, "'; use a chunk size of at least ", n,
        " (chunk/chunk_size_search.h picks one) or turn chunking off"));
  }
  if (!group->packer.has_value()) group->packer.emplace(options_.chunk_size);
  absl::StatusOr<PackedTensor> placed = group->packer->Add(n);
  if (!placed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' in group '", group->name,
                     "': ", placed.status().message()));
  }
  Chunk* chunk = group->chunks.empty() ? nullptr : group->chunks.back().get();
  if (placed->opens_chunk) {
    // The previous chunk is complete: close it now and let non-holders drop
    // its payload while the rest registers.
    if (chunk != nullptr) CZ_RETURN_IF_ERROR(chunk->Close());
    const int64_t capacity = group->packer->plan().capacities[placed->chunk];
    const int owner = NextOwner(*group);
    CZ_ASSIGN_OR_RETURN(chunk, NewChunk(*group, capacity, owner));
    group->elements_per_rank[owner] += capacity;
  }
  CZ_ASSIGN_OR_RETURN(Tensor view, chunk->Append(name, values));
  return Record(*group, name, chunk, std::move(view));
}

Tensor ChunkManager::Record(Group& group, absl::string_view name, Chunk* chunk,
                            Tensor view) {
  group.tensors[name] = TensorLocation{chunk, chunk->num_tensors() - 1};
  group.order.push_back(std::string(name));
  return view;
}

absl::StatusOr<Tensor> ChunkManager::AppendPaired(Group& group,
                                                  absl::string_view name,
                                                  const Tensor& values) {
  CZ_ASSIGN_OR_RETURN(Group * source, FindGroup(group.source));
  const size_t position = group.order.size();
  if (position >= source->order.size() || source->order[position] != name) {
    return absl::InvalidArgumentError(absl::StrCat(
        "paired group '", group.name, "' expects tensor '",
        position < source->order.size() ? source->order[position] : "(none)",
        "' next (the order of '", source->name, "'), got '", name, "'"));
  }
  const TensorLocation& from = source->tensors.at(name);
  const ChunkTensor& info = from.chunk->tensor(from.index);
  if (values.numel() != info.numel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' has ", values.numel(), " elements in '",
        group.name, "' but ", info.numel, " in '", source->name, "'"));
  }
  // The source chunk with the same index.
  int chunk_index = 0;
  while (source->chunks[chunk_index].get() != from.chunk) ++chunk_index;
  while (static_cast<int>(group.chunks.size()) <= chunk_index) {
    const Chunk& twin = *source->chunks[group.chunks.size()];
    if (!group.chunks.empty()) {
      CZ_RETURN_IF_ERROR(group.chunks.back()->Close());
    }
    // For sharded chunks capacity() is already padded; padding again by the
    // same world size changes nothing.
    CZ_RETURN_IF_ERROR(NewChunk(group, twin.capacity(), twin.owner()).status());
  }
  Chunk* chunk = group.chunks[chunk_index].get();
  CZ_ASSIGN_OR_RETURN(Tensor view, chunk->Append(name, values));
  return Record(group, name, chunk, std::move(view));
}

absl::Status ChunkManager::RemoveGroup(absl::string_view name) {
  CZ_ASSIGN_OR_RETURN(Group * group, FindGroup(name));
  for (const auto& g : groups_) {
    if (g->source == name) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot remove chunk group '", name, "': group '",
                       g->name, "' is paired to it"));
    }
  }
  for (auto& chunk : group->chunks) {
    DropChunkPayload(chunk.get());
    if (residency_ != nullptr) residency_->Forget(chunk.get());
    if (disk_residency_ != nullptr) disk_residency_->Forget(chunk.get());
  }
  groups_.erase(std::find_if(groups_.begin(), groups_.end(),
                             [&](const auto& g) { return g.get() == group; }));
  return absl::OkStatus();
}

absl::Status ChunkManager::RenameGroup(absl::string_view from,
                                       absl::string_view to) {
  CZ_ASSIGN_OR_RETURN(Group * group, FindGroup(from));
  if (FindGroup(to).ok()) {
    return absl::AlreadyExistsError(absl::StrCat(
        "cannot rename chunk group '", from, "' to '", to, "': it exists"));
  }
  for (const auto& g : groups_) {
    if (g->source == from) g->source = std::string(to);
  }
  group->name = std::string(to);
  for (auto& chunk : group->chunks) chunk->RenameGroup(to);
  return absl::OkStatus();
}

absl::Status ChunkManager::CloseGroup(absl::string_view name) {
  CZ_ASSIGN_OR_RETURN(Group * group, FindGroup(name));
  for (auto& chunk : group->chunks) {
    CZ_RETURN_IF_ERROR(chunk->Close());
    CZ_RETURN_IF_ERROR(ManageOnDisk(*group, chunk.get()));
  }
  group->closed = true;
  return absl::OkStatus();
}

absl::Status ChunkManager::SpillWhenComplete(absl::string_view name,
                                             ChunkDiskTier* disk) {
  CZ_ASSIGN_OR_RETURN(Group * group, FindGroup(name));
  if (disk == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("spilling chunk group '", name, "' to no disk tier"));
  }
  group->spill_to = disk;
  // Every chunk but the last is complete (tensors go only into the last);
  // in a closed group, the last too.
  const size_t complete = group->closed || group->chunks.empty()
                              ? group->chunks.size()
                              : group->chunks.size() - 1;
  for (size_t c = 0; c < complete; ++c) {
    CZ_RETURN_IF_ERROR(ManageOnDisk(*group, group->chunks[c].get()));
  }
  return absl::OkStatus();
}

absl::Status ChunkManager::ManageOnDisk(const Group& group, Chunk* chunk) {
  if (group.spill_to != nullptr) {
    if (chunk->rests_on_disk()) return absl::OkStatus();
    return chunk->SpillRest(group.spill_to);
  }
  if (disk_residency_ == nullptr || group.category != MemoryCategory::kParam ||
      group.rest_device != Device::Cpu()) {
    return absl::OkStatus();
  }
  return disk_residency_->Manage(chunk);
}

absl::StatusOr<TensorLocation> ChunkManager::Locate(
    absl::string_view group_name, absl::string_view name) const {
  CZ_ASSIGN_OR_RETURN(Group * group, FindGroup(group_name));
  auto it = group->tensors.find(name);
  if (it == group->tensors.end()) {
    return absl::NotFoundError(absl::StrCat(
        "no tensor '", name, "' in chunk group '", group_name, "'"));
  }
  return it->second;
}

int ChunkManager::num_chunks(absl::string_view group) const {
  absl::StatusOr<Group*> g = FindGroup(group);
  return g.ok() ? static_cast<int>((*g)->chunks.size()) : 0;
}

Chunk* ChunkManager::chunk(absl::string_view group, int i) const {
  return (*FindGroup(group))->chunks[i].get();
}

ChunkManager::UseClocks ChunkManager::SaveUseClocks() const {
  UseClocks clocks;
  if (residency_ != nullptr) clocks.device = residency_->use_clock();
  if (disk_residency_ != nullptr) clocks.disk = disk_residency_->use_clock();
  return clocks;
}

void ChunkManager::RestoreUseClocks(const UseClocks& clocks) {
  if (residency_ != nullptr) residency_->set_use_clock(clocks.device);
  if (disk_residency_ != nullptr) disk_residency_->set_use_clock(clocks.disk);
}

std::vector<Chunk*> ChunkManager::AllChunks() const {
  std::vector<Chunk*> all;
  for (const auto& g : groups_) {
    for (const auto& c : g->chunks) all.push_back(c.get());
  }
  return all;
}

absl::StatusOr<std::unique_ptr<comm::Work>> ChunkManager::StartAccessChunk(
    Chunk* chunk) {
  if (chunk->is_accessed()) return comm::MakeCompletedWork(absl::OkStatus());
  if (residency_ != nullptr) residency_->Began(chunk);
  if (disk_residency_ != nullptr) disk_residency_->Began(chunk);
  CZ_ASSIGN_OR_RETURN(std::unique_ptr<comm::Work> work, chunk->StartAccess());
  accessed_.push_back(chunk);
  return work;
}

absl::Status ChunkManager::AccessChunk(Chunk* chunk) {
  CZ_ASSIGN_OR_RETURN(std::unique_ptr<comm::Work> work,
                      StartAccessChunk(chunk));
  CZ_RETURN_IF_ERROR(chunk->WaitBeforeCompute(*work), "accessing chunk ",
                     chunk->name());
  return absl::OkStatus();
}

absl::Status ChunkManager::AccessTensor(absl::string_view group,
                                        absl::string_view name) {
  CZ_ASSIGN_OR_RETURN(TensorLocation where, Locate(group, name));
  return AccessChunk(where.chunk);
}

void ChunkManager::Forget(Chunk* chunk) {
  accessed_.erase(std::remove(accessed_.begin(), accessed_.end(), chunk),
                  accessed_.end());
}

absl::Status ChunkManager::ReleaseChunk(Chunk* chunk) {
  // Before the release: a chunk that stays on the device does so from its
  // full buffer, with no copy to the host and back.
  if (residency_ != nullptr && chunk->CanRelease()) {
    residency_->Releasing(chunk);
  }
  CZ_RETURN_IF_ERROR(chunk->Release());
  Forget(chunk);
  return absl::OkStatus();
}

void ChunkManager::SetUseSchedule(std::vector<Chunk*> uses) {
  if (disk_residency_ != nullptr) disk_residency_->SetSchedule(uses);
  if (residency_ != nullptr) residency_->SetSchedule(std::move(uses));
}

absl::StatusOr<int> ChunkManager::ReleaseAccessedExcept(
    absl::Span<Chunk* const> keep) {
  // Decide first: releasing edits accessed_.
  std::vector<Chunk*> to_release;
  for (Chunk* chunk : accessed_) {
    if (chunk->CanRelease() &&
        std::find(keep.begin(), keep.end(), chunk) == keep.end()) {
      to_release.push_back(chunk);
    }
  }
  for (Chunk* chunk : to_release) CZ_RETURN_IF_ERROR(ReleaseChunk(chunk));
  return static_cast<int>(to_release.size());
}

void ChunkManager::DropChunkPayload(Chunk* chunk) {
  chunk->DropPayload();
  Forget(chunk);
}

absl::Status ChunkManager::ReduceChunk(Chunk* chunk, comm::ReduceOp op) {
  CZ_RETURN_IF_ERROR(chunk->Reduce(op));
  Forget(chunk);
  return absl::OkStatus();
}

absl::Status ChunkManager::MoveChunk(Chunk* chunk, Device device) {
  CZ_RETURN_IF_ERROR(EnsureCache(device), "moving chunk ", chunk->name());
  return chunk->MoveTo(device);
}

absl::Status ChunkManager::SetTensorState(absl::string_view group,
                                          absl::string_view name,
                                          TensorState to) {
  CZ_ASSIGN_OR_RETURN(TensorLocation where, Locate(group, name));
  return where.chunk->SetTensorState(where.index, to);
}

absl::Status ChunkManager::CopyTensorToChunkSlice(absl::string_view group,
                                                  absl::string_view name,
                                                  const Tensor& values) {
  CZ_ASSIGN_OR_RETURN(TensorLocation where, Locate(group, name));
  return where.chunk->CopyTensorToChunkSlice(where.index, values);
}

ChunkManager::Transfers ChunkManager::TransferredBytes() const {
  Transfers t;
  for (const Chunk* chunk : AllChunks()) {
    t.rest_to_device += chunk->rest_to_device_bytes();
    t.device_to_rest += chunk->device_to_rest_bytes();
  }
  return t;
}

int64_t ChunkManager::PayloadBytes(Device device) const {
  int64_t bytes = 0;
  for (const Chunk* chunk : AllChunks()) {
    bytes += chunk->payload_bytes(device);
  }
  return bytes;
}

}  // namespace chunkzero
