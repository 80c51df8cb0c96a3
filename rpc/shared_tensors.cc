#include "rpc/shared_tensors.h"

#include <c10/core/TensorImpl.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "common/status.h"

namespace tessera::rpc {
namespace {

std::string IdHex(const SharedSegment::Id& id) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(id.data()), id.size()));
}

// The memfd's name, which /proc/self/fd shows as "/memfd:NAME (deleted)".
std::string MemfdName(const SharedSegment::Id& id) { return "tessera-" + IdHex(id); }

std::string Errno(const char* what) { return absl::StrCat(what, ": ", std::strerror(errno)); }

// Segments mapped in this process, by file, so that one received again (an
// echo returns the caller's own) is viewed through the mapping already here.
struct MappedSegments {
  Mutex mu;
  std::map<std::pair<dev_t, ino_t>, std::weak_ptr<SharedSegment>> by_file ABSL_GUARDED_BY(mu);
};

MappedSegments& Mapped() {
  static auto* mapped = new MappedSegments;
  return *mapped;
}

std::pair<dev_t, ino_t> FileOf(int fd) {
  struct stat st {};
  ::fstat(fd, &st);
  return {st.st_dev, st.st_ino};
}

// The storage's deleter: its context holds one reference to the segment.
void ReleaseSegment(void* context) { delete static_cast<std::shared_ptr<SharedSegment>*>(context); }

}  // namespace

absl::StatusOr<std::shared_ptr<SharedSegment>> SharedSegment::Create(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  Id id;
  if (::getrandom(id.data(), id.size(), 0) != static_cast<ssize_t>(id.size())) {
    return absl::InternalError(Errno("getrandom for a shared-memory segment's id"));
  }
  const int fd = ::memfd_create(MemfdName(id).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return absl::ResourceExhaustedError(Errno("memfd_create"));
  // Reserved now, so that a full tmpfs is this error rather than a SIGBUS
  // on first touch; then sealed, so that no holder can shrink it under
  // another's mapping.
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)) != 0 ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const std::string why =
        absl::StrCat("cannot reserve a shared-memory segment of ", bytes, " bytes");
    ::close(fd);
    return absl::ResourceExhaustedError(why);
  }
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (data == MAP_FAILED) {
    const std::string why = Errno("mmap of a shared-memory segment");
    ::close(fd);
    return absl::ResourceExhaustedError(why);
  }
  std::shared_ptr<SharedSegment> segment(
      new SharedSegment(fd, static_cast<char*>(data), bytes, id));
  MappedSegments& mapped = Mapped();
  MutexLock lock(&mapped.mu);
  mapped.by_file[FileOf(fd)] = segment;
  return segment;
}

absl::StatusOr<std::shared_ptr<SharedSegment>> SharedSegment::Adopt(int fd, const Id& id,
                                                                    size_t bytes) {
  auto refuse = [fd](const std::string& why) {
    ::close(fd);
    return absl::InvalidArgumentError("shared-memory segment refused: " + why);
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return refuse("not a regular file");
  // Only a segment made by Create, under the id the envelope names, is
  // taken: the descriptor came from whoever could post to the inbox.
  char link[128] = {};
  const std::string path = absl::StrCat("/proc/self/fd/", fd);
  const ssize_t n = ::readlink(path.c_str(), link, sizeof(link) - 1);
  if (n <= 0 || std::string(link, n) != "/memfd:" + MemfdName(id) + " (deleted)") {
    return refuse("its name is not the one the envelope gives");
  }
  if (static_cast<uint64_t>(st.st_size) != bytes) {
    return refuse(absl::StrCat("it has ", st.st_size, " bytes where the envelope says ", bytes));
  }
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return refuse("it is not sealed against shrinking");
  }

  MappedSegments& mapped = Mapped();
  MutexLock lock(&mapped.mu);
  auto& entry = mapped.by_file[{st.st_dev, st.st_ino}];
  if (auto segment = entry.lock()) {
    ::close(fd);
    return segment;
  }
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (data == MAP_FAILED) return refuse(Errno("mmap"));
  std::shared_ptr<SharedSegment> segment(
      new SharedSegment(fd, static_cast<char*>(data), bytes, id));
  entry = segment;
  return segment;
}

