// Saves and loads a checkpoint of one large tensor (checkpoint/checkpoint.h)
// and, beside it, the floor on the same disk: the same bytes written from
// memory with one write() loop and an fsync, and read back with read().
// Prints one JSON line of seconds (median of the rounds) and GB/s.
//
//   checkpoint_bench DIR [MiB=1024] [rounds=3]
#include <ATen/ops/equal.h>
#include <ATen/ops/rand.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "bench/median.h"
#include "bench/usage.h"
#include "checkpoint/checkpoint.h"

namespace {

constexpr char kUsage[] =
    "usage: checkpoint_bench DIR [MiB=1024] [rounds=3]\n"
    "Saves and loads a checkpoint of one float tensor of MiB mebibytes in DIR,\n"
    "and writes (with fsync) and reads the same bytes raw: the floor. One JSON line.\n";

void Check(bool ok, const char* what) {
  if (!ok) {
    std::perror(what);
    std::exit(1);
  }
}

// The floor: `bytes` from memory to a file and fsync, then back.
std::pair<double, double> RawRound(const std::string& path, const char* data, size_t bytes,
                                   char* back) {
  const absl::Time start = absl::Now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  Check(fd >= 0, "open");
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = ::write(fd, data + done, bytes - done);
    Check(n > 0, "write");
    done += static_cast<size_t>(n);
  }
  Check(::fsync(fd) == 0, "fsync");
  ::close(fd);
  const double written = absl::ToDoubleSeconds(absl::Now() - start);
  const absl::Time reading = absl::Now();
  const int in = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  Check(in >= 0, "open");
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = ::read(in, back + done, bytes - done);
    Check(n > 0, "read");
    done += static_cast<size_t>(n);
  }
  ::close(in);
  ::unlink(path.c_str());
  return {written, absl::ToDoubleSeconds(absl::Now() - reading)};
}

}  // namespace

int main(int argc, char** argv) {
  tessera::bench::ExitOnHelp(argc, argv, kUsage);
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string dir = argv[1];
  const int64_t mib = argc > 2 ? std::atoll(argv[2]) : 1024;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 3;
  namespace checkpoint = tessera::checkpoint;
  checkpoint::Checkpoint saved;
  saved.tensors["rows"] = at::rand({mib << 18});  // 4-byte floats
  saved.position = {1, 2, 3, at::rand({4})};
  const size_t bytes = saved.tensors["rows"].nbytes();
  std::vector<char> back(bytes);
  std::vector<double> save, load, raw_write, raw_read;
  for (int round = 0; round < rounds; ++round) {
    absl::Time start = absl::Now();
    checkpoint::SaveCheckpoint(dir, "bench", saved);
    save.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    start = absl::Now();
    std::optional<checkpoint::Checkpoint> loaded = checkpoint::LoadCheckpoint(dir, "bench");
    load.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    if (!loaded.has_value() || !at::equal(loaded->tensors.at("rows"), saved.tensors["rows"])) {
      std::fputs("checkpoint_bench: the loaded checkpoint differs from the saved one\n", stderr);
      return 1;
    }
    const auto [w, r] =
        RawRound(dir + "/bench.raw", static_cast<const char*>(saved.tensors["rows"].data_ptr()),
                 bytes, back.data());
    raw_write.push_back(w);
    raw_read.push_back(r);
  }
  std::remove((dir + "/bench.ckpt").c_str());
  using tessera::bench::Median;
  const double gb = static_cast<double>(bytes) / 1e9;
  std::printf(
      "{\"mib\": %lld, \"rounds\": %d, \"save_s\": %.3f, \"load_s\": %.3f, \"raw_write_s\": %.3f, "
      "\"raw_read_s\": %.3f, \"save_gbps\": %.2f, \"raw_write_gbps\": %.2f}\n",
      static_cast<long long>(mib), rounds, Median(save), Median(load), Median(raw_write),
      Median(raw_read), gb / Median(save), gb / Median(raw_write));
  return 0;
}
