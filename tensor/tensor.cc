#include "tensor/tensor.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "tensor/half.h"
#include "tensor/memory/allocator.h"

namespace chunkzero {
namespace {

absl::Status CheckShape(absl::Span<const int64_t> shape) {
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension in shape ", ShapeToString(shape)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int64_t NumElements(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<Tensor> Tensor::Empty(Shape shape, DType dtype, Device device,
                                     const StorageOptions& options) {
  CZ_RETURN_IF_ERROR(CheckShape(shape));
  CZ_RETURN_IF_ERROR(CheckValidDType(dtype, "Tensor::Empty"));
  const size_t nbytes = NumElements(shape) * ElementSize(dtype);
  CZ_ASSIGN_OR_RETURN(std::shared_ptr<Storage> storage,
                      Storage::Create(nbytes, device, options));
  return Tensor(std::move(storage), 0, std::move(shape), dtype);
}

absl::StatusOr<Tensor> Tensor::Zeros(Shape shape, DType dtype, Device device,
                                     const StorageOptions& options) {
  CZ_ASSIGN_OR_RETURN(Tensor t,
                      Empty(std::move(shape), dtype, device, options));
  if (!device.is_host_accessible()) {
    CZ_ASSIGN_OR_RETURN(Tensor host, Zeros(t.shape(), dtype));
    CZ_RETURN_IF_ERROR(t.CopyFrom(host));
  } else if (t.nbytes() > 0) {
    std::memset(t.raw_data(), 0, t.nbytes());
  }
  return t;
}

absl::StatusOr<Tensor> Tensor::FromFloats(absl::Span<const float> values,
                                          Shape shape, DType dtype) {
  if (NumElements(shape) != static_cast<int64_t>(values.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        values.size(), " values do not fill shape ", ShapeToString(shape)));
  }
  CZ_RETURN_IF_ERROR(CheckComputeDType(dtype, "Tensor::FromFloats"));
  CZ_ASSIGN_OR_RETURN(Tensor t, Empty(std::move(shape), dtype));
  switch (dtype) {
    case DType::kF32:
      if (!values.empty()) {
        std::memcpy(t.raw_data(), values.data(), values.size() * 4);
      }
      break;
    case DType::kF16:
      for (size_t i = 0; i < values.size(); ++i) {
        t.data<uint16_t>()[i] = FloatToHalfBits(values[i]);
      }
      break;
    case DType::kBF16:
      for (size_t i = 0; i < values.size(); ++i) {
        t.data<uint16_t>()[i] = FloatToBFloat16Bits(values[i]);
      }
      break;
    case DType::kU8:
    case DType::kI32:
    case DType::kI64:
    case DType::kF64:
      break;  // Refused above.
  }
  return t;
}

absl::StatusOr<Tensor> Tensor::View(std::shared_ptr<Storage> storage,
                                    size_t byte_offset, Shape shape,
                                    DType dtype) {
  if (storage == nullptr) {
    return absl::InvalidArgumentError("view of a null storage");
  }
  CZ_RETURN_IF_ERROR(CheckShape(shape));
  CZ_RETURN_IF_ERROR(CheckValidDType(dtype, "Tensor::View"));
  const size_t nbytes = NumElements(shape) * ElementSize(dtype);
  if (byte_offset % ElementSize(dtype) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte offset ", byte_offset, " is not a multiple of the ",
                     DTypeName(dtype), " element size"));
  }
  if (byte_offset > storage->nbytes() ||
      nbytes > storage->nbytes() - byte_offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("view ", DTypeName(dtype), ShapeToString(shape),
                     " at byte ", byte_offset, " does not fit in a storage of ",
                     storage->nbytes(), " bytes"));
  }
  return Tensor(std::move(storage), byte_offset, std::move(shape), dtype);
}

Shape Tensor::strides() const {
  Shape strides(shape_.size());
  int64_t stride = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= shape_[i];
  }
  return strides;
}

Device Tensor::device() const {
  return storage_ != nullptr ? storage_->device() : Device::Cpu();
}

bool Tensor::is_materialized() const {
  return storage_ != nullptr && storage_->allocated();
}

void* Tensor::raw_data() {
  if (!is_materialized()) return nullptr;
  return static_cast<char*>(storage_->data()) + byte_offset_;
}

const void* Tensor::raw_data() const {
  return const_cast<Tensor*>(this)->raw_data();
}

