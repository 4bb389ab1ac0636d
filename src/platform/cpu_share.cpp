#include "garden/platform/cpu_share.h"

#include <ATen/Parallel.h>

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>

#include "garden/base/logging.h"
#include "garden/platform/blas.h"
#include "garden/platform/threads.h"

namespace garden {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string trimmed(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  return text;
}

int whole_cores(double quota, double period) {
  if (quota <= 0 || period <= 0) return 0;
  return std::max(1, static_cast<int>(std::floor(quota / period + 1e-9)));
}

std::vector<int> affinity_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

}  // namespace

int cgroup_cpu_limit(const std::string& cpu_max, const std::string& quota,
                     const std::string& period) {
  if (!cpu_max.empty()) {
    std::istringstream in(cpu_max);
    std::string limit;
    double length = 0;
    if (!(in >> limit >> length) || limit == "max") return 0;
    return whole_cores(std::atof(limit.c_str()), length);
  }
  if (!quota.empty() && !period.empty())
    return whole_cores(std::atof(quota.c_str()), std::atof(period.c_str()));
  return 0;
}

int process_cgroup_cpu_limit() {
  // The process's own cgroup: "0::/PATH" (v2) or "N:cpu,cpuacct:/PATH" (v1).
  std::istringstream lines(read_text("/proc/self/cgroup"));
  std::string line;
  while (std::getline(lines, line)) {
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (controllers.empty()) {
      // v2: the limit may be set at any level above; the lowest counts.
      int limit = 0;
      for (std::string dir = path;; dir = dir.substr(0, dir.rfind('/'))) {
        const int here =
            cgroup_cpu_limit(trimmed(read_text("/sys/fs/cgroup" + dir + "/cpu.max")), "", "");
        if (here > 0) limit = limit > 0 ? std::min(limit, here) : here;
        if (dir.empty() || dir == "/") break;
      }
      if (limit > 0) return limit;
    } else if (("," + controllers + ",").find(",cpu,") != std::string::npos) {
      for (const std::string root : {"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"}) {
        const int limit =
            cgroup_cpu_limit("", trimmed(read_text(root + path + "/cpu.cfs_quota_us")),
                             trimmed(read_text(root + path + "/cpu.cfs_period_us")));
        if (limit > 0) return limit;
      }
    }
  }
  return 0;
}

int available_cores() {
  const int cores = usable_cores();
  const int limit = process_cgroup_cpu_limit();
  return limit > 0 ? std::min(cores, limit) : cores;
}

uint64_t busy_ticks(const std::string& proc_stat, const std::vector<int>& cpus) {
  uint64_t total = 0;
  std::istringstream lines(proc_stat);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 ||
        !std::isdigit(static_cast<unsigned char>(line[3])))
      continue;
    std::istringstream fields(line.substr(3));
    int cpu = -1;
    fields >> cpu;
    if (std::find(cpus.begin(), cpus.end(), cpu) == cpus.end()) continue;
    // user nice system idle iowait irq softirq steal
    uint64_t value[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (auto& v : value) fields >> v;
    total += value[0] + value[1] + value[2] + value[5] + value[6] + value[7];
  }
  return total;
}

