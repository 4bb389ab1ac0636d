// How SIGTERM and SIGINT reach the process (garden/platform/stop_signals.h):
// taken by the signal thread only, as a graceful request while a
// GracefulStop lives, duplicates within a moment ignored, a later second
// SIGINT ending the process at once, and no GracefulStop meaning "end now".
// Signals are sent for real, to this process or to a child that does the
// same; each case runs in a process of its own (ctest).
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "garden/base/file_io.h"
#include "garden/base/staged_directory.h"
#include "garden/platform/stop_signals.h"

namespace {

using namespace std::chrono_literals;

bool blocked_here(int signal) {
  sigset_t current;
  pthread_sigmask(SIG_BLOCK, nullptr, &current);
  return sigismember(&current, signal) == 1;
}

// Runs `body` in a forked child with stderr captured; the child's exit
// status and its stderr.
struct ChildResult {
  int status = -1;
  std::string err;
};
template <typename Body>
ChildResult in_child(Body body) {
  int pipe_fds[2];
  EXPECT_EQ(::pipe(pipe_fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipe_fds[1], STDERR_FILENO);
    ::close(pipe_fds[0]);
    body();
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  ChildResult result;
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;)
    result.err.append(buffer, static_cast<std::size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.status = status;
  return result;
}

TEST(StopSignalsTest, EveryThreadStartedAfterInstallBlocksThem) {
  garden::install_stop_signals();  // test_main did; a second call is harmless
  EXPECT_TRUE(blocked_here(SIGTERM));
  EXPECT_TRUE(blocked_here(SIGINT));
  bool worker_blocks = false;
  std::thread([&] { worker_blocks = blocked_here(SIGTERM) && blocked_here(SIGINT); }).join();
  EXPECT_TRUE(worker_blocks);
}

TEST(StopSignalsTest, AGracefulStopTurnsASignalIntoARequest) {
  std::atomic<int> seen{0};
  garden::GracefulStop graceful([&](int signal) { seen = signal; });
  EXPECT_EQ(garden::StopSignals::pending(), 0);
  ::kill(::getpid(), SIGTERM);
  EXPECT_TRUE(garden::StopSignals::wait_for(5s));
  EXPECT_EQ(garden::StopSignals::pending(), SIGTERM);
  EXPECT_EQ(seen.load(), SIGTERM);
  // A duplicate (a launcher's copy) changes nothing, SIGINT included.
  ::kill(::getpid(), SIGINT);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(garden::StopSignals::pending(), SIGTERM);
  garden::StopSignals::clear();
  EXPECT_EQ(garden::StopSignals::pending(), 0);
  EXPECT_FALSE(garden::StopSignals::wait_for(10ms));
}

TEST(StopSignalsTest, ASignalToAThreadOfALibraryIsForwarded) {
  // A thread that does not block the signals (as OpenBLAS's, started when
  // the library loads) gets the forwarding handler, which hands the signal
  // to the signal thread.
  garden::GracefulStop graceful;
  std::atomic<bool> ready{false}, done{false};
  std::thread library_thread([&] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    ready = true;
    while (!done) std::this_thread::sleep_for(1ms);
  });
  while (!ready) std::this_thread::yield();
  ::pthread_kill(library_thread.native_handle(), SIGTERM);
  EXPECT_TRUE(garden::StopSignals::wait_for(5s));
  EXPECT_EQ(garden::StopSignals::pending(), SIGTERM);
  done = true;
  library_thread.join();
}

TEST(StopSignalsTest, WithoutAGracefulStopTheProcessEndsAtOnce) {
  const ChildResult child = in_child([] {
    garden::install_stop_signals();  // a forked child starts over
    ::kill(::getpid(), SIGTERM);
    std::this_thread::sleep_for(10s);  // never reached: the signal thread ends it
  });
  ASSERT_TRUE(WIFEXITED(child.status)) << child.err;
  EXPECT_EQ(WEXITSTATUS(child.status), 128 + SIGTERM);
  EXPECT_EQ(child.err, "garden: stopped by SIGTERM\n");
}

// A command stopped at once (no GracefulStop: export, create_image_records,
// spm train) leaves neither its staging directory nor an atomic file's
// temporary behind; what it finished stays.
TEST(StopSignalsTest, AStopAtOnceRemovesWhatWasNotFinished) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("unfinished_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const ChildResult child = in_child([&dir] {
    garden::install_stop_signals();
    garden::write_file_atomically((dir / "done.txt").string(), "kept\n");
    const std::filesystem::path staging = dir / ".out.tmp-1";
    std::filesystem::create_directories(staging / "shards");
    garden::write_file_atomically((staging / "shards" / "a").string(), "half");
    const garden::UnfinishedPath unfinished(staging);
    garden::AtomicFile file((dir / "model.bin").string());
    file.write("partial");
    ::kill(::getpid(), SIGINT);
    std::this_thread::sleep_for(10s);  // never reached
  });
  ASSERT_TRUE(WIFEXITED(child.status)) << child.err;
  EXPECT_EQ(WEXITSTATUS(child.status), 128 + SIGINT);
  EXPECT_EQ(child.err, "garden: stopped by SIGINT\n");
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    left.push_back(entry.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"done.txt"});
  std::filesystem::remove_all(dir);
}

