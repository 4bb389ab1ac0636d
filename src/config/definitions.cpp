#include "garden/config/definitions.h"

#include <cmath>
#include <cstdlib>
#include <set>

#include "garden/config/validation.h"

namespace garden::config {

void DataConfig::visit(Visitor& v) {
  v("input_path", input_path, "Comma-separated file paths or glob patterns of the input data.");
  v("global_batch_size", global_batch_size, "Batch size summed over all replicas.");
  v("is_training", is_training, "Whether this is training data (shuffle and repeat).");
  v("drop_remainder", drop_remainder, "Drop the last batch when it is smaller than the others.");
  v("shuffle_buffer_size", shuffle_buffer_size, "Records held in the shuffle buffer.");
  v("cache", cache, "Keep the whole dataset in memory after the first pass.");
  v("cycle_length", cycle_length, "Files read at once when interleaving.");
  v("block_length", block_length, "Consecutive records taken from each file when interleaving.");
  v("deterministic", deterministic, "Produce the same order on every run with the same seed.");
  v("sharding", sharding, "Shard the input across input pipelines.");
  v("seed", seed, "Seed of the shuffles; null draws one at start-up.");
  v("prefetch_buffer_size", prefetch_buffer_size, "Batches prepared ahead on background threads.");
  v("file_type", file_type, "tfrecord, tfrecord_compressed (GZIP), text, tsv, documents or csv.");
  v("compression_type", compression_type, "TFRecord compression: empty, GZIP or ZLIB.");
  v("skip_corrupt_records", skip_corrupt_records,
    "Skip records with a bad CRC (counted and logged) instead of failing.");
}

void DataConfig::validate() const {
  validate_reading();
  static const std::set<std::string> file_types = {"tfrecord", "tfrecord_compressed", "text",
                                                   "tsv",      "documents",           "csv"};
  if (!file_types.count(file_type))
    refuse("file_type", "'" + file_type +
                            "' is not one of tfrecord, tfrecord_compressed, text, tsv, documents, "
                            "csv");
}

void DataConfig::validate_reading() const {
  check_range("global_batch_size", global_batch_size, Range::at_least(1));
  check_range("shuffle_buffer_size", shuffle_buffer_size, Range::at_least(0));
  check_range("cycle_length", cycle_length, Range::at_least(1));
  check_range("block_length", block_length, Range::at_least(1));
  check_range("seed", seed, Range::at_least(0));
  // -1 is tf.data.AUTOTUNE.
  check_range("prefetch_buffer_size", prefetch_buffer_size, Range::at_least(-1));
  if (!compression_type.empty() && compression_type != "GZIP" && compression_type != "ZLIB")
    refuse("compression_type", "'" + compression_type + "' is not one of '', GZIP, ZLIB");
  const bool tfrecord = file_type == "tfrecord" || file_type == "tfrecord_compressed";
  if (!compression_type.empty() && !tfrecord)
    refuse(
        "compression_type",
        "'" + compression_type + "' applies only to TFRecord files, not to file_type " + file_type);
  if (!compression_type.empty() && compression_type != "GZIP" && file_type == "tfrecord_compressed")
    refuse("compression_type",
           "'" + compression_type + "' contradicts file_type tfrecord_compressed (GZIP)");
  // Model Garden shuffles training data only.
  if (!is_training.value_or(false) && shuffle_buffer_size != own_shuffle_buffer_size_)
    refuse("shuffle_buffer_size", std::to_string(shuffle_buffer_size) +
                                      " has no effect: data with is_training false is read in "
                                      "order; leave it at its default, " +
                                      std::to_string(own_shuffle_buffer_size_));
  if (skip_corrupt_records && !tfrecord)
    refuse("skip_corrupt_records",
           "true applies only to TFRecord files (their CRCs), not to file_type " + file_type);
}

std::vector<IgnoredKey> DataConfig::ignored_keys() const {
  std::vector<IgnoredKey> out;
  note_ignored(out, "deterministic", deterministic, DataConfig().deterministic,
               "Garden's input is always deterministic");
  return out;
}

void DifferentialPrivacyConfig::visit(Visitor& v) {
  v("clipping_norm", clipping_norm,
    "Global L2 norm the batch gradients are clipped to (Model Garden clips per batch).");
  v("noise_multiplier", noise_multiplier, "Gaussian noise stddev as a multiple of clipping_norm.");
}

void DifferentialPrivacyConfig::validate() const {
  check_range("clipping_norm", clipping_norm, Range::above(0));
  check_range("noise_multiplier", noise_multiplier, Range::at_least(0));
}

void RuntimeConfig::visit(Visitor& v) {
  v("distribution_strategy", distribution_strategy,
    "off or one_device: one process; mirrored or multi_worker_mirrored: synchronous data "
    "parallel over the processes TF_CONFIG, torchrun, SLURM or OpenMPI describe (one process "
    "when none does).");
  v("enable_xla", enable_xla, "Accepted for Model Garden compatibility; LibTorch has no XLA.");
  v("gpu_thread_mode", gpu_thread_mode,
    "Accepted for Model Garden compatibility (TensorFlow's GPU threads).");
  v("dataset_num_private_threads", dataset_num_private_threads,
    "Accepted for Model Garden compatibility (tf.data's private thread pool).");
  v("per_gpu_thread_count", per_gpu_thread_count,
    "Accepted for Model Garden compatibility (TensorFlow's GPU threads).");
  v("tpu", tpu, "Accepted for Model Garden compatibility; Garden has no TPU support.");
  v("num_gpus", num_gpus,
    "0, or 1 with runtime.device cuda[:N]; Garden uses the one device runtime.device names.");
  v("worker_hosts", worker_hosts,
    "Comma-separated host:port of every worker, the first the chief (or use TF_CONFIG).");
  v("task_index", task_index, "This process's index in worker_hosts; -1 when none.");
  v("all_reduce_alg", all_reduce_alg,
    "Accepted for Model Garden compatibility; Gloo and NCCL choose their own algorithm.");
  v("num_packs", num_packs,
    "Accepted for Model Garden compatibility; gradients are packed by bucket_cap_mb.");
  v("mixed_precision_dtype", mixed_precision_dtype, "null, float32, bfloat16 or float16.");
  v("loss_scale", loss_scale,
    "Loss scale for float16 (only): a positive number or 'dynamic'; null is dynamic.");
  v("run_eagerly", run_eagerly, "Accepted for Model Garden compatibility; LibTorch is eager.");
  v("batchnorm_spatial_persistent", batchnorm_spatial_persistent,
    "Accepted for Model Garden compatibility (a cuDNN batch-norm mode).");
  v("tpu_enable_xla_dynamic_padder", tpu_enable_xla_dynamic_padder,
    "Accepted for Model Garden compatibility; Garden has no TPU support.");
  v("num_cores_per_replica", num_cores_per_replica,
    "Accepted for Model Garden compatibility (TPU model parallelism).");
  v("default_shard_dim", default_shard_dim,
    "Accepted for Model Garden compatibility (TPU model parallelism).");
  v("use_tpu_mp_strategy", use_tpu_mp_strategy,
    "Accepted for Model Garden compatibility; Garden has no TPU support.");
  v("device", device, "LibTorch device: cpu, cuda or cuda:N.");
  v("cuda_graphs", cuda_graphs,
    "Capture the training step as a CUDA graph per batch shape and replay it (runtime.device "
    "cuda, one process, optimizer adam or adamw).");
  v("convolution_algorithm", convolution_algorithm,
    "auto, direct or winograd: float32 3x3 stride-1 CPU convolutions on oneDNN's Winograd "
    "algorithm where oneDNN finds it faster (auto), always (winograd) or never (direct).");
  v("intra_op_parallelism_threads", intra_op_parallelism_threads,
    "Threads inside one op; 0: every core this process may run on (LibTorch's default when "
    "OMP_NUM_THREADS is set; one without OMP_WAIT_POLICY=PASSIVE, which garden sets).");
  v("inter_op_parallelism_threads", inter_op_parallelism_threads,
    "Threads running independent ops; 0 keeps LibTorch's default.");
  v("seed", seed,
    "Seed of parameter initialization, dropout and data order; null draws one and records it "
    "in params.yaml.");
  v("bucket_cap_mb", bucket_cap_mb,
    "Multi-worker: megabytes of gradients per all-reduce bucket (started as backward fills "
    "it).");
  v("gradient_compression", gradient_compression,
    "Multi-worker: none, or fp16 to send the gradients as float16 (PyTorch DDP's "
    "fp16_compress_hook): half the bytes, each worker's gradients and their sums rounded to "
    "float16.");
  v("collective_timeout_seconds", collective_timeout_seconds,
    "Multi-worker: seconds a worker waits for the others (rendezvous, all-reduce) before it "
    "stops, naming the ranks that stopped answering.");
}

namespace {
bool is_cuda_device(const std::string& device) {
  if (device == "cuda") return true;
  if (device.rfind("cuda:", 0) != 0 || device.size() == 5 || device.size() > 8) return false;
  return device.find_first_not_of("0123456789", 5) == std::string::npos;
}

// Model Garden's loss_scale: null, "dynamic" or a positive number.
bool is_loss_scale(const std::string& text) {
  if (text.empty() || text == "dynamic") return true;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && std::isfinite(value) && value > 0;
}
}  // namespace

void RuntimeConfig::validate() const {
  static const std::set<std::string> strategies = {
      "", "off", "one_device", "mirrored", "multi_worker_mirrored", "parameter_server"};
  if (!strategies.count(distribution_strategy))
    refuse("distribution_strategy", "'" + distribution_strategy +
                                        "' is not one of off, one_device, mirrored, "
                                        "multi_worker_mirrored, parameter_server");
  if (!is_cuda_device(device) && device != "cpu")
    refuse("device", "'" + device + "' is not one of cpu, cuda, cuda:N");
  check_range("num_gpus", num_gpus, Range::at_least(0));
  if (num_gpus > 1)
    refuse("num_gpus", std::to_string(num_gpus) +
                           " GPUs cannot be used: Garden trains on the one device runtime.device "
                           "names; set num_gpus to 0 or 1 and runtime.device=cuda:N");
  if (num_gpus == 1 && !is_cuda_device(device))
    refuse("num_gpus", "1 asks for a GPU but runtime.device is '" + device +
                           "'; Garden chooses the device with runtime.device: set "
                           "runtime.device=cuda (or num_gpus=0 for the CPU)");
  check_range("task_index", task_index, Range::at_least(-1));
  if (task_index >= 0 && !(worker_hosts && !worker_hosts->empty()))
    refuse("task_index",
           std::to_string(task_index) + " is an index into runtime.worker_hosts, which is not set");
  check_range("bucket_cap_mb", bucket_cap_mb, Range::above(0));
  check_range("collective_timeout_seconds", collective_timeout_seconds, Range::at_least(1));
  if (convolution_algorithm != "auto" && convolution_algorithm != "direct" &&
      convolution_algorithm != "winograd")
    refuse("convolution_algorithm",
           "'" + convolution_algorithm + "' is not one of auto, direct, winograd");
  if (gradient_compression == "bf16")
    refuse("gradient_compression",
           "bf16 is not implemented: LibTorch 1.13's Gloo cannot sum bfloat16; use fp16");
  else if (gradient_compression != "none" && gradient_compression != "fp16")
    refuse("gradient_compression", "'" + gradient_compression + "' is not one of none, fp16");
  if (gradient_compression != "none" && distribution_strategy == "parameter_server")
    refuse("gradient_compression",
           gradient_compression +
               " applies to multi_worker_mirrored's all-reduce; parameter_server sends float32");
  if (mixed_precision_dtype && *mixed_precision_dtype != "float32" &&
      *mixed_precision_dtype != "bfloat16" && *mixed_precision_dtype != "float16")
    refuse("mixed_precision_dtype",
           "'" + *mixed_precision_dtype + "' is not one of float32, bfloat16, float16");
  if (loss_scale && !is_loss_scale(*loss_scale))
    refuse("loss_scale", "'" + *loss_scale + "' is not 'dynamic' or a positive number");
  if (loss_scale && mixed_precision_dtype.value_or("") != "float16")
    refuse("loss_scale", "'" + *loss_scale +
                             "' applies only with mixed_precision_dtype float16 (it is " +
                             mixed_precision_dtype.value_or("null") + ")");
  check_range("dataset_num_private_threads", dataset_num_private_threads, Range::at_least(1));
  check_range("per_gpu_thread_count", per_gpu_thread_count, Range::at_least(0));
  check_range("num_packs", num_packs, Range::at_least(1));
  check_range("num_cores_per_replica", num_cores_per_replica, Range::at_least(1));
  check_range("default_shard_dim", default_shard_dim, Range::at_least(-1));
  const std::string why_cap =
      " (LibTorch starts every thread at once; more threads than cores "
      "only slow it down)";
  for (const auto& [key, value] : {std::pair<const char*, int64_t>{"intra_op_parallelism_threads",
                                                                   intra_op_parallelism_threads},
                                   {"inter_op_parallelism_threads", inter_op_parallelism_threads}})
    if (value > kMaxThreads)
      refuse(key, std::to_string(value) + " is out of range; must be in [0, " +
                      std::to_string(kMaxThreads) + "]" + why_cap);
    else
      check_range(key, value, Range::at_least(0).at_most(static_cast<double>(kMaxThreads)));
  check_range("seed", seed, Range::at_least(0));
}

std::vector<IgnoredKey> RuntimeConfig::ignored_keys() const {
  const RuntimeConfig d;
  std::vector<IgnoredKey> out;
  note_ignored(out, "enable_xla", enable_xla, d.enable_xla, "LibTorch has no XLA");
  note_ignored(out, "gpu_thread_mode", gpu_thread_mode, d.gpu_thread_mode,
               "TensorFlow's GPU threads");
  note_ignored(out, "dataset_num_private_threads", dataset_num_private_threads,
               d.dataset_num_private_threads, "tf.data's thread pool");
  note_ignored(out, "per_gpu_thread_count", per_gpu_thread_count, d.per_gpu_thread_count,
               "TensorFlow's GPU threads");
  note_ignored(out, "tpu", tpu, d.tpu, "no TPU support");
  note_ignored(out, "all_reduce_alg", all_reduce_alg, d.all_reduce_alg,
               "Gloo and NCCL choose their own algorithm");
  note_ignored(out, "num_packs", num_packs, d.num_packs, "gradients are packed by bucket_cap_mb");
  note_ignored(out, "run_eagerly", run_eagerly, d.run_eagerly, "LibTorch is always eager");
  note_ignored(out, "batchnorm_spatial_persistent", batchnorm_spatial_persistent,
               d.batchnorm_spatial_persistent, "a cuDNN mode of TensorFlow");
  note_ignored(out, "tpu_enable_xla_dynamic_padder", tpu_enable_xla_dynamic_padder,
               d.tpu_enable_xla_dynamic_padder, "no TPU support");
  note_ignored(out, "num_cores_per_replica", num_cores_per_replica, d.num_cores_per_replica,
               "no TPU model parallelism");
  note_ignored(out, "default_shard_dim", default_shard_dim, d.default_shard_dim,
               "no TPU model parallelism");
  note_ignored(out, "use_tpu_mp_strategy", use_tpu_mp_strategy, d.use_tpu_mp_strategy,
               "no TPU support");
  return out;
}

void TrainerConfig::visit(Visitor& v) {
  v("optimizer_config", optimizer_config, "Optimizer, learning-rate schedule and warmup.");
  v("steps_per_loop", steps_per_loop, "Training steps run between two host-side checks.");
  v("gradient_accumulation_steps", gradient_accumulation_steps,
    "Parts each step's batch is split into, one backward each, for one update.");
  v("summary_interval", summary_interval, "Steps between training summaries.");
  v("checkpoint_interval", checkpoint_interval, "Steps between checkpoints.");
  v("max_to_keep", max_to_keep, "Checkpoints kept in model_dir.");
  v("continuous_eval_timeout", continuous_eval_timeout,
    "Seconds continuous_eval waits for a new checkpoint.");
  v("train_steps", train_steps, "Total training steps.");
  v("validation_steps", validation_steps,
    "Steps per evaluation; -1 runs the whole validation data.");
  v("validation_interval", validation_interval, "Training steps between evaluations.");
  v("best_checkpoint_export_subdir", best_checkpoint_export_subdir,
    "Where the best checkpoint is exported under model_dir; empty disables.");
  v("best_checkpoint_eval_metric", best_checkpoint_eval_metric,
    "Evaluation metric that decides the best checkpoint.");
  v("best_checkpoint_metric_comp", best_checkpoint_metric_comp, "higher or lower is better.");
  v("loss_upper_bound", loss_upper_bound, "A training loss above this triggers recovery.");
  v("recovery_begin_steps", recovery_begin_steps, "Steps before loss_upper_bound applies.");
  v("recovery_max_trials", recovery_max_trials,
    "Recoveries from the last checkpoint before failing.");
  v("validation_summary_subdir", validation_summary_subdir,
    "Subdirectory of model_dir for validation summaries.");
  v("preemption_on_demand_checkpoint", preemption_on_demand_checkpoint,
    "Write a checkpoint when SIGTERM or SIGINT arrives.");
}

void TrainerConfig::validate() const {
  check_range("steps_per_loop", steps_per_loop, Range::at_least(1));
  check_range("gradient_accumulation_steps", gradient_accumulation_steps, Range::at_least(1));
  check_range("summary_interval", summary_interval, Range::at_least(0));
  if (summary_interval > 0 && summary_interval % steps_per_loop != 0)
    refuse("summary_interval", std::to_string(summary_interval) +
                                   " must be a multiple of steps_per_loop (" +
                                   std::to_string(steps_per_loop) + ")");
  check_range("checkpoint_interval", checkpoint_interval, Range::at_least(0));
  check_range("max_to_keep", max_to_keep, Range::at_least(1));
  // Seconds added to a clock counting nanoseconds: far beyond 1e9 it overflows.
  check_range("continuous_eval_timeout", continuous_eval_timeout, Range::at_least(0).at_most(1e9));
  check_range("train_steps", train_steps, Range::at_least(0));
  if (validation_steps == 0 || validation_steps < -1)
    refuse("validation_steps", std::to_string(validation_steps) +
                                   " is out of range; must be -1 (the whole validation data) or "
                                   ">= 1");
  check_range("validation_interval", validation_interval, Range::at_least(1));
  if (best_checkpoint_metric_comp != "higher" && best_checkpoint_metric_comp != "lower")
    refuse("best_checkpoint_metric_comp",
           "'" + best_checkpoint_metric_comp + "' is not one of higher, lower");
  if (!best_checkpoint_export_subdir.empty() && best_checkpoint_eval_metric.empty())
    refuse("best_checkpoint_eval_metric",
           "is empty, but best_checkpoint_export_subdir is set; name the metric to compare");
  // inf: no bound.
  check_range("loss_upper_bound", loss_upper_bound, Range::above(0).allow_infinity());
  check_range("recovery_begin_steps", recovery_begin_steps, Range::at_least(0));
  check_range("recovery_max_trials", recovery_max_trials, Range::at_least(0));
}

void TaskConfig::visit(Visitor& v) {
  v("init_checkpoint", init_checkpoint, "Checkpoint whose weights initialize the model.");
  v("init_checkpoint_modules", init_checkpoint_modules,
    "Model sub-modules init_checkpoint restores (a name or a list); empty or all: the whole "
    "model.");
  v("init_checkpoint_rename", init_checkpoint_rename,
    "Checkpoint-name prefix -> model-name prefix, applied before init_checkpoint_modules.");
  if (Config* model = model_config()) v("model", *model, "The model.");
  v("train_data", train_data_config(), "Training data.");
  v("validation_data", validation_data_config(), "Validation data.");
  v("name", name, "Name of the task.");
  v("differential_privacy_config", differential_privacy_config,
    "Per-example clipping and noise; null disables.");
  visit_task_fields(v);
}

void ExperimentConfig::visit(Visitor& v) {
  v("task", task, "The task: data, model, losses and metrics.");
  v("trainer", trainer, "The training loop.");
  v("runtime", runtime, "Devices, threads, distribution and precision.");
}

void ExperimentConfig::validate() const {
  if (!task) throw ConfigError("the experiment has no task config");
  // Training data repeats; evaluating all of it would never end.
  if (task->validation_data_config().is_training.value_or(false) && trainer.validation_steps < 0)
    refuse("task.validation_data.is_training",
           "true repeats the validation data without end, and trainer.validation_steps -1 "
           "evaluates until it ends; set is_training: false (or trainer.validation_steps)");
  // Keras refuses these with differential privacy, which does its own
  // clipping (Model Garden's base_task.create_optimizer).
  const auto& optimizer = trainer.optimizer_config.optimizer;
  const auto* active = dynamic_cast<const BaseOptimizerConfig*>(optimizer.get());
  if (task->differential_privacy_config && active) {
    const std::string prefix = "trainer.optimizer_config.optimizer." + optimizer.type + ".";
    for (const auto& [key, value] :
         {std::pair<const char*, const std::optional<double>*>{"clipnorm", &active->clipnorm},
          {"clipvalue", &active->clipvalue},
          {"global_clipnorm", &active->global_clipnorm}})
      if (*value)
        refuse(prefix + key, number_text(**value) +
                                 " cannot be set together with task.differential_privacy_config, "
                                 "which does its own clipping");
  }
}

}  // namespace garden::config
