#include "garden/vision/modeling/sync_batch_norm.h"

#include <torch/torch.h>

#include <cstdint>

#include "garden/base/error.h"

namespace garden::vision {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Every dimension but the channels' (1).
std::vector<int64_t> reduced_dims(const at::Tensor& x) {
  std::vector<int64_t> dims = {0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// A [C] vector shaped to broadcast over x's channels.
at::Tensor per_channel(const at::Tensor& v, const at::Tensor& x) {
  std::vector<int64_t> shape(static_cast<std::size_t>(x.dim()), 1);
  shape[1] = v.size(0);
  return v.to(x.scalar_type()).view(shape);
}

// The statistics are summed in float64 (the sums read float32 activations
// without a copy), so the result does not depend on how the batch is split.
struct SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, at::Tensor running_mean, at::Tensor running_var,
                            double momentum, double eps, const Replicas* replicas) {
    const auto dims = reduced_dims(x);
    const int64_t channels = x.size(1);
    // The sums and the count, then the squared deviations from the mean
    // of the whole batch (two passes, as one process's batch norm).
    at::Tensor first =
        at::cat({at::sum(x, dims, false, at::kDouble),
                 torch::full({1}, static_cast<double>(x.numel() / channels), torch::kFloat64)});
    std::vector<at::Tensor> sums = {first};
    replicas->sum(sums);
    first = sums[0];
    const double count = first[channels].item<double>();
    if (count < 2)
      throw Error("sync batch norm: " + std::to_string(static_cast<int64_t>(count)) +
                  " value(s) per channel over every replica; it needs at least 2");
    const at::Tensor mean = first.narrow(0, 0, channels) / count;
    const at::Tensor centered = x - per_channel(mean, x);
    std::vector<at::Tensor> squares = {at::sum(centered * centered, dims, false, at::kDouble)};
    replicas->sum(squares);
    const at::Tensor var = squares[0] / count;
    const at::Tensor invstd = (var + eps).rsqrt();
    {
      torch::NoGradGuard no_grad;
      running_mean.mul_(1.0 - momentum).add_(mean.to(running_mean.scalar_type()), momentum);
      // The moving variance is the unbiased one, as one process's.
      running_var.mul_(1.0 - momentum)
          .add_((var * (count / (count - 1.0))).to(running_var.scalar_type()), momentum);
    }
    const at::Tensor scale = invstd * weight.to(at::kDouble);
    ctx->save_for_backward({x, weight});
    ctx->saved_data["mean"] = mean;
    ctx->saved_data["invstd"] = invstd;
    ctx->saved_data["count"] = count;
    ctx->saved_data["replicas"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(replicas));
    return at::addcmul(per_channel(bias.to(at::kDouble) - mean * scale, x), x,
                       per_channel(scale, x));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor mean = ctx->saved_data["mean"].toTensor();
    const at::Tensor invstd = ctx->saved_data["invstd"].toTensor();
    const double count = ctx->saved_data["count"].toDouble();
    const auto* replicas = reinterpret_cast<const Replicas*>(
        static_cast<intptr_t>(ctx->saved_data["replicas"].toInt()));
    const at::Tensor dy = grad_outputs[0].contiguous(x.suggest_memory_format());
    const auto dims = reduced_dims(x);
    const int64_t channels = x.size(1);
    const at::Tensor centered = x - per_channel(mean, x);
    // This replica's sums: its share of the weight's and bias's gradients
    // (the gradient all-reduce adds the others').
    const at::Tensor sum_dy = at::sum(dy, dims, false, at::kDouble);
    const at::Tensor sum_dy_centered = at::sum(dy * centered, dims, false, at::kDouble);
    std::vector<at::Tensor> sums = {at::cat({sum_dy, sum_dy_centered})};
    replicas->sum(sums);
    const at::Tensor mean_dy = sums[0].narrow(0, 0, channels) / count;
    const at::Tensor mean_dy_centered = sums[0].narrow(0, channels, channels) / count;
    // dx = w invstd (dy - mean(dy) - (x - mean) invstd^2 mean(dy (x - mean))),
    // the means over every replica's batch.
    const at::Tensor k = invstd * weight.to(at::kDouble);
    const at::Tensor a = -k * invstd * invstd * mean_dy_centered;
    const at::Tensor dx =
        at::addcmul(at::addcmul(per_channel(-k * mean_dy, x), dy, per_channel(k, x)), centered,
                    per_channel(a, x));
    const at::Tensor dweight = (sum_dy_centered * invstd).to(weight.scalar_type());
    const at::Tensor dbias = sum_dy.to(weight.scalar_type());
    return {dx,           dweight,      dbias,        at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

template <class Norm>
at::Tensor apply(Norm& norm, const at::Tensor& x, const ReplicasPtr& replicas) {
  if (!norm.is_training() || !replicas || replicas->count() < 2) return norm.forward(x);
  const auto& options = norm.options;
  if (!options.affine() || !options.track_running_stats() || !options.momentum())
    throw Error("sync batch norm: needs affine weights, moving averages and a momentum");
  if (x.dim() < 2 || x.size(1) != options.num_features())
    throw Error("sync batch norm: expects [batch, " + std::to_string(options.num_features()) +
                ", ...], got " + std::to_string(x.dim()) + " dimensions");
  {
    torch::NoGradGuard no_grad;
    norm.num_batches_tracked.add_(1);
  }
  return SyncBatchNormFunction::apply(x, norm.weight, norm.bias, norm.running_mean,
                                      norm.running_var, *options.momentum(), options.eps(),
                                      replicas.get());
}

}  // namespace

at::Tensor sync_batch_norm(torch::nn::BatchNorm2dImpl& norm, const at::Tensor& x,
                           const ReplicasPtr& replicas) {
  return apply(norm, x, replicas);
}

at::Tensor sync_batch_norm(torch::nn::BatchNorm1dImpl& norm, const at::Tensor& x,
                           const ReplicasPtr& replicas) {
  return apply(norm, x, replicas);
}

}  // namespace garden::vision
