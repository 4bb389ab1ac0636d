// SIGTERM and SIGINT for the whole process: how a run is asked to stop.
//
// A signal handler runs on whichever thread the kernel picks, on that
// thread's stack. oneDNN's JIT matrix products (dnnl_sgemm, which Garden's
// products use, and LibTorch's own oneDNN kernels) point the stack register
// into a heap workspace while they run (oneDNN issue 4845, fixed in 3.11.1):
// a handler entered there writes its signal frame over the heap. So no
// thread of Garden's may receive these signals. install_stop_signals() blocks
// them in the calling thread, and so in every thread started after it
// (OpenMP's and oneDNN's workers, the input pipeline, the servers); one
// thread of its own takes them with sigwaitinfo. Threads that libraries
// started before (OpenBLAS's, at load time) still receive them: their handler
// only forwards the signal to that thread.
//
// What a stop signal does then:
//   - While a GracefulStop lives, it asks the work to stop at its next
//     boundary: StopSignals::pending() names it, and the GracefulStop's
//     callback runs (on the signal thread). Duplicates arriving within
//     kDuplicateWindow of the previous stop signal are ignored: `timeout`
//     signals the child and then its group, a terminal's Ctrl-C reaches
//     every process of the group and `garden launch` forwards it as well.
//     A second SIGINT later than that is a person insisting: the process
//     ends at once (one line, exit 130), without waiting for a checkpoint.
//   - Otherwise the process ends at once: one line on stderr and exit
//     128 + signal, as the default action would end it.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "garden/base/error.h"

namespace garden {

// Duplicates of a stop signal closer than this to the previous one are one
// request.
inline constexpr std::chrono::milliseconds kDuplicateWindow{1000};

// Blocks SIGTERM and SIGINT in the calling thread, starts the signal thread
// and installs the forwarding handler. Call it first thing in main(), before
// any thread starts; `garden` does. Later calls do nothing. GracefulStop
// calls it too, for programs that did not (their earlier threads then keep
// receiving the signals, through the forwarding handler).
void install_stop_signals();

// Raised by work that stopped for a stop signal, after it saved what it
// could; the message says what was saved. `garden` prints it as one line
// and exits with 128 + signal().
class Preempted : public Error {
 public:
  Preempted(const std::string& message, int signal) : Error(message), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

class StopSignals {
 public:
  // The stop signal that arrived while a GracefulStop lived (SIGTERM or
  // SIGINT), or 0.
  static int pending();
  // Forgets the pending signal and the time of the last one (a new run in
  // the same process starts clean).
  static void clear();
  // Sleeps for up to `timeout`; returns early, true, once a stop is pending.
  static bool wait_for(std::chrono::duration<double> timeout);
  // "SIGTERM", "SIGINT", or "signal N".
  static std::string name(int signal);
  // Whether run_until_stopped() left work running on a thread: the process
  // must then end with _exit, without running static destructors under it.
  static bool work_abandoned();
};

// While one lives, a stop signal asks the process to stop gracefully (see
// above); `on_stop`, when given, runs on the signal thread with the signal
// when the request arrives (it must not throw). They nest; the first one
// made clears a pending signal of an earlier run.
class GracefulStop {
 public:
  explicit GracefulStop(std::function<void(int)> on_stop = nullptr);
  ~GracefulStop();
  GracefulStop(const GracefulStop&) = delete;
  GracefulStop& operator=(const GracefulStop&) = delete;

 private:
  int id_;
};

// Runs `work`, which cannot stop part-way (a library call such as
// SentencePiece's training), where a stop request does not wait for it:
// with a GracefulStop alive, on a thread of its own while this one waits,
// and a stop signal throws Preempted("received SIGTERM while <what>; "
// + after) at once, leaving the thread behind (see work_abandoned()).
// Without a GracefulStop it simply runs here. Exceptions of `work` come
// back to the caller.
void run_until_stopped(const std::function<void()>& work, const std::string& what,
                       const std::string& after);

}  // namespace garden
