// Collectives through shared memory (collectives/shm/) between real processes on
// this host: the conformance suite, and what a SIGKILLed rank, mismatched
// calls and a killed job leave behind. Across network hosts (the
// hierarchy): tests/multihost/multihost_test.cc.
#include <ATen/ops/full.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectives/gloo/gloo_process_group.h"
#include "collectives/shm/shm_segment.h"
#include "tests/collectives/process_group_conformance.h"

namespace tessera::testing {
namespace {

absl::StatusOr<collectives::EnvProcessGroup> ChildGroup() {
  collectives::GlooOptions options;
  options.timeout = absl::Seconds(60);
  return collectives::CreateGlooProcessGroupFromEnv(options);
}

TESSERA_WORKER_SCENARIO(shm_conformance) { return RunChildRank(ChildGroup(), RunConformance); }

// Joins, then waits (for a key nobody sets) until the test kills it.
TESSERA_WORKER_SCENARIO(shm_joins_then_waits) {
  auto env = ChildGroup();
  if (!env.ok()) return 1;
  (void)env->store->Get("shm_test/never", absl::Seconds(300));
  return 2;
}

// Issues an allreduce of another length than rank 0's.
TESSERA_WORKER_SCENARIO(shm_mismatch) {
  return RunChildRank(ChildGroup(), [](collectives::ProcessGroup& pg) -> absl::Status {
    auto result = pg.Allreduce(at::full({12}, 1.0f)).Wait(absl::Seconds(60));
    if (result.ok() || !absl::IsInvalidArgument(result.status())) {
      return absl::InternalError(absl::StrCat("expected a mismatch error, got ",
                                              result.status().ToString()));
    }
    return absl::OkStatus();
  });
}

// Makes a segment and is killed before anyone attaches (its name stays).
TESSERA_WORKER_SCENARIO(shm_abandons_a_segment) {
  auto segment = collectives::ShmSegment::Create("abandoned", 4096);
  if (!segment.ok()) return 1;
  std::printf("segment %s\n", (*segment)->name().c_str());
  std::fflush(stdout);
  std::ofstream(std::string(std::getenv("TEST_TMPDIR")) + "/abandoned") << (*segment)->name();
  ::raise(SIGKILL);
  return 2;
}

// This process's mappings of Tessera's segments (their names are gone:
// "(deleted)").
int MappedSegments() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int count = 0;
  while (std::getline(maps, line)) count += absl::StrContains(line, "/tessera-shm-") ? 1 : 0;
  return count;
}

// Names under /dev/shm that contain `part`.
std::vector<std::string> ShmNames(const std::string& part) {
  std::vector<std::string> names;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return names;
  while (struct dirent* entry = ::readdir(dir)) {
    if (absl::StrContains(entry->d_name, part)) names.push_back(entry->d_name);
  }
  ::closedir(dir);
  return names;
}

std::string OwnSegmentPart() { return absl::StrCat("-", ::getpid(), "-"); }

class ShmProcessGroupTest : public ::testing::TestWithParam<int> {
 protected:
  std::unique_ptr<collectives::ProcessGroup> Group(int world_size, absl::Duration timeout) {
    collectives::GlooOptions options;
    options.timeout = timeout;
    return collectives::CreateGlooProcessGroup(world_.store(), 0, world_size, options);
  }
  ProcessGroupWorld world_;
};

TEST_P(ShmProcessGroupTest, EveryOpDtypeAndSize) {
  const int world_size = GetParam();
  world_.StartChildren(world_size, "shm_conformance");
  auto pg = Group(world_size, absl::Seconds(60));
  // Through shared memory, whose name went once every rank had attached.
  EXPECT_EQ(MappedSegments(), 1);
  EXPECT_TRUE(ShmNames(OwnSegmentPart()).empty());
  auto status = RunConformance(*pg);
  EXPECT_TRUE(status.ok()) << status;
  for (auto& child : world_.children()) EXPECT_EQ(child->Wait(absl::Seconds(120)), 0);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmProcessGroupTest, ::testing::Values(2, 3, 4));

TEST_F(ShmProcessGroupTest, TurnedOffByTheEnvironmentTheGroupIsGlooAlone) {
  ::setenv("TESSERA_SHM_COLLECTIVES", "0", 1);
  world_.StartChildren(2, "shm_conformance", {{"TESSERA_SHM_COLLECTIVES", "0"}});
  auto pg = Group(2, absl::Seconds(60));
  ::unsetenv("TESSERA_SHM_COLLECTIVES");
  EXPECT_EQ(MappedSegments(), 0);
  auto status = RunConformance(*pg);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(world_.children()[0]->Wait(absl::Seconds(120)), 0);
}

TEST_F(ShmProcessGroupTest, AKilledRankIsNamedLongBeforeTheTimeout) {
  world_.StartChildren(2, "shm_joins_then_waits");
  const absl::Duration timeout = absl::Seconds(60);
  auto pg = Group(2, timeout);
  collectives::Work work = pg->Allreduce(at::full({1000}, 1.0f));
  world_.children()[0]->Kill();
  auto result = work.Wait(absl::Seconds(120));
  ASSERT_FALSE(result.ok());
  // UNAVAILABLE from the lost liveness lock, not DEADLINE_EXCEEDED at the
  // timeout (which is what a wait for a silent rank gives).
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  EXPECT_TRUE(absl::StrContains(result.status().message(),
                                "rank 1 (local rank 1, pid "))
      << result.status();
  EXPECT_TRUE(absl::StrContains(result.status().message(), "exited or was killed"))
      << result.status();
  // The group is broken: the next collective fails at once with the cause.
  auto next = pg->Barrier().Wait(absl::Seconds(5));
  EXPECT_EQ(next.status().code(), absl::StatusCode::kUnavailable) << next.status();
  // Nothing of the killed job's segment is left under /dev/shm.
  EXPECT_TRUE(ShmNames(OwnSegmentPart()).empty());
}

TEST_F(ShmProcessGroupTest, MismatchedCallsAreAnErrorNamingBothRanks) {
  world_.StartChildren(2, "shm_mismatch");
  auto pg = Group(2, absl::Seconds(60));
  auto result = pg->Allreduce(at::full({10}, 1.0f)).Wait(absl::Seconds(60));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  for (const char* part : {"mismatched collectives", "allreduce of 10 Float", "allreduce of 12 Float",
                           "rank 0 (local rank 0", "rank 1 (local rank 1"}) {
    EXPECT_TRUE(absl::StrContains(result.status().message(), part)) << part << ": "
                                                                    << result.status();
  }
  EXPECT_EQ(world_.children()[0]->Wait(absl::Seconds(60)), 0);
}

// A creator killed before anyone attached leaves its name; the next segment
// made in this pid namespace by this user removes it.
TEST_F(ShmProcessGroupTest, ANameAbandonedByAKilledCreatorIsRemovedByTheNextGroup) {
  WorkerProcess child("shm_abandons_a_segment", {});
  ASSERT_EQ(child.Wait(absl::Seconds(60)), 128 + SIGKILL);
  std::string name;
  std::ifstream(std::string(std::getenv("TEST_TMPDIR")) + "/abandoned") >> name;
  ASSERT_FALSE(name.empty());
  const std::string file = name.substr(1);
  ASSERT_EQ(ShmNames(file).size(), 1u);
  auto segment = collectives::ShmSegment::Create("next", 4096);
  ASSERT_TRUE(segment.ok()) << segment.status();
  (*segment)->Unlink();
  EXPECT_TRUE(ShmNames(file).empty());
}

// Mode 0600: another user's process cannot open a segment (as root, a
// child that became "nobody" tries).
TEST_F(ShmProcessGroupTest, ASegmentIsPrivateToItsUser) {
  auto segment = collectives::ShmSegment::Create("private", 4096);
  ASSERT_TRUE(segment.ok()) << segment.status();
  struct stat st {};
  ASSERT_EQ(::stat(("/dev/shm" + (*segment)->name()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  EXPECT_EQ(st.st_uid, ::geteuid());
  if (::geteuid() == 0) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
      const int fd = ::shm_open((*segment)->name().c_str(), O_RDONLY, 0);
      ::_exit(fd < 0 && errno == EACCES ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  (*segment)->Unlink();
}

}  // namespace
}  // namespace tessera::testing
