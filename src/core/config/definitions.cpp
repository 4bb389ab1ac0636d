#include "garden/core/config/definitions.h"

#include <set>

namespace garden::config {

void DataConfig::visit(Visitor& v) {
  v("input_path", input_path,
    "Comma-separated file paths or glob patterns of the input data.");
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
                                                   "tsv", "documents", "csv"};
  if (!file_types.count(file_type))
    throw ConfigError("file_type '" + file_type +
                      "' is not one of tfrecord, tfrecord_compressed, text, tsv, documents, csv");
}

void DataConfig::validate_reading() const {
  if (global_batch_size < 0) throw ConfigError("global_batch_size must be >= 0");
  if (shuffle_buffer_size < 0) throw ConfigError("shuffle_buffer_size must be >= 0");
  if (block_length < 1) throw ConfigError("block_length must be >= 1");
  if (cycle_length && *cycle_length < 1) throw ConfigError("cycle_length must be >= 1");
  if (prefetch_buffer_size && *prefetch_buffer_size < 0)
    throw ConfigError("prefetch_buffer_size must be >= 0");
  if (!compression_type.empty() && compression_type != "GZIP" && compression_type != "ZLIB")
    throw ConfigError("compression_type '" + compression_type + "' is not one of '', GZIP, ZLIB");
}

void DifferentialPrivacyConfig::visit(Visitor& v) {
  v("clipping_norm", clipping_norm, "Global L2 norm the batch gradients are clipped to (Model Garden clips per batch).");
  v("noise_multiplier", noise_multiplier, "Gaussian noise stddev as a multiple of clipping_norm.");
}

void DifferentialPrivacyConfig::validate() const {
  if (!(clipping_norm > 0)) throw ConfigError("clipping_norm must be > 0");
  if (!(noise_multiplier >= 0)) throw ConfigError("noise_multiplier must be >= 0");
}

void RuntimeConfig::visit(Visitor& v) {
  v("distribution_strategy", distribution_strategy,
    "off, one_device, mirrored, multi_worker_mirrored or parameter_server.");
  v("enable_xla", enable_xla, "Accepted for Model Garden compatibility; LibTorch has no XLA.");
  v("num_gpus", num_gpus, "GPUs to use with the mirrored strategy.");
  v("worker_hosts", worker_hosts, "Comma-separated host:port of every worker.");
  v("task_index", task_index, "Index of this worker in worker_hosts.");
  v("mixed_precision_dtype", mixed_precision_dtype, "null, float32, bfloat16 or float16.");
  v("loss_scale", loss_scale, "Loss scale for float16: a number or 'dynamic'.");
  v("run_eagerly", run_eagerly, "Accepted for Model Garden compatibility; LibTorch is eager.");
  v("device", device, "LibTorch device: cpu, cuda or cuda:N.");
  v("intra_op_parallelism_threads", intra_op_parallelism_threads,
    "Threads inside one op; 0 keeps LibTorch's default.");
  v("inter_op_parallelism_threads", inter_op_parallelism_threads,
    "Threads running independent ops; 0 keeps LibTorch's default.");
  v("seed", seed,
    "Seed of parameter initialization, dropout and data order; null draws one and records it "
    "in params.yaml.");
}

void RuntimeConfig::validate() const {
  static const std::set<std::string> strategies = {
      "", "off", "one_device", "mirrored", "multi_worker_mirrored", "parameter_server"};
  if (!strategies.count(distribution_strategy))
    throw ConfigError("distribution_strategy '" + distribution_strategy +
                      "' is not one of off, one_device, mirrored, multi_worker_mirrored, "
                      "parameter_server");
  if (mixed_precision_dtype && *mixed_precision_dtype != "float32" &&
      *mixed_precision_dtype != "bfloat16" && *mixed_precision_dtype != "float16")
    throw ConfigError("mixed_precision_dtype '" + *mixed_precision_dtype +
                      "' is not one of float32, bfloat16, float16");
  if (intra_op_parallelism_threads < 0 || inter_op_parallelism_threads < 0)
    throw ConfigError("thread counts must be >= 0");
  if (device != "cpu" && device.rfind("cuda", 0) != 0)
    throw ConfigError("device '" + device + "' is not one of cpu, cuda, cuda:N");
}

void TrainerConfig::visit(Visitor& v) {
  v("optimizer_config", optimizer_config, "Optimizer, learning-rate schedule and warmup.");
  v("steps_per_loop", steps_per_loop, "Training steps run between two host-side checks.");
  v("summary_interval", summary_interval, "Steps between training summaries.");
  v("checkpoint_interval", checkpoint_interval, "Steps between checkpoints.");
  v("max_to_keep", max_to_keep, "Checkpoints kept in model_dir.");
  v("continuous_eval_timeout", continuous_eval_timeout,
    "Seconds continuous_eval waits for a new checkpoint.");
  v("train_steps", train_steps, "Total training steps.");
  v("validation_steps", validation_steps, "Steps per evaluation; -1 runs the whole validation data.");
  v("validation_interval", validation_interval, "Training steps between evaluations.");
  v("best_checkpoint_export_subdir", best_checkpoint_export_subdir,
    "Where the best checkpoint is exported under model_dir; empty disables.");
  v("best_checkpoint_eval_metric", best_checkpoint_eval_metric,
    "Evaluation metric that decides the best checkpoint.");
  v("best_checkpoint_metric_comp", best_checkpoint_metric_comp, "higher or lower is better.");
  v("loss_upper_bound", loss_upper_bound, "A training loss above this triggers recovery.");
  v("recovery_begin_steps", recovery_begin_steps, "Steps before loss_upper_bound applies.");
  v("recovery_max_trials", recovery_max_trials, "Recoveries from the last checkpoint before failing.");
  v("validation_summary_subdir", validation_summary_subdir,
    "Subdirectory of model_dir for validation summaries.");
  v("preemption_on_demand_checkpoint", preemption_on_demand_checkpoint,
    "Write a checkpoint when SIGTERM or SIGINT arrives.");
}

void TrainerConfig::validate() const {
  if (steps_per_loop < 1) throw ConfigError("steps_per_loop must be >= 1");
  if (summary_interval < 0) throw ConfigError("summary_interval must be >= 0");
  if (summary_interval > 0 && summary_interval % steps_per_loop != 0)
    throw ConfigError("summary_interval (" + std::to_string(summary_interval) +
                      ") must be a multiple of steps_per_loop (" + std::to_string(steps_per_loop) +
                      ")");
  if (checkpoint_interval < 0) throw ConfigError("checkpoint_interval must be >= 0");
  if (max_to_keep < 1) throw ConfigError("max_to_keep must be >= 1");
  if (train_steps < 0) throw ConfigError("train_steps must be >= 0");
  if (validation_steps == 0 || validation_steps < -1)
    throw ConfigError("validation_steps must be -1 (the whole validation data) or > 0");
  if (validation_interval < 1) throw ConfigError("validation_interval must be >= 1");
  if (best_checkpoint_metric_comp != "higher" && best_checkpoint_metric_comp != "lower")
    throw ConfigError("best_checkpoint_metric_comp must be 'higher' or 'lower', got '" +
                      best_checkpoint_metric_comp + "'");
  if (!best_checkpoint_export_subdir.empty() && best_checkpoint_eval_metric.empty())
    throw ConfigError("best_checkpoint_export_subdir is set but best_checkpoint_eval_metric is empty");
  if (recovery_max_trials < 0) throw ConfigError("recovery_max_trials must be >= 0");
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
}

}  // namespace garden::config
