#include "garden/distribute/gradient_sync.h"

#include <torch/torch.h>

#include "garden/base/error.h"

namespace garden::distribute {

GradientSync::GradientSync(ProcessGroupPtr group, std::vector<at::Tensor> parameters,
                           int64_t bucket_bytes, Wire wire)
    : group_(std::move(group)), parameters_(std::move(parameters)) {
  if (!group_) throw Error("GradientSync needs a process group");
  slot_.resize(parameters_.size());
  seen_.assign(parameters_.size(), false);
  // Last parameter first; a new bucket at the size limit or a new dtype.
  // The first bucket holds at most 1 MiB, as in PyTorch's DDP, so that
  // communication starts early in backward.
  Bucket current;
  int64_t bytes = 0;
  const int64_t first_bucket_bytes = std::min<int64_t>(bucket_bytes, int64_t{1} << 20);
  const auto close = [&] {
    if (current.members.empty()) return;
    buckets_.push_back(std::move(current));
    current = Bucket();
    bytes = 0;
  };
  for (std::size_t i = parameters_.size(); i-- > 0;) {
    const at::Tensor& p = parameters_[i];
    if (!current.members.empty() &&
        parameters_[current.members.front()].scalar_type() != p.scalar_type())
      close();
    current.members.push_back(i);
    bytes += p.numel() * static_cast<int64_t>(p.element_size());
    if (bytes >= (buckets_.empty() ? first_bucket_bytes : bucket_bytes)) close();
  }
  close();
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    int64_t offset = 0;
    for (std::size_t m = 0; m < bucket.members.size(); ++m) {
      bucket.offsets.push_back(offset);
      offset += parameters_[bucket.members[m]].numel();
      slot_[bucket.members[m]] = {b, m};
    }
    bucket.flags_offset = offset;
    const at::Tensor& first = parameters_[bucket.members.front()];
    bucket.flat = torch::zeros({offset + static_cast<int64_t>(bucket.members.size())},
                               first.options().requires_grad(false));
    // The presence flags are small whole numbers: exact in float16 too.
    if (wire == Wire::kFloat16 && at::isFloatingType(first.scalar_type()) &&
        first.scalar_type() != at::kHalf)
      bucket.wire = torch::zeros_like(bucket.flat, bucket.flat.options().dtype(at::kHalf));
  }
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (!parameters_[i].requires_grad()) continue;
    hook_ids_.push_back(parameters_[i].register_hook(
        [this, i](const at::Tensor& gradient) { on_gradient(i, gradient); }));
  }
}

GradientSync::~GradientSync() {
  std::size_t h = 0;
  for (std::size_t i = 0; i < parameters_.size(); ++i)
    if (parameters_[i].requires_grad()) parameters_[i].remove_hook(hook_ids_[h++]);
}

void GradientSync::on_gradient(std::size_t index, const at::Tensor& gradient) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!sync_) return;        // an accumulation part: .grad keeps it until the last
  if (seen_[index]) return;  // a second backward in one step: the first counts
  seen_[index] = true;
  auto& [b, m] = slot_[index];
  Bucket& bucket = buckets_[b];
  const int64_t numel = parameters_[index].numel();
  at::NoGradGuard no_grad;
  at::Tensor slice = bucket.flat.narrow(0, bucket.offsets[m], numel);
  // Sparse where a table's only gradients were sparse lookups' (kernels::embedding_rows).
  slice.copy_((gradient.is_sparse() ? gradient.to_dense() : gradient).reshape({-1}));
  // Earlier accumulation parts' sum, not yet added by autograd (tensor
  // hooks run before the gradient is accumulated into .grad).
  if (const at::Tensor& earlier = parameters_[index].grad(); earlier.defined())
    slice.add_(earlier.reshape({-1}));
  bucket.flat.narrow(0, bucket.flags_offset + static_cast<int64_t>(m), 1).fill_(1);
  ++bucket.ready;
  launch_ready();
}

void GradientSync::launch(Bucket& bucket) {
  if (bucket.wire.defined()) {
    at::NoGradGuard no_grad;
    bucket.wire.copy_(bucket.flat);
    bucket.pending = group_->all_reduce_async(bucket.wire, what_);
    return;
  }
  bucket.pending = group_->all_reduce_async(bucket.flat, what_);
}

void GradientSync::launch_ready() {
  // In bucket order, so every rank issues the same sequence of all-reduces.
  while (next_launch_ < buckets_.size() &&
         buckets_[next_launch_].ready == buckets_[next_launch_].members.size())
    launch(buckets_[next_launch_++]);
}

void GradientSync::finish(std::vector<at::Tensor>& gradients, const std::string& what) {
  if (gradients.size() != parameters_.size())
    throw Error("GradientSync: " + std::to_string(gradients.size()) + " gradients for " +
                std::to_string(parameters_.size()) + " parameters");
  std::lock_guard<std::mutex> lock(mutex_);
  at::NoGradGuard no_grad;
  what_ = what;
  // Parameters backward did not reach count as zero on this rank.
  for (std::size_t b = next_launch_; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    for (std::size_t m = 0; m < bucket.members.size(); ++m) {
      const std::size_t i = bucket.members[m];
      if (seen_[i]) continue;
      at::Tensor slice = bucket.flat.narrow(0, bucket.offsets[m], parameters_[i].numel());
      at::Tensor flag = bucket.flat.narrow(0, bucket.flags_offset + static_cast<int64_t>(m), 1);
      // A gradient only earlier accumulation parts reached counts as one.
      if (gradients[i].defined()) {
        slice.copy_(gradients[i].reshape({-1}));
        flag.fill_(1);
      } else {
        slice.zero_();
        flag.zero_();
      }
    }
    bucket.ready = bucket.members.size();
  }
  launch_ready();
  double waited = 0.0;
  for (Bucket& bucket : buckets_) {
    waited += bucket.pending.wait();
    if (bucket.wire.defined()) bucket.flat.copy_(bucket.wire);
  }
  wait_seconds_ += waited;
  ++wait_steps_;
  for (Bucket& bucket : buckets_) {
    const at::Tensor flags =
        bucket.flat.narrow(0, bucket.flags_offset, static_cast<int64_t>(bucket.members.size()))
            .to(torch::kCPU, torch::kFloat64);
    const double* flag = flags.data_ptr<double>();
    for (std::size_t m = 0; m < bucket.members.size(); ++m) {
      const std::size_t i = bucket.members[m];
      const bool any = flag[m] > 0;
      if (!any) {
        gradients[i] = at::Tensor();
        continue;
      }
      const at::Tensor sum = bucket.flat.narrow(0, bucket.offsets[m], parameters_[i].numel())
                                 .view(parameters_[i].sizes());
      if (gradients[i].defined())
        gradients[i].copy_(sum);
      else
        gradients[i] = sum.clone();
    }
    bucket.ready = 0;
  }
  std::fill(seen_.begin(), seen_.end(), false);
  next_launch_ = 0;
}

std::pair<double, int64_t> GradientSync::take_wait() {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto result = std::make_pair(wait_seconds_, wait_steps_);
  wait_seconds_ = 0.0;
  wait_steps_ = 0;
  return result;
}

}  // namespace garden::distribute
