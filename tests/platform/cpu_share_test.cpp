// What CpuShare chooses (garden/platform/cpu_share.h): the cores a process
// may use (affinity within a cgroup's CPU limit), the busy time of other
// processes read from /proc's texts, and the thread count it computes on
// for a given load, changed only when two measurements in a row agree.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "garden/platform/cpu_share.h"
#include "garden/platform/threads.h"

namespace {

using garden::CpuShare;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

TEST(CpuShareTest, ACgroupLimitIsWholeCoresRoundedDownAtLeastOne) {
  // cgroup v2's cpu.max.
  EXPECT_EQ(garden::cgroup_cpu_limit("max 100000", "", ""), 0);
  EXPECT_EQ(garden::cgroup_cpu_limit("200000 100000", "", ""), 2);
  EXPECT_EQ(garden::cgroup_cpu_limit("150000 100000", "", ""), 1);  // --cpus=1.5
  EXPECT_EQ(garden::cgroup_cpu_limit("50000 100000", "", ""), 1);   // half a core: one thread
  EXPECT_EQ(garden::cgroup_cpu_limit("400000 100000\n", "", ""), 4);
  EXPECT_EQ(garden::cgroup_cpu_limit("garbage", "", ""), 0);
  // cgroup v1's cfs quota and period.
  EXPECT_EQ(garden::cgroup_cpu_limit("", "-1", "100000"), 0);
  EXPECT_EQ(garden::cgroup_cpu_limit("", "300000", "100000"), 3);
  EXPECT_EQ(garden::cgroup_cpu_limit("", "", ""), 0);
}

TEST(CpuShareTest, TheAvailableCoresAreTheAffinityWithinTheCgroupLimit) {
  const int limit = garden::process_cgroup_cpu_limit();
  const int affinity = garden::usable_cores();
  EXPECT_EQ(garden::available_cores(), limit > 0 ? std::min(affinity, limit) : affinity);
  EXPECT_GE(garden::available_cores(), 1);
}

TEST(CpuShareTest, BusyTicksSumTheListedCpusWithoutIdleOrIowait) {
  // user nice system idle iowait irq softirq steal guest guest_nice
  const std::string stat =
      "cpu  1000 0 0 0 0 0 0 0 0 0\n"
      "cpu0 10 1 2 500 40 3 4 5 0 0\n"
      "cpu1 100 0 20 900 7 0 0 0 0 0\n"
      "cpu12 1000 0 0 0 0 0 0 0 0 0\n"
      "intr 12345\n";
  EXPECT_EQ(garden::busy_ticks(stat, {0}), 10u + 1 + 2 + 3 + 4 + 5);
  EXPECT_EQ(garden::busy_ticks(stat, {1}), 120u);
  EXPECT_EQ(garden::busy_ticks(stat, {0, 1}), 25u + 120);
  EXPECT_EQ(garden::busy_ticks(stat, {12}), 1000u);  // "cpu12", not "cpu1" + "2"
  EXPECT_EQ(garden::busy_ticks(stat, {3}), 0u);      // not in the text
}

TEST(CpuShareTest, OwnTicksAreUserPlusSystemTimeEvenWithSpacesInTheName) {
  // Fields 14 (utime) and 15 (stime); the name may hold spaces and ')'.
  const std::string stat =
      "4242 (garden (x) y) S 1 2 3 4 5 6 7 8 9 10 250 75 11 12 20 0 3 0 100 200 300";
  EXPECT_EQ(garden::own_ticks(stat), 325u);
  EXPECT_EQ(garden::own_ticks("no parenthesis"), 0u);
}

TEST(CpuShareTest, TheThreadsAreTheCoresOthersLeaveFreeRounded) {
  EXPECT_EQ(garden::threads_for_share(2, 0.0), 2);
  EXPECT_EQ(garden::threads_for_share(2, 0.4), 2);  // a light neighbour: keep both
  EXPECT_EQ(garden::threads_for_share(2, 0.6), 1);
  EXPECT_EQ(garden::threads_for_share(2, 1.0), 1);  // another run on one core
  EXPECT_EQ(garden::threads_for_share(2, 3.5), 1);  // never fewer than one
  EXPECT_EQ(garden::threads_for_share(16, 6.2), 10);
  EXPECT_EQ(garden::threads_for_share(16, -1.0), 16);  // never more than available
}

// A CpuShare on samples the test writes: `busy` and `own` ticks at 100 a
// second, one sample a second.
class CpuShareLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    share_ = std::make_unique<CpuShare>(
        2, 2, 100.0, [this] { return sample_; }, [this](int n) { set_.push_back(n); },
        milliseconds(0));
  }
  // One second in which others used `others` cores and this process `own`.
  bool second(double others, double own) {
    sample_.own += static_cast<uint64_t>(own * 100);
    sample_.busy += static_cast<uint64_t>((others + own) * 100);
    sample_.at += std::chrono::seconds(1);
    return share_->update();
  }
  CpuShare::Sample sample_{0, 0, steady_clock::now() - std::chrono::hours(1)};
  std::unique_ptr<CpuShare> share_;
  std::vector<int> set_;
};

