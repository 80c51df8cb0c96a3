// The sanitizers' canary (scripts/sanitizers.sh). A child process of this
// test does what its sanitizer reports — a data race under TSan, a read of
// freed memory under ASan — and then dies by SIGKILL, as the servers a
// fault test kills do: its exit code tells the test nothing, and the test
// passes. sanitizers.sh must find the child's report among those that every
// process of its run wrote (log_path), or it fails. That proves two things a
// green run could otherwise hide: that the sanitizer was built in and ran,
// and that a report from a process nobody waits on — a worker killed at a
// test's end, a server whose death failover absorbed — is seen.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

constexpr char kChildFlag[] = "--sanitizer_canary_child";

[[maybe_unused]] int unguarded = 0;  // written by two threads with nothing between them

[[noreturn]] void MisbehaveAndDie() {
#if defined(__SANITIZE_THREAD__)
  std::thread first([] { unguarded = unguarded + 1; });
  std::thread second([] { unguarded = unguarded + 1; });
  first.join();
  second.join();
#elif defined(__SANITIZE_ADDRESS__)
  // Volatile reads and writes: the optimiser may drop neither (a plain
  // new[]/delete[] pair it did drop, and ASan saw nothing).
  volatile int* freed = static_cast<volatile int*>(std::malloc(4 * sizeof(int)));
  freed[2] = 3;
  std::free(const_cast<int*>(freed));
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuse-after-free"  // the misuse is the point
  unguarded = freed[2];  // ASan reports and ends the process here
#pragma GCC diagnostic pop
#endif
  raise(SIGKILL);
  _exit(1);  // unreachable: SIGKILL cannot be caught
}

TEST(SanitizerCanaryTest, AChildMisbehavesAndIsKilledUnnoticedByItsParent) {
#if !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
  GTEST_FAIL() << "built without TSan or ASan: run it through scripts/sanitizers.sh";
#endif
  // This process has one thread here, so fork() then exec is safe.
  const pid_t child = fork();
  ASSERT_GE(child, 0) << std::strerror(errno);
  if (child == 0) {
    execl("/proc/self/exe", "sanitizer_canary_test", kChildFlag, static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  // Whatever the child's end, a report exists only in its log file.
  EXPECT_TRUE(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 127))
      << "the child did not run";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], kChildFlag) == 0) MisbehaveAndDie();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
