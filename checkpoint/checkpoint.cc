#include "checkpoint/checkpoint.h"

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/ops/empty.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/trace.h"

namespace tessera::checkpoint {
namespace {

// See Note [Checkpoint format]. Version 1 pickled the tensors' bytes into
// the payload; it is still read.
constexpr char kMagic[8] = {'T', 'S', 'R', 'C', 'K', 'P', 'T', '2'};
constexpr char kMagicV1[8] = {'T', 'S', 'R', 'C', 'K', 'P', 'T', '1'};

std::string PathOf(const std::string& dir, const std::string& name) {
  return dir + "/" + name + ".ckpt";
}

[[noreturn]] void Fail(absl::StatusCode code, const std::string& path, const std::string& what) {
  throw StatusError(absl::Status(code, absl::StrCat("checkpoint ", path, ": ", what)));
}

[[noreturn]] void FailErrno(const std::string& path, const std::string& what) {
  Fail(absl::StatusCode::kInternal, path, absl::StrCat(what, ": ", std::strerror(errno)));
}

void WriteAll(int fd, const char* data, size_t size, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) FailErrno(path, "write");
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) FailErrno(dir, "open directory");
  const int synced = ::fsync(fd);
  ::close(fd);
  if (synced != 0) FailErrno(dir, "fsync directory");
}

// The position and each tensor's name, type and shape; the bytes follow.
c10::IValue HeaderOf(const Checkpoint& checkpoint) {
  c10::List<std::string> names;
  c10::List<int64_t> types;
  c10::impl::GenericList shapes(c10::ListType::ofInts());
  for (const auto& [name, tensor] : checkpoint.tensors) {
    names.push_back(name);
    types.push_back(tensor.defined() ? static_cast<int64_t>(tensor.scalar_type()) : -1);
    shapes.push_back(
        c10::List<int64_t>(tensor.defined() ? tensor.sizes().vec() : std::vector<int64_t>{}));
  }
  c10::impl::GenericDict all(c10::StringType::get(), c10::AnyType::get());
  all.insert("names", names);
  all.insert("types", types);
  all.insert("shapes", shapes);
  all.insert("epoch", checkpoint.position.epoch);
  all.insert("step", checkpoint.position.step);
  all.insert("samples_seen", checkpoint.position.samples_seen);
  all.insert("rng_state", checkpoint.position.rng_state.defined()
                              ? c10::IValue(checkpoint.position.rng_state)
                              : c10::IValue());
  return all;
}

// The types a checkpoint may hold: a file naming another is refused rather
// than handed to c10::elementSize, which throws on some.
bool KnownType(int64_t type) {
  switch (static_cast<c10::ScalarType>(type)) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kBFloat16:
    case at::kLong:
    case at::kInt:
    case at::kShort:
    case at::kChar:
    case at::kByte:
    case at::kBool:
      return true;
    default:
      return false;
  }
}

// The position, from either version's dictionary.
TrainingPosition PositionOf(const c10::impl::GenericDict& all, const std::string& path) {
  for (const char* key : {"epoch", "step", "samples_seen"}) {
    if (!all.contains(key) || !all.at(key).isInt()) {
      Fail(absl::StatusCode::kDataLoss, path, absl::StrCat(key, " missing or malformed"));
    }
  }
  TrainingPosition position;
  position.epoch = all.at("epoch").toInt();
  position.step = all.at("step").toInt();
  position.samples_seen = all.at("samples_seen").toInt();
  if (all.contains("rng_state") && all.at("rng_state").isTensor()) {
    position.rng_state = all.at("rng_state").toTensor();
  }
  return position;
}

// `size` bytes from `fd` at its offset, or DataLoss if the file ends first.
void ReadAll(int fd, char* data, uint64_t size, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::read(fd, data, std::min<uint64_t>(size, 1 << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) FailErrno(path, "read");
    if (n == 0) Fail(absl::StatusCode::kDataLoss, path, "short read");
    data += n;
    size -= static_cast<uint64_t>(n);
  }
}

c10::IValue Unpickle(const std::vector<char>& bytes, const std::string& path) {
  try {
    return torch::jit::pickle_load(bytes);
  } catch (const std::exception& e) {
    Fail(absl::StatusCode::kDataLoss, path, absl::StrCat("unreadable: ", e.what()));
  }
}

