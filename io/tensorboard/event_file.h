// TensorBoard event files: the scalars of a run, one Event per step, so
// that TensorBoard (or anything reading its format) can plot a run while
// it trains.
//
//   CZ_ASSIGN_OR_RETURN(std::unique_ptr<EventFileWriter> writer,
//                       EventFileWriter::Create("runs/a"));
//   CZ_RETURN_IF_ERROR(writer->WriteScalars(step, {{"loss", 2.31f}}));
//
//   CZ_ASSIGN_OR_RETURN(std::vector<ScalarEvent> events,
//                       ReadScalarEvents(writer->path()));
//
// The format (TensorFlow's TFRecord framing of Event protobufs): each
// record is its length (uint64, little-endian), the masked CRC-32C of those
// 8 bytes (uint32), the serialized Event, and the masked CRC-32C of it;
// masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8. The first event
// holds file_version "brain.Event:2". The file is named
// events.out.tfevents.<seconds>.<host>.<pid> (TensorBoard reads files whose
// name contains "tfevents") in the directory, which is created if needed;
// a file of that name already there is kept, and the new one gets a suffix
// .1, .2, ...
//
// Each WriteScalars is written through to the file before it returns (no
// fsync): a reader sees every step done so far. Errors carry the path and
// errno's text.
#ifndef CHUNKZERO_IO_TENSORBOARD_EVENT_FILE_H_
#define CHUNKZERO_IO_TENSORBOARD_EVENT_FILE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/file.h"

namespace chunkzero {

// The masked CRC-32C of a record's pieces.
uint32_t MaskedCrc32c(const void* data, size_t n);

class EventFileWriter {
 public:
  // A new event file in `dir` (made if missing), its first event written.
  // On failure nothing is left: neither the file nor a directory it made.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EventFileWriter>> Create(
      const std::string& dir);

  const std::string& path() const { return path_; }
  // One Event at `step` with a simple_value per (tag, value), in order,
  // stamped with the current time.
  [[nodiscard]] absl::Status WriteScalars(
      int64_t step, const std::vector<std::pair<std::string, float>>& values);
  // Closes the file; WriteScalars after it is FailedPrecondition.
  [[nodiscard]] absl::Status Close();

 private:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EventFileWriter>>
  CreateIn(const std::string& dir);
  EventFileWriter(std::string path, std::unique_ptr<FileDescriptor> fd)
      : path_(std::move(path)), fd_(std::move(fd)) {}
  absl::Status WriteRecord(const std::string& event);

  std::string path_;
  std::unique_ptr<FileDescriptor> fd_;
};

// One event's scalars, as read back.
struct ScalarEvent {
  int64_t step = 0;
  double wall_time = 0;
  std::string file_version;  // Set in a version event only.
  std::vector<std::pair<std::string, float>> values;
};

// Every event of the file at `path`, checking each record's framing and
// CRCs: DataLoss naming the file and the byte offset of a truncated or
// corrupt record, or one that does not parse as an Event.
[[nodiscard]] absl::StatusOr<std::vector<ScalarEvent>> ReadScalarEvents(
    const std::string& path);

}  // namespace chunkzero

#endif  // CHUNKZERO_IO_TENSORBOARD_EVENT_FILE_H_
