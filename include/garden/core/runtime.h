// Applies RuntimeConfig to the process: seeds, threads, device.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "garden/config/definitions.h"
#include "garden/distribute/process_group.h"

namespace garden {

// Fills in what the config leaves to start-up (runtime.seed and the data
// seeds, drawn once so params.yaml records them), validates every restriction,
// logs one warning naming the Model Garden compatibility keys that are set
// (they have no effect) and locks the config. Over several workers the
// chief draws the seed and every worker takes it. `resumed_seed`: the seed
// of the run whose checkpoint this one resumes (checkpoint_seed), taken
// instead of a new draw when runtime.seed is null, so that the same command
// resumes the same data order.
void finalize_config(config::ExperimentConfig& params,
                     distribute::ProcessGroup* process_group = nullptr,
                     std::optional<int64_t> resumed_seed = std::nullopt);

// The runtime.seed recorded in the latest checkpoint of `model_dir`, if it
// has one that records its config (and the seed is exact in a double, as a
// drawn seed is); nullopt otherwise.
std::optional<int64_t> checkpoint_seed(const std::string& model_dir);

// Sets LibTorch's thread counts and seeds its generator; checks the device.
// runtime.intra_op_parallelism_threads 0 is, as TensorFlow's 0, every core
// this process may run on, unless OMP_NUM_THREADS is set (torchrun and
// garden launch give each process its share so): then LibTorch's default,
// which follows it. (LibTorch's own default counts physical cores as its
// cpuinfo sees them, which on a virtual machine may be fewer.) Every core
// needs OMP_WAIT_POLICY=PASSIVE (platform/process.h): without it 0 gives one
// thread, and train.log says why. Logs the process's settings to train.log
// once, and warns about a slow BLAS.
void apply_runtime(const config::RuntimeConfig& runtime);

}  // namespace garden
