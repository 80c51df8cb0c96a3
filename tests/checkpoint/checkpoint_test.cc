// See Note [Atomic checkpoints]: a round trip keeps tensors and the training
// position; a file that is not a whole checkpoint is refused; and a writer
// killed (SIGKILL) at any moment of a save leaves the previous checkpoint or
// the new one, whole.
#include "checkpoint/checkpoint.h"

#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "common/status.h"
#include "tests/testing/launcher_process.h"
#include "tests/testing/multiprocess.h"

namespace tessera::testing {
namespace {

using checkpoint::Checkpoint;
using checkpoint::LoadCheckpoint;
using checkpoint::SaveCheckpoint;

std::string TestDir(const std::string& leaf) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + leaf;
}

// Generation g: a big tensor filled with g, and the position (g, 10 g, 100 g).
Checkpoint Generation(int64_t g) {
  Checkpoint checkpoint;
  checkpoint.tensors["model.weight"] = at::full({4 << 20}, static_cast<double>(g));  // 16 MiB
  checkpoint.tensors["adam.exp_avg"] = at::full({3}, static_cast<double>(-g));
  checkpoint.position = {g, 10 * g, 100 * g, at::full({2}, static_cast<double>(g))};
  return checkpoint;
}

// Which generation a loaded checkpoint is, checking that it is whole.
int64_t GenerationOf(const Checkpoint& loaded) {
  const int64_t g = loaded.position.epoch;
  EXPECT_EQ(loaded.position.step, 10 * g);
  EXPECT_EQ(loaded.position.samples_seen, 100 * g);
  EXPECT_TRUE(at::equal(loaded.tensors.at("model.weight"),
                        at::full({4 << 20}, static_cast<double>(g))));
  EXPECT_TRUE(at::equal(loaded.tensors.at("adam.exp_avg"), at::full({3}, static_cast<double>(-g))));
  return g;
}

// Saves generations 1, 2, ... to the directory in CHECKPOINT_DIR, printing
// each before it starts writing it, until killed.
TESSERA_WORKER_SCENARIO(checkpoint_writer) {
  const std::string dir = std::getenv("CHECKPOINT_DIR");
  for (int64_t g = 1;; ++g) {
    const Checkpoint next = Generation(g);
    std::printf("writing %lld\n", static_cast<long long>(g));
    std::fflush(stdout);
    SaveCheckpoint(dir, "job", next);
  }
}

TEST(CheckpointTest, RoundTripKeepsTensorsAndPosition) {
  const std::string dir = TestDir("round_trip");
  EXPECT_FALSE(LoadCheckpoint(dir, "job").has_value());
  SaveCheckpoint(dir, "job", Generation(3));
  auto loaded = LoadCheckpoint(dir, "job");
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(GenerationOf(*loaded), 3);
  EXPECT_TRUE(at::equal(loaded->position.rng_state, at::full({2}, 3.0)));
  SaveCheckpoint(dir, "job", Generation(4));  // replaces it
  EXPECT_EQ(GenerationOf(*LoadCheckpoint(dir, "job")), 4);
}

TEST(CheckpointTest, AFileThatIsNotAWholeCheckpointIsRefused) {
  const std::string dir = TestDir("refused");
  SaveCheckpoint(dir, "job", Generation(1));
  const std::string path = dir + "/job.ckpt";
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (const std::string& bad : {bytes.substr(0, bytes.size() / 2), std::string("GIF89a"),
                                 bytes.substr(0, 16) + std::string(bytes.size() - 16, 'x')}) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
    const absl::Status status = StatusOf([&] { LoadCheckpoint(dir, "job"); });
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_NE(status.message().find(path), std::string::npos) << status;
  }
}

// See Note [Checkpoint format]: a file written by version 1 (one pickled
// dictionary) is still read, whole.
TEST(CheckpointTest, AVersion1FileIsStillRead) {
  const std::string dir = TestDir("version1");
  std::filesystem::create_directories(dir);
  const Checkpoint old = Generation(5);
  c10::Dict<std::string, at::Tensor> tensors;
  for (const auto& [name, tensor] : old.tensors) tensors.insert(name, tensor);
  c10::impl::GenericDict all(c10::StringType::get(), c10::AnyType::get());
  all.insert("tensors", tensors);
  all.insert("epoch", old.position.epoch);
  all.insert("step", old.position.step);
  all.insert("samples_seen", old.position.samples_seen);
  all.insert("rng_state", old.position.rng_state);
  const std::vector<char> payload = torch::jit::pickle_save(all);
  const uint64_t size = payload.size();
  {
    std::ofstream out(dir + "/job.ckpt", std::ios::binary);
    out.write("TSRCKPT1", 8);
    out.write(reinterpret_cast<const char*>(&size), sizeof(size));
    out.write(payload.data(), static_cast<std::streamsize>(size));
  }
  auto loaded = LoadCheckpoint(dir, "job");
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(GenerationOf(*loaded), 5);
  EXPECT_TRUE(at::equal(loaded->position.rng_state, old.position.rng_state));
}

