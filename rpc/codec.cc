#include "rpc/codec.h"

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/core/jit_type.h>
#include <ATen/ops/empty.h>

#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace tessera::rpc {
namespace {

bool IsSupportedDtype(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Byte:
    case c10::ScalarType::Char:
    case c10::ScalarType::Short:
    case c10::ScalarType::Int:
    case c10::ScalarType::Long:
    case c10::ScalarType::Half:
    case c10::ScalarType::Float:
    case c10::ScalarType::Double:
    case c10::ScalarType::ComplexFloat:
    case c10::ScalarType::ComplexDouble:
    case c10::ScalarType::Bool:
    case c10::ScalarType::BFloat16:
      return true;
    default:
      return false;
  }
}

absl::Status EncodeTensor(const at::Tensor& tensor, proto::Value* out,
                          Message* message, const CodecLimits& limits) {
  if (!tensor.defined()) {
    out->mutable_none();
    return absl::OkStatus();
  }
  if (!tensor.device().is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot send a tensor on ", tensor.device().str(),
                     ": only CPU tensors travel over RPC"));
  }
  if (tensor.layout() != c10::kStrided || tensor.is_quantized()) {
    return absl::InvalidArgumentError(
        "only dense (strided, unquantized) tensors travel over RPC");
  }
  if (!IsSupportedDtype(tensor.scalar_type())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor dtype ", c10::toString(tensor.scalar_type()), " is not supported"));
  }
  if (message->tensors.size() >= limits.max_tensors) {
    return absl::InvalidArgumentError(
        absl::StrCat("more than ", limits.max_tensors, " tensors in one message"));
  }
  // A contiguous view is sent from its own first element: no storage copy.
  // Anything else is compacted first, so only the view's elements travel.
  at::Tensor contiguous = tensor.is_contiguous() ? tensor : tensor.contiguous();
  proto::TensorMeta* meta = message->envelope.add_tensors();
  meta->set_dtype(static_cast<int32_t>(contiguous.scalar_type()));
  for (int64_t size : contiguous.sizes()) meta->add_sizes(size);
  out->set_tensor_index(static_cast<uint32_t>(message->tensors.size()));
  message->tensors.push_back(std::move(contiguous));
  return absl::OkStatus();
}

absl::Status EncodeAt(const c10::IValue& value, proto::Value* out,
                      Message* message, const CodecLimits& limits, Peer peer,
                      int depth) {
  if (depth > limits.max_depth) {
    return absl::InvalidArgumentError(
        absl::StrCat("value nested deeper than ", limits.max_depth));
  }
  if (value.isNone()) {
    out->mutable_none();
  } else if (value.isBool()) {
    out->set_bool_value(value.toBool());
  } else if (value.isInt()) {
    out->set_int_value(value.toInt());
  } else if (value.isDouble()) {
    out->set_double_value(value.toDouble());
  } else if (value.isString()) {
    out->set_string_value(value.toStringRef());
  } else if (value.isTensor()) {
    return EncodeTensor(value.toTensor(), out, message, limits);
  } else if (value.isList() || value.isTuple()) {
    auto* list = out->mutable_list();
    if (value.isList()) {
      for (const c10::IValue& item : value.toListRef()) {
        auto status = EncodeAt(item, list->add_items(), message, limits, peer, depth + 1);
        if (!status.ok()) return status;
      }
    } else {
      for (const c10::IValue& item : value.toTupleRef().elements()) {
        auto status = EncodeAt(item, list->add_items(), message, limits, peer, depth + 1);
        if (!status.ok()) return status;
      }
    }
  } else if (value.isGenericDict()) {
    auto* dict = out->mutable_dict();
    for (const auto& entry : value.toGenericDict()) {
      if (!entry.key().isString()) {
        return absl::InvalidArgumentError(
            "only dictionaries with string keys travel over RPC, got key of type " +
            DescribeIValue(entry.key()));
      }
      auto* item = dict->add_entries();
      item->set_key(entry.key().toStringRef());
      auto status = EncodeAt(entry.value(), item->mutable_value(), message,
                             limits, peer, depth + 1);
      if (!status.ok()) return status;
    }
  } else if (value.isRRef()) {
    if (peer.hooks == nullptr) {
      return absl::InvalidArgumentError(
          "an RRef cannot travel here: this runtime has no RRef support attached");
    }
    return peer.hooks->EncodeRRef(value, peer.rank, out->mutable_rref());
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("values of type ", value.tagKind(), " cannot travel over RPC"));
  }
  return absl::OkStatus();
}

// The element type shared by all `items`, or Any when they differ.
c10::TypePtr CommonType(const std::vector<c10::IValue>& items) {
  if (items.empty()) return c10::AnyType::get();
  auto kind = [](const c10::IValue& v) -> c10::TypePtr {
    if (v.isTensor()) return c10::TensorType::get();
    if (v.isInt()) return c10::IntType::get();
    if (v.isDouble()) return c10::FloatType::get();
    if (v.isBool()) return c10::BoolType::get();
    if (v.isString()) return c10::StringType::get();
    return nullptr;
  };
  c10::TypePtr first = kind(items[0]);
  if (first == nullptr) return c10::AnyType::get();
  for (const auto& item : items) {
    c10::TypePtr t = kind(item);
    if (t == nullptr || *t != *first) return c10::AnyType::get();
  }
  return first;
}