SharedSegment::~SharedSegment() {
  {
    MappedSegments& mapped = Mapped();
    MutexLock lock(&mapped.mu);
    auto it = mapped.by_file.find(FileOf(fd_));
    // A segment adopted again after this one expired has its own entry.
    if (it != mapped.by_file.end() && it->second.expired()) mapped.by_file.erase(it);
  }
  ::munmap(data_, bytes_);
  ::close(fd_);
}

std::optional<SharedView> SharedViewOf(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage()) return std::nullopt;
  const c10::DataPtr& data = tensor.storage().data_ptr();
  if (data.get_deleter() != &ReleaseSegment) return std::nullopt;
  const auto* segment = static_cast<const std::shared_ptr<SharedSegment>*>(data.get_context());
  const char* first = static_cast<const char*>(tensor.data_ptr());
  return SharedView{*segment, static_cast<uint64_t>(first - (*segment)->data())};
}

absl::StatusOr<at::Tensor> TensorInSegment(std::shared_ptr<SharedSegment> segment, uint64_t offset,
                                           at::IntArrayRef sizes, at::ScalarType dtype) {
  const uint64_t element = c10::elementSize(dtype);
  uint64_t bytes = element;
  for (int64_t size : sizes) {
    // Never past the segment, so the product cannot overflow.
    if (size < 0 || (size != 0 && bytes > segment->size() / static_cast<uint64_t>(size))) {
      return absl::InvalidArgumentError("a tensor's shape does not fit its shared-memory segment");
    }
    bytes *= static_cast<uint64_t>(size);
  }
  if (offset % element != 0 || offset > segment->size() || bytes > segment->size() - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("a tensor of ", bytes, " bytes at offset ", offset,
                     " does not fit a shared-memory segment of ", segment->size(),
                     " bytes (or is not aligned to its ", element, "-byte elements)"));
  }
  char* const base = segment->data();
  const size_t segment_bytes = segment->size();
  c10::Storage storage(c10::Storage::use_byte_size_t(), segment_bytes,
                       c10::DataPtr(base, new std::shared_ptr<SharedSegment>(std::move(segment)),
                                    &ReleaseSegment, c10::Device(c10::kCPU)),
                       /*allocator=*/nullptr, /*resizable=*/false);
  at::Tensor tensor = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU),
      c10::scalarTypeToTypeMeta(dtype));
  tensor.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  tensor.unsafeGetTensorImpl()->set_storage_offset(static_cast<int64_t>(offset / element));
  return tensor;
}

at::Tensor EmptyInSharedMemory(at::IntArrayRef sizes, at::ScalarType dtype) {
  uint64_t bytes = c10::elementSize(dtype);
  for (int64_t size : sizes) {
    if (size < 0) ThrowIfError(absl::InvalidArgumentError(absl::StrCat("negative size ", size)));
    bytes *= static_cast<uint64_t>(size);
  }
  auto segment = ValueOrThrow(SharedSegment::Create(bytes));
  return ValueOrThrow(TensorInSegment(std::move(segment), 0, sizes, dtype));
}

at::Tensor ToSharedMemory(const at::Tensor& tensor) {
  if (tensor.is_contiguous() && IsInSharedMemory(tensor)) return tensor;
  if (!tensor.device().is_cpu() || tensor.layout() != c10::kStrided || tensor.is_quantized()) {
    ThrowIfError(absl::InvalidArgumentError("only dense CPU tensors can move to shared memory"));
  }
  at::Tensor shared = EmptyInSharedMemory(tensor.sizes(), tensor.scalar_type());
  shared.copy_(tensor);
  return shared;
}

bool IsInSharedMemory(const at::Tensor& tensor) { return SharedViewOf(tensor).has_value(); }

}  // namespace tessera::rpc