absl::StatusOr<Tensor> Tensor::Slice(int64_t begin, int64_t end) const {
  if (rank() == 0 || begin < 0 || end < begin || end > shape_[0]) {
    return absl::InvalidArgumentError(absl::StrCat("slice [", begin, ", ", end,
                                                   ") of ", DebugString(),
                                                   " is out of range"));
  }
  Shape shape = shape_;
  shape[0] = end - begin;
  const size_t row_bytes =
      NumElements(absl::MakeConstSpan(shape_).subspan(1)) * ElementSize(dtype_);
  return Tensor(storage_, byte_offset_ + begin * row_bytes, std::move(shape),
                dtype_);
}

absl::StatusOr<Tensor> Tensor::Reshape(Shape shape) const {
  CZ_RETURN_IF_ERROR(CheckShape(shape));
  if (NumElements(shape) != numel()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot reshape ", DebugString(), " to ", ShapeToString(shape)));
  }
  return Tensor(storage_, byte_offset_, std::move(shape), dtype_);
}

Tensor Tensor::Flatten() const {
  return Tensor(storage_, byte_offset_, Shape{numel()}, dtype_);
}

absl::StatusOr<Tensor> Tensor::ViewRange(int64_t element_offset,
                                         Shape shape) const {
  CZ_RETURN_IF_ERROR(CheckShape(shape));
  const int64_t count = NumElements(shape);
  if (element_offset < 0 || element_offset > numel() ||
      count > numel() - element_offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("range of ", count, " elements at ", element_offset,
                     " is outside ", DebugString()));
  }
  return Tensor(storage_, byte_offset_ + element_offset * ElementSize(dtype_),
                std::move(shape), dtype_);
}

absl::StatusOr<Tensor> Tensor::Clone(const StorageOptions& options) const {
  return To(device(), options);
}

absl::StatusOr<Tensor> Tensor::To(Device device,
                                  const StorageOptions& options) const {
  CZ_ASSIGN_OR_RETURN(Tensor copy, Empty(shape_, dtype_, device, options));
  CZ_RETURN_IF_ERROR(copy.CopyFrom(*this));
  return copy;
}

absl::Status Tensor::CopyFrom(const Tensor& src) {
  if (src.dtype() != dtype_ || src.numel() != numel()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot copy ", src.DebugString(), " into ", DebugString()));
  }
  if (!is_materialized() || !src.is_materialized()) {
    return absl::FailedPreconditionError(
        absl::StrCat("copy from ", src.DebugString(), " into ", DebugString(),
                     ": storage not materialised"));
  }
  return CopyBytes(raw_data(), device(), src.raw_data(), src.device(),
                   nbytes());
}

absl::StatusOr<std::vector<float>> Tensor::ToFloats() const {
  CZ_RETURN_IF_ERROR(CheckComputeDType(dtype_, DebugString()));
  if (numel() == 0) return std::vector<float>();
  if (!is_materialized()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read ", DebugString(), ": no memory"));
  }
  // A device the host cannot read (a GPU) is copied to the host first.
  const void* bytes = raw_data();
  std::vector<char> staged;
  if (!device().is_host_accessible()) {
    staged.resize(nbytes());
    CZ_RETURN_IF_ERROR(
        CopyBytes(staged.data(), Device::Cpu(), raw_data(), device(), nbytes()),
        "reading ", DebugString(), " on the host");
    bytes = staged.data();
  }
  std::vector<float> out(numel());
  const auto* halves = static_cast<const uint16_t*>(bytes);
  switch (dtype_) {
    case DType::kF32:
      std::memcpy(out.data(), bytes, nbytes());
      break;
    case DType::kF16:
      for (size_t i = 0; i < out.size(); ++i) {
        out[i] = HalfBitsToFloat(halves[i]);
      }
      break;
    case DType::kBF16:
      for (size_t i = 0; i < out.size(); ++i) {
        out[i] = BFloat16BitsToFloat(halves[i]);
      }
      break;
    case DType::kU8:
    case DType::kI32:
    case DType::kI64:
    case DType::kF64:
      break;  // Refused above.
  }
  return out;
}

std::string Tensor::DebugString() const {
  if (!defined()) return "undefined tensor";
  return absl::StrCat(DTypeName(dtype_), ShapeToString(shape_), " on ",
                      device().ToString(), " (+", byte_offset_, " B",
                      is_materialized() ? "" : ", not materialised", ")");
}

}  // namespace chunkzero
