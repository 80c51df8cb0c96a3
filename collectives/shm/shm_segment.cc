#include "collectives/shm/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"

namespace tessera::collectives {
namespace {

// Names: /tessera-shm-<pid namespace inode>-<creator pid>-<tag>-<random>.
constexpr char kPrefix[] = "tessera-shm-";
// Liveness bytes start here (past any segment, so they never overlap data
// locks of anyone else; locks may lie beyond the end of a file).
constexpr off_t kLivenessBase = off_t{1} << 40;

std::string PidNamespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? absl::StrCat(st.st_ino) : "0";
}

std::string RandomHex() {
  std::random_device device;
  return absl::StrCat(absl::Hex(device(), absl::kZeroPad8), absl::Hex(device(), absl::kZeroPad8));
}

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::StatusOr<void*> Map(int fd, size_t bytes, const std::string& name) {
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return Errno(absl::StrCat("mmap of shared memory ", name));
  return data;
}

struct flock LivenessLock(int slot, short type) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = kLivenessBase + slot;
  lock.l_len = 1;
  return lock;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(const std::string& tag,
                                                               size_t bytes) {
  RemoveAbandonedSegments();
  const std::string name =
      absl::StrCat("/", kPrefix, PidNamespace(), "-", ::getpid(), "-", tag, "-", RandomHex());
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Errno(absl::StrCat("creating shared memory ", name));
  // posix_fallocate reserves the pages: a /dev/shm too small for the
  // segment (64 MiB in a default Docker container) fails here, not with a
  // SIGBUS in the middle of a collective.
  if (int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); err != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    return absl::ResourceExhaustedError(
        absl::StrCat("reserving ", bytes, " bytes of shared memory in /dev/shm for ", name, ": ",
                     std::strerror(err), " (TESSERA_SHM_COLLECTIVES=0 uses Gloo instead)"));
  }
  auto data = Map(fd, bytes, name);
  if (!data.ok()) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    return data.status();
  }
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, fd, *data, bytes));
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Open(const std::string& name,
                                                             size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return Errno(absl::StrCat("opening shared memory ", name));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory ", name, " has ", st.st_size, " bytes, expected ", bytes));
  }
  auto data = Map(fd, bytes, name);
  if (!data.ok()) {
    ::close(fd);
    return data.status();
  }
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, fd, *data, bytes));
}

ShmSegment::~ShmSegment() {
  ::munmap(data_, bytes_);
  ::close(fd_);
}

void ShmSegment::Unlink() {
  if (::shm_unlink(name_.c_str()) != 0 && errno != ENOENT) {
    TESSERA_LOG(WARNING) << "removing shared memory " << name_ << ": " << std::strerror(errno);
  }
}

absl::Status ShmSegment::HoldLiveness(int slot) {
  struct flock lock = LivenessLock(slot, F_WRLCK);
  if (::fcntl(fd_, F_OFD_SETLK, &lock) != 0) {
    return Errno(absl::StrCat("locking local rank ", slot, "'s liveness byte of ", name_));
  }
  return absl::OkStatus();
}

bool ShmSegment::IsAlive(int slot) const {
  struct flock lock = LivenessLock(slot, F_WRLCK);
  // Unknown is alive: the caller's deadline still bounds the wait.
  if (::fcntl(fd_, F_OFD_GETLK, &lock) != 0) return true;
  return lock.l_type != F_UNLCK;
}

int RemoveAbandonedSegments() {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return 0;
  const std::string own_prefix = absl::StrCat(kPrefix, PidNamespace(), "-");
  int removed = 0;
  while (struct dirent* entry = ::readdir(dir)) {
    const std::string file = entry->d_name;
    if (file.rfind(own_prefix, 0) != 0) continue;
    const std::vector<std::string> rest =
        absl::StrSplit(file.substr(own_prefix.size()), absl::MaxSplits('-', 1));
    int pid = 0;
    if (rest.size() != 2 || !absl::SimpleAtoi(rest[0], &pid) || pid <= 0) continue;
    struct stat st {};
    if (::fstatat(::dirfd(dir), entry->d_name, &st, 0) != 0 || st.st_uid != ::geteuid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
    if (::shm_unlink(("/" + file).c_str()) == 0) {
      ++removed;
      TESSERA_LOG(INFO) << "removed abandoned shared memory /" << file << " (creator pid " << pid
                        << " is gone)";
    }
  }
  ::closedir(dir);
  return removed;
}

}  // namespace tessera::collectives