TEST(StopSignalsTest, ASecondSigintLaterThanAMomentEndsAtOnce) {
  const ChildResult child = in_child([] {
    garden::GracefulStop graceful;
    ::kill(::getpid(), SIGINT);
    ::kill(::getpid(), SIGINT);  // the terminal's and a launcher's copy: one request
    if (!garden::StopSignals::wait_for(5s)) ::_exit(3);
    std::this_thread::sleep_for(garden::kDuplicateWindow / 2);
    if (garden::StopSignals::pending() != SIGINT) ::_exit(4);
    ::kill(::getpid(), SIGTERM);  // a SIGTERM while stopping: already stopping
    std::this_thread::sleep_for(garden::kDuplicateWindow + 200ms);
    ::kill(::getpid(), SIGINT);  // a person pressing Ctrl-C again
    std::this_thread::sleep_for(10s);
    ::_exit(5);
  });
  ASSERT_TRUE(WIFEXITED(child.status)) << child.err;
  EXPECT_EQ(WEXITSTATUS(child.status), 128 + SIGINT) << child.err;
  EXPECT_EQ(child.err, "garden: second SIGINT: stopping at once, without saving a checkpoint\n");
}

TEST(StopSignalsTest, RunUntilStoppedRunsHereWithoutAGracefulStop) {
  const auto caller = std::this_thread::get_id();
  std::thread::id ran_on;
  garden::run_until_stopped([&] { ran_on = std::this_thread::get_id(); }, "working", "");
  EXPECT_EQ(ran_on, caller);
  EXPECT_THROW(garden::run_until_stopped([] { throw garden::Error("broken"); }, "working", ""),
               garden::Error);
}

TEST(StopSignalsTest, RunUntilStoppedGivesBackResultsAndErrors) {
  garden::GracefulStop graceful;
  int value = 0;
  garden::run_until_stopped([&value] { value = 42; }, "working", "");
  EXPECT_EQ(value, 42);
  try {
    garden::run_until_stopped([] { throw garden::Error("broken"); }, "working", "");
    FAIL() << "expected the work's error";
  } catch (const garden::Error& e) {
    EXPECT_STREQ(e.what(), "broken");
  }
  EXPECT_FALSE(garden::StopSignals::work_abandoned());
}

TEST(StopSignalsTest, RunUntilStoppedLeavesLongWorkBehindForAStop) {
  const ChildResult child = in_child([] {
    garden::GracefulStop graceful;
    std::thread([] {
      std::this_thread::sleep_for(200ms);
      ::kill(::getpid(), SIGTERM);
    }).detach();
    const auto start = std::chrono::steady_clock::now();
    try {
      garden::run_until_stopped([] { std::this_thread::sleep_for(60s); }, "training a tokenizer",
                                "nothing to save");
      ::_exit(3);
    } catch (const garden::Preempted& e) {
      std::fprintf(stderr, "%s|%d|%d\n", e.what(), e.signal(),
                   garden::StopSignals::work_abandoned() ? 1 : 0);
      // Seconds, not the work's minute.
      ::_exit(std::chrono::steady_clock::now() - start < 10s ? 0 : 4);
    }
  });
  ASSERT_TRUE(WIFEXITED(child.status)) << child.err;
  EXPECT_EQ(WEXITSTATUS(child.status), 0) << child.err;
  EXPECT_EQ(child.err, "received SIGTERM while training a tokenizer; nothing to save|" +
                           std::to_string(SIGTERM) + "|1\n");
}

}  // namespace