absl::StatusOr<c10::IValue> DecodeAt(const proto::Value& value,
                                     const std::vector<at::Tensor>& tensors,
                                     const CodecLimits& limits, Peer peer, int depth) {
  if (depth > limits.max_depth) {
    return absl::InvalidArgumentError(
        absl::StrCat("value nested deeper than ", limits.max_depth));
  }
  switch (value.kind_case()) {
    case proto::Value::kNone:
      return c10::IValue();
    case proto::Value::kBoolValue:
      return c10::IValue(value.bool_value());
    case proto::Value::kIntValue:
      return c10::IValue(static_cast<int64_t>(value.int_value()));
    case proto::Value::kDoubleValue:
      return c10::IValue(value.double_value());
    case proto::Value::kStringValue:
      return c10::IValue(value.string_value());
    case proto::Value::kTensorIndex: {
      if (value.tensor_index() >= tensors.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor index ", value.tensor_index(),
                         " out of range (message has ", tensors.size(), ")"));
      }
      return c10::IValue(tensors[value.tensor_index()]);
    }
    case proto::Value::kList: {
      std::vector<c10::IValue> items;
      items.reserve(value.list().items_size());
      for (const auto& item : value.list().items()) {
        TESSERA_ASSIGN_OR_RETURN(auto decoded, DecodeAt(item, tensors, limits, peer, depth + 1));
        items.push_back(std::move(decoded));
      }
      c10::impl::GenericList list(CommonType(items));
      list.reserve(items.size());
      for (auto& item : items) list.push_back(std::move(item));
      return c10::IValue(std::move(list));
    }
    case proto::Value::kDict: {
      std::vector<c10::IValue> values;
      values.reserve(value.dict().entries_size());
      for (const auto& entry : value.dict().entries()) {
        TESSERA_ASSIGN_OR_RETURN(auto decoded,
                                 DecodeAt(entry.value(), tensors, limits, peer, depth + 1));
        values.push_back(std::move(decoded));
      }
      c10::impl::GenericDict dict(c10::StringType::get(), CommonType(values));
      for (int i = 0; i < value.dict().entries_size(); ++i) {
        dict.insert_or_assign(c10::IValue(value.dict().entries(i).key()),
                              std::move(values[i]));
      }
      return c10::IValue(std::move(dict));
    }
    case proto::Value::kRref:
      if (peer.hooks == nullptr) {
        return absl::InvalidArgumentError("an RRef arrived but this runtime has no RRef support");
      }
      return peer.hooks->DecodeRRef(value.rref(), peer.rank);
    case proto::Value::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("value with no kind set");
}

// Appends `value` as a protobuf base-128 varint.
void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

}  // namespace

absl::StatusOr<uint64_t> TensorBytes(const proto::TensorMeta& meta, size_t index,
                                     const CodecLimits& limits) {
  const auto dtype = static_cast<c10::ScalarType>(meta.dtype());
  if (meta.dtype() < 0 || meta.dtype() >= static_cast<int>(c10::ScalarType::NumOptions) ||
      !IsSupportedDtype(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", index, ": unsupported dtype code ", meta.dtype()));
  }
  if (static_cast<size_t>(meta.sizes_size()) > limits.max_dims) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", index, ": ", meta.sizes_size(), " dimensions"));
  }
  uint64_t bytes = c10::elementSize(dtype);
  for (int64_t size : meta.sizes()) {
    if (size < 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", index, ": negative size ", size));
    }
    if (size != 0 && bytes > limits.max_tensor_bytes / static_cast<uint64_t>(size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", index, ": shape exceeds the tensor byte limit"));
    }
    bytes *= static_cast<uint64_t>(size);
  }
  return bytes;
}

absl::Status EncodeValue(const c10::IValue& value, proto::Value* out,
                         Message* message, const CodecLimits& limits, Peer peer) {
  return EncodeAt(value, out, message, limits, peer, 0);
}

absl::StatusOr<c10::IValue> DecodeValue(const proto::Value& value,
                                        const std::vector<at::Tensor>& tensors,
                                        const CodecLimits& limits, Peer peer) {
  return DecodeAt(value, tensors, limits, peer, 0);
}

absl::StatusOr<std::vector<at::Tensor>> AllocateTensors(
    const proto::Envelope& envelope,
    const std::vector<size_t>& payload_lengths, const CodecLimits& limits,
    BufferPool* pool) {
  const size_t count = envelope.tensors_size();
  if (count != payload_lengths.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("envelope describes ", count, " tensors but the frame carries ",
                     payload_lengths.size()));
  }
  if (count > limits.max_tensors) {
    return absl::InvalidArgumentError(
        absl::StrCat(count, " tensors exceed the limit of ", limits.max_tensors));
  }
  // First pass: validate everything, so a bad frame allocates nothing.
  uint64_t total_bytes = 0;
  for (size_t i = 0; i < count; ++i) {
    if (envelope.tensors(i).has_shared()) {
      // See Note [Tensors in shared memory]: only the TensorPipe backend's
      // frame reader takes those, from its inbox, before calling here.
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", i, ": named as in shared memory, where its bytes should be"));
    }
    TESSERA_ASSIGN_OR_RETURN(auto bytes, TensorBytes(envelope.tensors(i), i, limits));
    if (bytes != payload_lengths[i]) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", i, ": metadata says ", bytes,
                                                     " bytes but the frame carries ",
                                                     payload_lengths[i]));
    }
    total_bytes += bytes;
    if (total_bytes > limits.max_tensor_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("message tensors exceed ", limits.max_tensor_bytes, " bytes"));
    }
  }
  std::vector<at::Tensor> tensors;
  tensors.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const proto::TensorMeta& meta = envelope.tensors(i);
    std::vector<int64_t> sizes(meta.sizes().begin(), meta.sizes().end());
    const auto dtype = static_cast<c10::ScalarType>(meta.dtype());
    tensors.push_back(pool != nullptr
                          ? pool->Allocate(sizes, dtype)
                          : at::empty(sizes, at::TensorOptions().dtype(dtype)));
  }
  return tensors;
}

