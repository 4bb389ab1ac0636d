// Sharing the cores with other work. A process that computes on every core
// it may use is right when it has them to itself; beside another run, a
// server or an evaluator, threads that outnumber the free cores wait on each
// other at every parallel region (libgomp's threads spin there first), and
// both sides slow down many times. CpuShare measures how busy the other
// processes keep this process's cores and computes on the cores they leave
// free: fewer threads while others work, every core again when they stop.
//
// It is on where Garden chose the thread count itself
// (runtime.intra_op_parallelism_threads 0, OMP_NUM_THREADS unset) on more
// than one core, unless GARDEN_CPU_SHARE=0. docs/runtime.md says when each
// setting applies.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace garden {

// The CPU limit of a cgroup, in whole cores (rounded down, at least 1), or
// 0 when it sets none. `cpu_max` is cgroup v2's cpu.max ("max 100000" or
// "QUOTA PERIOD"); `quota` and `period` are cgroup v1's cpu.cfs_quota_us and
// cpu.cfs_period_us (quota -1: none). Empty texts: not that version.
int cgroup_cpu_limit(const std::string& cpu_max, const std::string& quota,
                     const std::string& period);

// This process's cgroup's CPU limit as cgroup_cpu_limit reads it (0: none,
// or not readable).
int process_cgroup_cpu_limit();

// The cores this process may compute on: its affinity (usable_cores()),
// lowered to its cgroup's CPU limit when there is one.
int available_cores();

// Busy time (user, nice, system, irq, softirq, steal; not idle or iowait),
// in clock ticks, summed over the CPUs listed in `cpus`, from the text of
// /proc/stat. A CPU missing from the text counts 0.
uint64_t busy_ticks(const std::string& proc_stat, const std::vector<int>& cpus);

// This process's own CPU time (user + system), in clock ticks, from the
// text of /proc/self/stat.
uint64_t own_ticks(const std::string& proc_self_stat);

// The threads to compute on, out of `available` cores, when other processes
// keep `others_busy` of them busy (in cores): the cores left, rounded to the
// nearest, at least 1 and at most `available`.
int threads_for_share(int available, double others_busy);

class CpuShare {
 public:
  struct Sample {
    uint64_t busy = 0;  // busy_ticks of this process's CPUs
    uint64_t own = 0;   // own_ticks
    std::chrono::steady_clock::time_point at;
  };
  using Sampler = std::function<Sample()>;
  using SetThreads = std::function<void(int)>;

  // `available` cores; `ticks_per_second` of the samples (sysconf's
  // _SC_CLK_TCK); `interval` between measurements. A change of the thread
  // count is made when two measurements in a row ask for the same new count
  // (a brief burst of another process's work changes nothing).
  CpuShare(int available, int threads, double ticks_per_second, Sampler sample,
           SetThreads set_threads, std::chrono::milliseconds interval = std::chrono::seconds(2));

  // Cheap when the interval has not passed (one clock read). Otherwise
  // measures the other processes' busy cores since the last measurement and
  // changes the thread count when it should. Returns true when it changed.
  bool update();

  int threads() const { return threads_; }
  // The other processes' busy cores at the last measurement.
  double others_busy() const { return others_busy_; }

 private:
  int available_;
  int threads_;
  double ticks_per_second_;
  Sampler sample_;
  SetThreads set_threads_;
  std::chrono::milliseconds interval_;
  Sample last_;
  int pending_ = 0;  // a new count asked for once, 0 when none
  double others_busy_ = 0;
};

// The process's CpuShare, for the loops that compute (training steps,
// evaluation batches, serving requests): enable_cpu_share() once, after the
// thread count is set (apply_runtime does), then share_cpus() before each
// step or request, from the thread that computes: it measures when the
// interval has passed, logs each change in one line, and gives the calling
// thread the current count (OpenMP's count is each thread's own, so a
// server's pool threads each follow it).
void enable_cpu_share(int threads);
void share_cpus();
// Tests: makes `share` the process's CpuShare (nullptr: none).
void set_process_cpu_share_for_testing(std::unique_ptr<CpuShare> share);
// For the log and `garden env`: "on (2 cores: affinity 2, cgroup none)" or
// why it is off.
std::string cpu_share_setting();

}  // namespace garden
