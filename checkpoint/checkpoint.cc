#include "checkpoint/checkpoint.h"

#include <ATen/core/Dict.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/trace.h"

namespace tessera::checkpoint {
namespace {

constexpr char kMagic[8] = {'T', 'S', 'R', 'C', 'K', 'P', 'T', '1'};

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

c10::IValue ToIValue(const Checkpoint& checkpoint) {
  c10::Dict<std::string, at::Tensor> tensors;
  for (const auto& [name, tensor] : checkpoint.tensors) tensors.insert(name, tensor);
  c10::impl::GenericDict all(c10::StringType::get(), c10::AnyType::get());
  all.insert("tensors", tensors);
  all.insert("epoch", checkpoint.position.epoch);
  all.insert("step", checkpoint.position.step);
  all.insert("samples_seen", checkpoint.position.samples_seen);
  all.insert("rng_state", checkpoint.position.rng_state.defined()
                              ? c10::IValue(checkpoint.position.rng_state)
                              : c10::IValue());
  return all;
}

Checkpoint FromIValue(const c10::IValue& value, const std::string& path) {
  if (!value.isGenericDict()) Fail(absl::StatusCode::kDataLoss, path, "not a checkpoint");
  const auto all = value.toGenericDict();
  auto field = [&](const char* key) {
    if (!all.contains(key)) Fail(absl::StatusCode::kDataLoss, path, absl::StrCat("no ", key));
    return all.at(key);
  };
  Checkpoint checkpoint;
  const c10::IValue tensors = field("tensors");
  if (!tensors.isGenericDict()) Fail(absl::StatusCode::kDataLoss, path, "tensors malformed");
  for (const auto& entry : tensors.toGenericDict()) {
    if (!entry.key().isString() || !entry.value().isTensor()) {
      Fail(absl::StatusCode::kDataLoss, path, "tensors malformed");
    }
    checkpoint.tensors[entry.key().toStringRef()] = entry.value().toTensor();
  }
  for (const char* key : {"epoch", "step", "samples_seen"}) {
    if (!field(key).isInt()) Fail(absl::StatusCode::kDataLoss, path, absl::StrCat(key, " malformed"));
  }
  checkpoint.position.epoch = field("epoch").toInt();
  checkpoint.position.step = field("step").toInt();
  checkpoint.position.samples_seen = field("samples_seen").toInt();
  const c10::IValue rng = field("rng_state");
  if (rng.isTensor()) checkpoint.position.rng_state = rng.toTensor();
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
  const std::vector<char> payload = torch::jit::pickle_save(ToIValue(checkpoint));
  // A name of its own per writer: concurrent or crashed writers never share
  // a temporary file.
  const std::string temporary = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) FailErrno(temporary, "open");
  const uint64_t size = payload.size();
  char length[sizeof(size)];
  std::memcpy(length, &size, sizeof(size));
  try {
    WriteAll(fd, kMagic, sizeof(kMagic), temporary);
    WriteAll(fd, length, sizeof(length), temporary);
    WriteAll(fd, payload.data(), payload.size(), temporary);
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
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return std::nullopt;
    FailErrno(path, "open");
  }
  char magic[sizeof(kMagic)];
  uint64_t size = 0;
  if (!in.read(magic, sizeof(magic)) || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0 ||
      !in.read(reinterpret_cast<char*>(&size), sizeof(size))) {
    Fail(absl::StatusCode::kDataLoss, path, "not a Tessera checkpoint");
  }
  in.seekg(0, std::ios::end);
  const uint64_t available = static_cast<uint64_t>(in.tellg()) - sizeof(kMagic) - sizeof(size);
  if (available != size) {
    Fail(absl::StatusCode::kDataLoss, path,
         absl::StrCat("holds ", available, " payload bytes, its header says ", size));
  }
  in.seekg(sizeof(kMagic) + sizeof(size));
  std::vector<char> payload(size);
  if (!in.read(payload.data(), static_cast<std::streamsize>(size))) {
    Fail(absl::StatusCode::kDataLoss, path, "short read");
  }
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(payload);
  } catch (const std::exception& e) {
    Fail(absl::StatusCode::kDataLoss, path, absl::StrCat("unreadable: ", e.what()));
  }
  return FromIValue(value, path);
}

}  // namespace tessera::checkpoint