TEST_F(CpuShareLoopTest, AnotherRunLowersTheThreadsAfterTwoMeasurementsAndItsEndRestoresThem) {
  EXPECT_FALSE(second(0.0, 2.0));
  EXPECT_EQ(share_->threads(), 2);
  // Another run starts: both get a core each.
  EXPECT_FALSE(second(1.0, 1.0));  // asked once: not yet
  EXPECT_DOUBLE_EQ(share_->others_busy(), 1.0);
  EXPECT_TRUE(second(1.0, 1.0));
  EXPECT_EQ(share_->threads(), 1);
  EXPECT_EQ(set_, std::vector<int>({1}));
  EXPECT_FALSE(second(1.0, 1.0));  // steady
  // It ends.
  EXPECT_FALSE(second(0.0, 1.0));
  EXPECT_TRUE(second(0.0, 1.0));
  EXPECT_EQ(share_->threads(), 2);
  EXPECT_EQ(set_, std::vector<int>({1, 2}));
}

TEST_F(CpuShareLoopTest, ABriefBurstChangesNothing) {
  second(0.0, 2.0);
  EXPECT_FALSE(second(1.5, 0.5));  // one busy second
  EXPECT_FALSE(second(0.1, 1.9));  // gone again: the pending change is dropped
  EXPECT_FALSE(second(1.5, 0.5));  // once more, on its own
  EXPECT_FALSE(second(0.0, 2.0));
  EXPECT_TRUE(set_.empty());
  EXPECT_EQ(share_->threads(), 2);
}

TEST_F(CpuShareLoopTest, TheIntervalIsWaitedFor) {
  sample_.at = steady_clock::now();
  share_ = std::make_unique<CpuShare>(
      2, 2, 100.0, [this] { return sample_; }, [this](int n) { set_.push_back(n); },
      std::chrono::hours(2));
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(second(2.0, 0.0));
  EXPECT_EQ(share_->threads(), 2);
  EXPECT_TRUE(set_.empty());
}

// A server computes on the threads of its pool, and OpenMP's thread count is
// each thread's own: every thread that calls share_cpus() computes on the
// latest count, one that computed before the change as well as a new one.
TEST(CpuShareProcessTest, EveryComputingThreadFollowsTheCount) {
  const int original = at::get_num_threads();
  auto sample = std::make_shared<CpuShare::Sample>();
  sample->at = steady_clock::now() - std::chrono::hours(1);
  garden::set_process_cpu_share_for_testing(std::make_unique<CpuShare>(
      2, 2, 100.0, [sample] { return *sample; }, [](int n) { at::set_num_threads(n); },
      milliseconds(0)));
  at::set_num_threads(2);
  std::promise<int> before_change, after_change;
  std::promise<void> changed;
  std::thread pool_thread([&] {
    garden::share_cpus();
    before_change.set_value(at::get_num_threads());
    changed.get_future().wait();
    garden::share_cpus();
    after_change.set_value(at::get_num_threads());
  });
  EXPECT_EQ(before_change.get_future().get(), 2);
  for (int second = 0; second < 2; ++second) {  // another process takes a core
    sample->busy += 200;
    sample->own += 100;
    sample->at += std::chrono::seconds(1);
    garden::share_cpus();
  }
  EXPECT_EQ(at::get_num_threads(), 1);
  changed.set_value();
  EXPECT_EQ(after_change.get_future().get(), 1);
  pool_thread.join();
  int in_new_thread = 0;
  std::thread([&] {
    garden::share_cpus();
    in_new_thread = at::get_num_threads();
  }).join();
  EXPECT_EQ(in_new_thread, 1);
  garden::set_process_cpu_share_for_testing(nullptr);
  at::set_num_threads(original);
}

}  // namespace
