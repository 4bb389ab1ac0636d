#include "supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>

#include "garden/base/error.h"
#include "garden/platform/stop_signals.h"

namespace garden::cli_detail {

namespace {

struct Child {
  std::string name;  // "rank 1", "the evaluator"
  std::string prefix;
  pid_t pid = -1;
  int out = -1, err = -1;  // read ends
  std::string out_partial, err_partial;
  std::string last_line;
  bool running = true;
  int status = 0;
};

// Writes the complete lines of `buffer` with the child's prefix; keeps the rest.
void emit_lines(Child& child, std::string& buffer, std::ostream& to, bool flush_all) {
  std::size_t start = 0;
  for (std::size_t newline; (newline = buffer.find('\n', start)) != std::string::npos;
       start = newline + 1) {
    const std::string line = buffer.substr(start, newline - start);
    to << child.prefix << line << '\n';
    if (!line.empty()) child.last_line = line;
  }
  buffer.erase(0, start);
  if (flush_all && !buffer.empty()) {
    to << child.prefix << buffer << '\n';
    child.last_line = buffer;
    buffer.clear();
  }
  to.flush();
}

Child spawn(const distribute::LaunchProcess& process, const std::vector<std::string>& args) {
  int out[2], err[2];
  if (pipe(out) != 0 || pipe(err) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) throw Error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    close(out[0]);
    close(out[1]);
    close(err[0]);
    close(err[1]);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    for (const auto& name : process.unset) unsetenv(name.c_str());
    for (const auto& [key, value] : process.env) setenv(key.c_str(), value.c_str(), 1);
    std::vector<char*> argv;
    static const std::string self = "garden";
    argv.push_back(const_cast<char*>(self.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    std::fprintf(stderr, "garden launch: cannot run /proc/self/exe: %s\n", std::strerror(errno));
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  Child child;
  child.name = process.name;
  child.prefix = process.prefix;
  child.pid = pid;
  child.out = out[0];
  child.err = err[0];
  return child;
}

}  // namespace

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    const char* name = strsignal(signal);
    return "was killed by signal " + std::to_string(signal) +
           (name ? std::string(" (") + name + ")" : "");
  }
  return "ended";
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

RoundResult run_round(const std::vector<distribute::LaunchProcess>& plan,
                      const std::vector<std::string>& command, double stop_grace_seconds) {
  std::vector<Child> children;
  const Child* failed = nullptr;
  int forwarded = 0;
  const auto stop_all = [&](int signal) {
    for (auto& child : children)
      if (child.running) kill(child.pid, signal);
  };
  try {
    for (const auto& process : plan) children.push_back(spawn(process, command));
  } catch (const std::exception&) {
    stop_all(SIGKILL);
    throw;
  }

  std::chrono::steady_clock::time_point kill_at{};
  bool kill_armed = false;
  while (true) {
    if (StopSignals::pending() && !forwarded) {
      forwarded = StopSignals::pending();
      stop_all(forwarded);  // each process checkpoints (when configured) and stops
    }
    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, bool>> owners;
    for (auto& child : children) {
      if (child.out >= 0) {
        fds.push_back({child.out, POLLIN, 0});
        owners.emplace_back(&child, true);
      }
      if (child.err >= 0) {
        fds.push_back({child.err, POLLIN, 0});
        owners.emplace_back(&child, false);
      }
    }
    if (!fds.empty())
      poll(fds.data(), fds.size(), 100);
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto& [child, is_out] = owners[i];
      char buffer[65536];
      const ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
      std::string& partial = is_out ? child->out_partial : child->err_partial;
      if (n > 0) {
        partial.append(buffer, static_cast<std::size_t>(n));
        emit_lines(*child, partial, is_out ? std::cout : std::cerr, false);
      } else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
        emit_lines(*child, partial, is_out ? std::cout : std::cerr, true);
        close(fds[i].fd);
        (is_out ? child->out : child->err) = -1;
      }
    }
    bool any_running = false;
    for (auto& child : children) {
      if (!child.running) continue;
      int status = 0;
      if (waitpid(child.pid, &status, WNOHANG) == child.pid) {
        child.running = false;
        child.status = status;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && !failed && !forwarded) {
          failed = &child;
          // The others would stop at their next collective; do not wait for a timeout.
          stop_all(SIGTERM);
          kill_at = std::chrono::steady_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(stop_grace_seconds * 1000));
          kill_armed = true;
        }
      } else {
        any_running = true;
      }
    }
    if (kill_armed && std::chrono::steady_clock::now() >= kill_at) {
      stop_all(SIGKILL);
      kill_armed = false;
    }
    bool pipes_open = false;
    for (const auto& child : children) pipes_open = pipes_open || child.out >= 0 || child.err >= 0;
    if (!any_running && !pipes_open) break;
  }
  RoundResult result;
  result.forwarded_signal = forwarded;
  if (failed) {
    result.failed_name = failed->name;
    result.failed_last_line = failed->last_line;
    result.failed_status = failed->status;
  }
  return result;
}

}  // namespace garden::cli_detail
