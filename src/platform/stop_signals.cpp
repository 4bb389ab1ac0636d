#include "garden/platform/stop_signals.h"

#include "garden/base/staged_directory.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace garden {

namespace {

using Clock = std::chrono::steady_clock;

// Never destroyed: the signal thread and an abandoned worker may still touch
// it while the process runs its static destructors.
struct State {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::pair<int, std::function<void(int)>>> graceful;  // id, on_stop
  int next_id = 0;
  bool have_last = false;
  Clock::time_point last;
};

State* the_state = new State;
State& state() { return *the_state; }

std::atomic<int> pending_signal{0};
std::atomic<pid_t> signal_thread_id{0};
std::atomic<bool> abandoned{false};
std::mutex* install_mutex = new std::mutex;
bool installed = false;  // under install_mutex

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

// One line on stderr (write(2): no stream lock another thread may hold),
// then the exit a shell reports for a process ended by `signal`.
[[noreturn]] void end_now(int signal, const std::string& what) {
  // Staging directories and temporary files of work not finished.
  remove_unfinished_paths();
  const std::string line = "garden: " + what + "\n";
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
  ::_exit(128 + signal);
}

void take(int signal) {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mutex);
  const Clock::time_point now = Clock::now();
  const bool duplicate = s.have_last && now - s.last < kDuplicateWindow;
  s.have_last = true;
  s.last = now;
  if (s.graceful.empty()) end_now(signal, "stopped by " + StopSignals::name(signal));
  if (duplicate) return;
  if (pending_signal.load() == 0) {
    pending_signal.store(signal);
    s.changed.notify_all();
    // Under the lock: a GracefulStop is not destroyed while its callback runs.
    for (const auto& entry : s.graceful)
      if (entry.second) entry.second(signal);
    return;
  }
  if (signal == SIGINT)
    end_now(signal, "second SIGINT: stopping at once, without saving a checkpoint");
  // A later SIGTERM: already stopping.
}

void signal_thread_main() {
  signal_thread_id.store(static_cast<pid_t>(::syscall(SYS_gettid)));
  const sigset_t set = stop_set();
  while (true) {
    const int signal = ::sigwaitinfo(&set, nullptr);
    if (signal > 0) take(signal);
  }
}

// For threads that libraries started before install_stop_signals(): hand the
// signal to the signal thread (tgkill is async-signal-safe).
extern "C" void forward_stop_signal(int signal) {
  const int saved = errno;
  const pid_t thread = signal_thread_id.load();
  if (thread > 0) ::syscall(SYS_tgkill, ::getpid(), thread, signal);
  errno = saved;
}

// A forked child has only the thread that forked, none of the signal
// thread, and may hold copies of locks other threads held: it starts over as
// a process that never installed anything (the default action, nothing
// blocked, so that a program it runs can be stopped; install_stop_signals()
// or a GracefulStop in the child starts its own signal thread).
void forget_in_child() {
  ::signal(SIGTERM, SIG_DFL);
  ::signal(SIGINT, SIG_DFL);
  const sigset_t set = stop_set();
  ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  the_state = new State;
  install_mutex = new std::mutex;
  installed = false;
  pending_signal.store(0);
  signal_thread_id.store(0);
  abandoned.store(false);
}

}  // namespace

void install_stop_signals() {
  std::lock_guard<std::mutex> lock(*install_mutex);
  if (installed) return;
  static const bool registered = ::pthread_atfork(nullptr, nullptr, forget_in_child) == 0;
  (void)registered;
  const sigset_t set = stop_set();
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread(signal_thread_main).detach();
  while (signal_thread_id.load() == 0) std::this_thread::yield();
  struct sigaction action {};
  action.sa_handler = forward_stop_signal;
  action.sa_mask = set;
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);
  installed = true;
}

int StopSignals::pending() { return pending_signal.load(); }

void StopSignals::clear() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  pending_signal.store(0);
  s.have_last = false;
}

bool StopSignals::wait_for(std::chrono::duration<double> timeout) {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mutex);
  return s.changed.wait_for(lock, timeout, [] { return pending_signal.load() != 0; });
}

std::string StopSignals::name(int signal) {
  if (signal == SIGTERM) return "SIGTERM";
  if (signal == SIGINT) return "SIGINT";
  return "signal " + std::to_string(signal);
}

bool StopSignals::work_abandoned() { return abandoned.load(); }

GracefulStop::GracefulStop(std::function<void(int)> on_stop) {
  install_stop_signals();
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.graceful.empty()) {
    pending_signal.store(0);
    s.have_last = false;
  }
  id_ = s.next_id++;
  s.graceful.emplace_back(id_, std::move(on_stop));
}

GracefulStop::~GracefulStop() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (auto it = s.graceful.begin(); it != s.graceful.end(); ++it)
    if (it->first == id_) {
      s.graceful.erase(it);
      break;
    }
}

void run_until_stopped(const std::function<void()>& work, const std::string& what,
                       const std::string& after) {
  State& s = state();
  bool graceful;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    graceful = !s.graceful.empty();
  }
  if (!graceful) {
    work();
    return;
  }
  struct Job {
    std::function<void()> work;
    bool done = false;
    std::exception_ptr error;
  };
  auto job = std::make_shared<Job>();
  job->work = work;
  std::thread worker([job] {
    try {
      job->work();
    } catch (...) {
      job->error = std::current_exception();
    }
    State& shared = state();
    {
      std::lock_guard<std::mutex> lock(shared.mutex);
      job->done = true;
    }
    shared.changed.notify_all();
  });
  std::unique_lock<std::mutex> lock(s.mutex);
  s.changed.wait(lock, [&] { return job->done || pending_signal.load() != 0; });
  if (!job->done) {
    const int signal = pending_signal.load();
    lock.unlock();
    abandoned.store(true);
    worker.detach();
    throw Preempted("received " + StopSignals::name(signal) + " while " + what + "; " + after,
                    signal);
  }
  lock.unlock();
  worker.join();
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace garden