// Version 2: the header's tensors, read straight into their own memory.
Checkpoint ReadVersion2(int fd, uint64_t header_size, uint64_t file_size, const std::string& path) {
  std::vector<char> bytes(header_size);
  ReadAll(fd, bytes.data(), header_size, path);
  const c10::IValue header = Unpickle(bytes, path);
  auto malformed = [&path] { Fail(absl::StatusCode::kDataLoss, path, "header malformed"); };
  if (!header.isGenericDict()) malformed();
  const auto all = header.toGenericDict();
  for (const char* key : {"names", "types", "shapes"}) {
    if (!all.contains(key) || !all.at(key).isList()) malformed();
  }
  const auto names = all.at("names").toListRef();
  const auto types = all.at("types").toListRef();
  const auto shapes = all.at("shapes").toListRef();
  if (types.size() != names.size() || shapes.size() != names.size()) malformed();
  // Every size is checked against the file before anything is allocated.
  const uint64_t available = file_size - 2 * sizeof(uint64_t) - header_size;
  uint64_t needed = 0;
  std::vector<std::pair<std::vector<int64_t>, int64_t>> layout;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!names[i].isString() || !types[i].isInt() || !shapes[i].isIntList()) malformed();
    const int64_t type = types[i].toInt();
    std::vector<int64_t> shape = shapes[i].toIntVector();
    if (type != -1 && !KnownType(type)) malformed();
    uint64_t bytes_of = type == -1 ? 0 : c10::elementSize(static_cast<c10::ScalarType>(type));
    for (int64_t d : shape) {
      if (d < 0 || (d > 0 && bytes_of > available / static_cast<uint64_t>(d))) {
        Fail(absl::StatusCode::kDataLoss, path,
             absl::StrCat("tensor '", names[i].toStringRef(), "' is larger than the file"));
      }
      bytes_of *= static_cast<uint64_t>(d);
    }
    needed += bytes_of;
    if (needed > available) break;
    layout.emplace_back(std::move(shape), type);
  }
  if (needed != available) {
    Fail(absl::StatusCode::kDataLoss, path,
         absl::StrCat("holds ", available, " bytes of tensors, its header says ", needed));
  }
  Checkpoint checkpoint;
  for (size_t i = 0; i < names.size(); ++i) {
    const auto& [shape, type] = layout[i];
    at::Tensor& tensor = checkpoint.tensors[names[i].toStringRef()];
    if (type == -1) continue;
    tensor = at::empty(shape, at::TensorOptions(static_cast<c10::ScalarType>(type)));
    ReadAll(fd, static_cast<char*>(tensor.data_ptr()), tensor.nbytes(), path);
  }
  checkpoint.position = PositionOf(all, path);
  return checkpoint;
}

// Version 1: one pickled dictionary of the tensors and the position.
Checkpoint FromIValue(const c10::IValue& value, const std::string& path) {
  if (!value.isGenericDict()) Fail(absl::StatusCode::kDataLoss, path, "not a checkpoint");
  const auto all = value.toGenericDict();
  if (!all.contains("tensors") || !all.at("tensors").isGenericDict()) {
    Fail(absl::StatusCode::kDataLoss, path, "tensors malformed");
  }
  Checkpoint checkpoint;
  for (const auto& entry : all.at("tensors").toGenericDict()) {
    if (!entry.key().isString() || !entry.value().isTensor()) {
      Fail(absl::StatusCode::kDataLoss, path, "tensors malformed");
    }
    checkpoint.tensors[entry.key().toStringRef()] = entry.value().toTensor();
  }
  checkpoint.position = PositionOf(all, path);
  return checkpoint;
}

}  // namespace

void SaveCheckpoint(const std::string& dir, const std::string& name,
                    const Checkpoint& checkpoint) {
  trace::Span span;
  if (trace::Enabled()) {
    span = trace::Span::Begin(trace::Track::kCheckpoint, "checkpoint", "save checkpoint " + name);
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) FailErrno(dir, "mkdir");
  const std::string path = PathOf(dir, name);
  // See Note [Checkpoint format]: the tensors' bytes go from their own
  // memory to the file, not through a pickled copy.
  std::vector<at::Tensor> tensors;
  for (const auto& [tensor_name, tensor] : checkpoint.tensors) {
    tensors.push_back(tensor.defined() ? tensor.cpu().contiguous() : tensor);  // no-ops mostly
  }
  const std::vector<char> header = torch::jit::pickle_save(HeaderOf(checkpoint));
  // A name of its own per writer: concurrent or crashed writers never share
  // a temporary file.
  const std::string temporary = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) FailErrno(temporary, "open");
  const uint64_t size = header.size();
  char length[sizeof(size)];
  std::memcpy(length, &size, sizeof(size));
  try {
    WriteAll(fd, kMagic, sizeof(kMagic), temporary);
    WriteAll(fd, length, sizeof(length), temporary);
    WriteAll(fd, header.data(), header.size(), temporary);
    for (const at::Tensor& tensor : tensors) {
      if (!tensor.defined()) continue;
      WriteAll(fd, static_cast<const char*>(tensor.data_ptr()), tensor.nbytes(), temporary);
    }
    if (::fsync(fd) != 0) FailErrno(temporary, "fsync");
  } catch (...) {
    ::close(fd);
    ::unlink(temporary.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    ::unlink(temporary.c_str());
    FailErrno(path, "rename");
  }
  SyncDirectory(dir);
}

std::optional<Checkpoint> LoadCheckpoint(const std::string& dir, const std::string& name) {
  const std::string path = PathOf(dir, name);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    FailErrno(path, "open");
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat file {};
  if (::fstat(fd, &file) != 0) FailErrno(path, "stat");
  const uint64_t file_size = static_cast<uint64_t>(file.st_size);
  char magic[sizeof(kMagic)];
  uint64_t size = 0;
  if (file_size < sizeof(magic) + sizeof(size)) {
    Fail(absl::StatusCode::kDataLoss, path, "not a Tessera checkpoint");
  }
  ReadAll(fd, magic, sizeof(magic), path);
  ReadAll(fd, reinterpret_cast<char*>(&size), sizeof(size), path);
  const bool v2 = std::memcmp(magic, kMagic, sizeof(kMagic)) == 0;
  if (!v2 && std::memcmp(magic, kMagicV1, sizeof(kMagicV1)) != 0) {
    Fail(absl::StatusCode::kDataLoss, path, "not a Tessera checkpoint");
  }
  const uint64_t available = file_size - sizeof(magic) - sizeof(size);
  if (v2 ? size > available : size != available) {
    Fail(absl::StatusCode::kDataLoss, path,
         absl::StrCat("holds ", available, " payload bytes, its header says ", size));
  }
  if (v2) return ReadVersion2(fd, size, file_size, path);
  std::vector<char> payload(size);
  ReadAll(fd, payload.data(), size, path);
  return FromIValue(Unpickle(payload, path), path);
}

}  // namespace tessera::checkpoint
