// Synchronous data parallel's gradient all-reduce, overlapped with the
// backward pass (what PyTorch's DistributedDataParallel does in Python).
//
// The parameters are grouped, last first (the order backward reaches them),
// into buckets of about `bucket_bytes` (the first of at most 1 MiB, as in
// PyTorch's DDP). An autograd hook on each parameter
// copies its gradient into its bucket as soon as backward has it; a full
// bucket starts its all-reduce at once, in bucket order on every rank, while
// backward goes on with the layers below. finish() starts what is left
// (parameters without a gradient on this rank count as zero), waits, and
// writes the sums back. A parameter no rank has a gradient for keeps none,
// as in one process.
//
// With Wire::kFloat16 (runtime.gradient_compression fp16, PyTorch DDP's
// fp16_compress_hook) a floating-point bucket is sent as float16: half the
// bytes, and each worker's gradients and the sums are rounded to float16.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <ATen/core/Tensor.h>

#include "garden/distribute/process_group.h"

namespace garden::distribute {

class GradientSync {
 public:
  // The gradients' type on the wire.
  enum class Wire { kAsIs, kFloat16 };
  GradientSync(ProcessGroupPtr group, std::vector<at::Tensor> parameters, int64_t bucket_bytes,
               Wire wire = Wire::kAsIs);
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // Before each backward. With `sync` false (a gradient accumulation part
  // that is not the last) the hooks do nothing; the backward that syncs
  // adds what earlier parts left in each parameter's .grad.
  void begin_backward(bool sync) { sync_ = sync; }

  // After backward: `gradients` (one per parameter, in the constructor's
  // order; undefined where there is none) become the sums over every rank.
  void finish(std::vector<at::Tensor>& gradients, const std::string& what);

  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  // Seconds finish() waited for all-reduces after backward ended, summed
  // over steps, and the steps; reset by take_wait().
  std::pair<double, int64_t> take_wait();

 private:
  struct Bucket {
    std::vector<std::size_t> members;  // parameter indices
    std::vector<int64_t> offsets;      // of each member in `flat`
    at::Tensor flat;                   // gradients, then one presence flag per member
    at::Tensor wire;                   // float16 `flat` on the wire (Wire::kFloat16)
    int64_t flags_offset = 0;
    std::size_t ready = 0;
    ProcessGroup::Pending pending;
  };
  void on_gradient(std::size_t index, const at::Tensor& gradient);
  void launch_ready();
  void launch(Bucket& bucket);

  ProcessGroupPtr group_;
  std::vector<at::Tensor> parameters_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<std::size_t, std::size_t>> slot_;  // parameter -> bucket, member
  std::vector<bool> seen_;
  std::vector<unsigned> hook_ids_;
  std::size_t next_launch_ = 0;
  std::mutex mutex_;
  std::string what_ = "gradients";
  bool sync_ = true;
  double wait_seconds_ = 0.0;
  int64_t wait_steps_ = 0;
};

}  // namespace garden::distribute