std::string SerializeEnvelopeWithTensors(const proto::Envelope& envelope,
                                         const std::vector<at::Tensor>& tensors) {
  std::string out = envelope.SerializeAsString();
  if (tensors.empty()) return out;
  size_t bytes = 0;
  for (const at::Tensor& tensor : tensors) bytes += tensor.nbytes();
  // A serialized field appended to a serialized message is parsed as if it
  // had been set: the tensors are copied once, straight into the frame.
  constexpr uint32_t kWireTypeLengthDelimited = 2;
  AppendVarint((proto::Envelope::kTensorBytesFieldNumber << 3) | kWireTypeLengthDelimited, &out);
  AppendVarint(bytes, &out);
  out.reserve(out.size() + bytes);
  for (const at::Tensor& tensor : tensors) {
    out.append(static_cast<const char*>(tensor.data_ptr()), tensor.nbytes());
  }
  return out;
}

absl::StatusOr<std::vector<at::Tensor>> TakeTensorsFromEnvelope(proto::Envelope* envelope,
                                                                const CodecLimits& limits) {
  std::vector<size_t> lengths;
  lengths.reserve(envelope->tensors_size());
  uint64_t total_bytes = 0;
  for (int i = 0; i < envelope->tensors_size(); ++i) {
    TESSERA_ASSIGN_OR_RETURN(auto bytes, TensorBytes(envelope->tensors(i), i, limits));
    total_bytes += bytes;
    if (total_bytes > envelope->tensor_bytes().size()) break;  // reported below
    lengths.push_back(bytes);
  }
  if (total_bytes != envelope->tensor_bytes().size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("envelope carries ", envelope->tensor_bytes().size(),
                     " bytes of tensors but its metadata describes ",
                     total_bytes > envelope->tensor_bytes().size() ? "more" : "fewer"));
  }
  TESSERA_ASSIGN_OR_RETURN(auto tensors, AllocateTensors(*envelope, lengths, limits));
  const char* next = envelope->tensor_bytes().data();
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::memcpy((tensors)[i].data_ptr(), next, lengths[i]);
    next += lengths[i];
  }
  envelope->clear_tensor_bytes();
  return tensors;
}

absl::StatusOr<proto::Envelope> ParseEnvelope(const std::string& bytes,
                                              const CodecLimits& limits) {
  if (bytes.size() > limits.max_envelope_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "envelope of ", bytes.size(), " bytes exceeds ", limits.max_envelope_bytes));
  }
  proto::Envelope envelope;
  if (!envelope.ParseFromString(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed envelope (", bytes.size(), " bytes)"));
  }
  return envelope;
}

std::string DescribeIValue(const c10::IValue& value) {
  if (value.isNone()) return "None";
  if (value.isTensor()) return "Tensor";
  if (value.isInt()) return "int";
  if (value.isDouble()) return "float";
  if (value.isBool()) return "bool";
  if (value.isString()) return "str";
  if (value.isList()) {
    const auto& items = value.toListRef();
    if (items.empty()) return "List[]";
    std::vector<std::string> kinds;
    for (const auto& item : items) {
      std::string kind = DescribeIValue(item);
      if (kinds.empty() || kinds.back() != kind) kinds.push_back(kind);
      if (kinds.size() > 3) break;
    }
    return "List[" + absl::StrJoin(kinds, "|") + "]";
  }
  if (value.isGenericDict()) return "Dict[str, ...]";
  if (value.isRRef()) return "RRef";
  if (value.isTuple()) return "Tuple";
  return value.tagKind();
}

}  // namespace tessera::rpc