uint64_t own_ticks(const std::string& proc_self_stat) {
  // "pid (comm) state ...": comm may hold spaces and parentheses; fields
  // after the last ')' are 3 (state) on, utime and stime are 14 and 15.
  const auto close = proc_self_stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(proc_self_stat.substr(close + 1));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int number = 3; number <= 15 && fields >> field; ++number) {
    if (number == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (number == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
  }
  return utime + stime;
}

int threads_for_share(int available, double others_busy) {
  const double free = static_cast<double>(available) - std::max(0.0, others_busy);
  return std::clamp(static_cast<int>(std::lround(free)), 1, std::max(1, available));
}

CpuShare::CpuShare(int available, int threads, double ticks_per_second, Sampler sample,
                   SetThreads set_threads, std::chrono::milliseconds interval)
    : available_(available),
      threads_(threads),
      ticks_per_second_(ticks_per_second),
      sample_(std::move(sample)),
      set_threads_(std::move(set_threads)),
      interval_(interval),
      last_(sample_()) {}

bool CpuShare::update() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_.at < interval_) return false;
  const Sample current = sample_();
  const double seconds = std::chrono::duration<double>(current.at - last_.at).count();
  if (seconds <= 0) return false;
  const double busy = static_cast<double>(current.busy - std::min(current.busy, last_.busy));
  const double own = static_cast<double>(current.own - std::min(current.own, last_.own));
  last_ = current;
  others_busy_ = std::max(0.0, (busy - own) / ticks_per_second_ / seconds);
  const int wanted = threads_for_share(available_, others_busy_);
  if (wanted == threads_) {
    pending_ = 0;
    return false;
  }
  if (pending_ != wanted) {
    pending_ = wanted;
    return false;
  }
  pending_ = 0;
  threads_ = wanted;
  set_threads_(wanted);
  return true;
}

namespace {

std::mutex share_mutex;
std::unique_ptr<CpuShare> process_share;
std::string share_setting = "off (not enabled by a computing command)";

CpuShare::Sample sample_now(const std::vector<int>& cpus) {
  CpuShare::Sample sample;
  sample.busy = busy_ticks(read_text("/proc/stat"), cpus);
  sample.own = own_ticks(read_text("/proc/self/stat"));
  sample.at = std::chrono::steady_clock::now();
  return sample;
}

}  // namespace

void enable_cpu_share(int threads) {
  std::lock_guard<std::mutex> lock(share_mutex);
  if (process_share) return;
  const int affinity = usable_cores();
  const int cgroup = process_cgroup_cpu_limit();
  const int available = cgroup > 0 ? std::min(affinity, cgroup) : affinity;
  const std::string cores = std::to_string(available) + " cores: affinity " +
                            std::to_string(affinity) + ", cgroup " +
                            (cgroup > 0 ? std::to_string(cgroup) : std::string("none"));
  const char* variable = std::getenv("GARDEN_CPU_SHARE");
  if (variable != nullptr && std::string(variable) == "0") {
    share_setting = "off (GARDEN_CPU_SHARE=0; " + cores + ")";
    return;
  }
  if (available < 2) {
    share_setting = "off (" + cores + ")";
    return;
  }
  const std::vector<int> cpus = affinity_cpus();
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  process_share = std::make_unique<CpuShare>(
      available, std::min(threads, available), ticks > 0 ? ticks : 100.0,
      [cpus] { return sample_now(cpus); },
      [](int n) {
        at::set_num_threads(n);
        set_blas_threads(n);
      });
  share_setting = "on (" + cores + ")";
}

void share_cpus() {
  int threads = 0;
  {
    std::lock_guard<std::mutex> lock(share_mutex);
    if (!process_share) return;
    const int before = process_share->threads();
    if (process_share->update()) {
      std::ostringstream line;
      line.setf(std::ios::fixed);
      line.precision(1);
      line << "cpu share: other processes keep " << process_share->others_busy() << " of "
           << "this process's cores busy: computing on " << process_share->threads()
           << (process_share->threads() == 1 ? " thread" : " threads") << " (was " << before
           << ")";
      log_info() << line.str();
    }
    threads = process_share->threads();
  }
  // OpenMP's thread count belongs to each thread: a server computes on the
  // threads of its pool, each of which follows the latest count here.
  if (at::get_num_threads() != threads) at::set_num_threads(threads);
}

void set_process_cpu_share_for_testing(std::unique_ptr<CpuShare> share) {
  std::lock_guard<std::mutex> lock(share_mutex);
  process_share = std::move(share);
}

std::string cpu_share_setting() {
  std::lock_guard<std::mutex> lock(share_mutex);
  return share_setting;
}

}  // namespace garden
