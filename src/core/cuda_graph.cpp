#include "garden/core/cuda_graph.h"

#include <map>
#include <string>
#include <utility>

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include "garden/base/error.h"
#include "garden/base/torch_features.h"

// GARDEN_WITH_CUDA comes from CMake when LibTorch has CUDA.
#if defined(GARDEN_WITH_CUDA) && GARDEN_HAS_CUDA_GRAPHS
#define GARDEN_CUDA_GRAPHS 1
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#else
#define GARDEN_CUDA_GRAPHS 0
#endif

namespace garden {

namespace {
std::string shape_key(const std::vector<at::Tensor>& inputs) {
  std::string key;
  for (const auto& t : inputs) {
    key += c10::toString(t.scalar_type());
    key += c10::str(t.sizes());
    key += ';';
  }
  return key;
}

// The first line of a LibTorch error (its message carries a C++ backtrace).
std::string first_line(const std::string& what) { return what.substr(0, what.find('\n')); }
}  // namespace

#if GARDEN_CUDA_GRAPHS

struct StepGraphs::Impl {
  struct Entry {
    int64_t eager_runs = 0;
    std::unique_ptr<at::cuda::CUDAGraph> graph;
    std::vector<at::Tensor> inputs, outputs;  // static
  };
  c10::Device device;
  int64_t warmup;
  c10::cuda::CUDAStream side;
  std::map<std::string, Entry> entries;
  int64_t graphs = 0, replays = 0;

  Impl(const c10::Device& d, int64_t w)
      : device(d), warmup(w), side(c10::cuda::getStreamFromPool(false, d.index())) {}

  // `side` starts after what is queued on the current stream, and the
  // current stream after what `side` ran.
  void join(const c10::cuda::CUDAStream& from, const c10::cuda::CUDAStream& to) {
    at::cuda::CUDAEvent event;
    event.record(from);
    event.block(to);
  }
};

bool StepGraphs::available() { return true; }

StepGraphs::StepGraphs(const c10::Device& device, int64_t warmup) {
  if (!device.is_cuda())
    throw Error("CUDA graphs need a CUDA device, not '" + device.str() + "'");
  if (warmup < 1) throw Error("CUDA graphs need at least one eager step before capture");
  const c10::cuda::CUDAGuard guard(device);
  impl_ = std::make_unique<Impl>(c10::Device(at::kCUDA, c10::cuda::current_device()), warmup);
}

StepGraphs::Result StepGraphs::run(const std::vector<at::Tensor>& inputs, const Step& step) {
  Impl& s = *impl_;
  const c10::cuda::CUDAGuard device_guard(s.device);
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(s.device.index());
  Impl::Entry& e = s.entries[shape_key(inputs)];
  if (e.graph) {
    for (std::size_t i = 0; i < inputs.size(); ++i) e.inputs[i].copy_(inputs[i], true);
    e.graph->replay();
    ++s.replays;
    return {e.outputs, true};
  }
  if (e.eager_runs < s.warmup) {
    ++e.eager_runs;
    s.join(current, s.side);
    std::vector<at::Tensor> outputs;
    {
      const c10::cuda::CUDAStreamGuard on_side(s.side);
      outputs = step(inputs);
    }
    s.join(s.side, current);
    return {std::move(outputs), false};
  }
  // Capture: the static inputs are allocated before the graph's pool is.
  e.inputs.clear();
  for (const auto& t : inputs)
    e.inputs.push_back(t.to(t.options().device(s.device), /*non_blocking=*/true, /*copy=*/true));
  s.join(current, s.side);
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  const bool cache = at::autocast::is_autocast_cache_enabled();
  at::autocast::set_autocast_cache_enabled(false);
  {
    const c10::cuda::CUDAStreamGuard on_side(s.side);
    // Thread-local: the input pipeline's threads may pin memory meanwhile.
    graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    try {
      e.outputs = step(e.inputs);
    } catch (const std::exception& error) {
      at::autocast::set_autocast_cache_enabled(cache);
      try {
        graph->capture_end();
      } catch (const std::exception&) {
        // The capture was invalidated by what failed; that error is the one to report.
      }
      e.inputs.clear();
      e.outputs.clear();
      throw Error("capturing the training step as a CUDA graph failed: " +
                  first_line(error.what()));
    }
    graph->capture_end();
  }
  at::autocast::set_autocast_cache_enabled(cache);
  s.join(s.side, current);
  e.graph = std::move(graph);
  ++s.graphs;
  e.graph->replay();
  ++s.replays;
  return {e.outputs, false};
}

#else  // no CUDA graphs in this build

struct StepGraphs::Impl {
  int64_t graphs = 0, replays = 0;
};

bool StepGraphs::available() { return false; }

StepGraphs::StepGraphs(const c10::Device& device, int64_t warmup) {
  (void)warmup;
#ifdef GARDEN_WITH_CUDA
  const std::string cuda = " with CUDA";
#else
  const std::string cuda = " without CUDA";
#endif
  throw Error("CUDA graphs (on '" + device.str() +
              "') need Garden built against a CUDA LibTorch 2.1 or later; this one has LibTorch " +
              TORCH_VERSION + cuda);
}

StepGraphs::Result StepGraphs::run(const std::vector<at::Tensor>& inputs, const Step& step) {
  (void)inputs;
  (void)step;
  (void)shape_key;
  (void)first_line;
  throw Error("CUDA graphs are not available in this build");
}

#endif

StepGraphs::~StepGraphs() = default;

int64_t StepGraphs::graphs() const { return impl_->graphs; }
int64_t StepGraphs::replays() const { return impl_->replays; }

}  // namespace garden