// A header whose tensors do not add up to the file's bytes — one byte more
// or less, or a shape too large for any file — is refused, not half-read.
TEST(CheckpointTest, AHeaderThatDoesNotFitItsBytesIsRefused) {
  const std::string dir = TestDir("misfit");
  Checkpoint small;
  small.tensors["w"] = at::full({4}, 1.0);
  SaveCheckpoint(dir, "job", small);
  const std::string path = dir + "/job.ckpt";
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_EQ(bytes.substr(0, 8), "TSRCKPT2");
  for (const std::string& bad : {bytes + "x", bytes.substr(0, bytes.size() - 1)}) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
    const absl::Status status = StatusOf([&] { LoadCheckpoint(dir, "job"); });
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_NE(status.message().find(path), std::string::npos) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "bytes of tensors, its header says") ||
                absl::StrContains(status.message(), "tensor 'w' is larger than the file"))
        << status;
  }
  // A forged header: a shape of 2^80 floats over 16 bytes of file.
  c10::impl::GenericDict header(c10::StringType::get(), c10::AnyType::get());
  header.insert("names", c10::List<std::string>({"w"}));
  header.insert("types", c10::List<int64_t>({static_cast<int64_t>(at::kFloat)}));
  c10::impl::GenericList shapes(c10::ListType::ofInts());
  shapes.push_back(c10::List<int64_t>({int64_t{1} << 40, int64_t{1} << 40}));
  header.insert("shapes", shapes);
  for (const char* key : {"epoch", "step", "samples_seen"}) header.insert(key, int64_t{0});
  const std::vector<char> forged = torch::jit::pickle_save(header);
  const uint64_t size = forged.size();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write("TSRCKPT2", 8);
    out.write(reinterpret_cast<const char*>(&size), sizeof(size));
    out.write(forged.data(), static_cast<std::streamsize>(size));
    out.write("0123456789abcdef", 16);
  }
  const absl::Status status = StatusOf([&] { LoadCheckpoint(dir, "job"); });
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find("tensor 'w' is larger than the file"), std::string::npos)
      << status;
}

TEST(CheckpointTest, AWriterKilledMidSaveLeavesTheLastWholeCheckpoint) {
  const std::string dir = TestDir("killed");
  SaveCheckpoint(dir, "job", Generation(0));
  // Each round kills the writer while its temporary file exists (between
  // its creation and the rename): the checkpoint must be a whole one.
  int killed_mid_write = 0;
  for (int round = 0; round < 5; ++round) {
    setenv("CHECKPOINT_DIR", dir.c_str(), 1);
    ObservedProcess writer({SelfPath(), "--tessera_worker=checkpoint_writer"});
    ASSERT_TRUE(writer.WaitFor("writing 2", 1, absl::Seconds(60))) << writer.output();
    const std::string temporary = dir + "/job.ckpt.tmp." + std::to_string(writer.pid());
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (!std::filesystem::exists(temporary) && absl::Now() < give_up) writer.Drain();
    ::kill(writer.pid(), SIGKILL);
    EXPECT_EQ(writer.Finish(absl::Seconds(30)), 128 + SIGKILL) << writer.output();
    if (std::filesystem::exists(temporary)) {
      ++killed_mid_write;
      std::filesystem::remove(temporary);
    }
    auto loaded = LoadCheckpoint(dir, "job");
    ASSERT_TRUE(loaded.has_value());
    EXPECT_GE(GenerationOf(*loaded), 1);  // whole, and at least generation 1
  }
  // The kill landed mid-write at least once (the rename can win the race).
  EXPECT_GE(killed_mid_write, 1);
  std::printf("%d of 5 kills landed while a checkpoint was being written\n", killed_mid_write);
}

}  // namespace
}  // namespace tessera::testing
