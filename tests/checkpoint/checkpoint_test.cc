// See Note [Atomic checkpoints]: a round trip keeps tensors and the training
// position; a file that is not a whole checkpoint is refused; and a writer
// killed (SIGKILL) at any moment of a save leaves the previous checkpoint or
// the new one, whole.
#include "checkpoint/checkpoint.h"

#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

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
