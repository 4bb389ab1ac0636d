// Model Garden's `config_definitions`: the same key names and defaults.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "garden/config/config.h"
#include "garden/config/optimization.h"

namespace garden::config {

// Model Garden's DataConfig (official/core/config_definitions.py).
struct DataConfig : Config {
  std::string input_path;
  int64_t global_batch_size = 0;
  std::optional<bool> is_training;
  bool drop_remainder = true;
  int64_t shuffle_buffer_size = 100;
  bool cache = false;
  std::optional<int64_t> cycle_length;
  int64_t block_length = 1;
  // Accepted for Model Garden compatibility: Garden's pipelines are always
  // deterministic (a warning names it when set).
  std::optional<bool> deterministic;
  bool sharding = true;
  std::optional<int64_t> seed;
  // Null or -1 (tf.data.AUTOTUNE): 2 batches.
  std::optional<int64_t> prefetch_buffer_size;
  // How the files are read (Model Garden's file_type: tfrecord, or
  // tfrecord_compressed for GZIP; Garden adds text, tsv, documents and csv).
  std::string file_type = "tfrecord";
  // TFRecord compression: "", GZIP or ZLIB (tf.data's compression_type);
  // file_type tfrecord_compressed means GZIP.
  std::string compression_type;
  // Skip records whose CRC does not match (counted and logged) instead of
  // failing.
  bool skip_corrupt_records = false;
  void visit(Visitor& v) override;

 protected:
  // The shuffle_buffer_size a subclass starts with (image classification's
  // is Model Garden's 10000), which data read in order may keep.
  int64_t own_shuffle_buffer_size_ = 100;

 public:
  // validate_reading(), then file_type is one of the generic types.
  void validate() const override;
  // Everything but file_type: for a task's data config with file types of
  // its own.
  void validate_reading() const;
  std::vector<IgnoredKey> ignored_keys() const override;
};

// Model Garden's DifferentialPrivacyConfig (official/modeling/privacy).
struct DifferentialPrivacyConfig : Config {
  double clipping_norm = 100000000.0;
  double noise_multiplier = 0.0;
  void visit(Visitor& v) override;
  void validate() const override;
};

// Model Garden's RuntimeConfig, plus LibTorch's threads and device. Each
// process trains one replica on runtime.device: off, one_device and
// mirrored in one process; multi_worker_mirrored (or mirrored) over the
// processes a cluster describes (garden/distribute/cluster.h).
struct RuntimeConfig : Config {
  std::string distribution_strategy = "mirrored";
  bool enable_xla = false;
  std::optional<std::string> gpu_thread_mode;
  std::optional<int64_t> dataset_num_private_threads;
  int64_t per_gpu_thread_count = 0;
  std::optional<std::string> tpu;
  int64_t num_gpus = 0;
  std::optional<std::string> worker_hosts;
  int64_t task_index = -1;
  std::optional<std::string> all_reduce_alg;
  int64_t num_packs = 1;
  std::optional<std::string> mixed_precision_dtype;
  std::optional<std::string> loss_scale;
  bool run_eagerly = false;
  bool batchnorm_spatial_persistent = false;
  std::optional<bool> tpu_enable_xla_dynamic_padder;
  int64_t num_cores_per_replica = 1;
  int64_t default_shard_dim = -1;
  bool use_tpu_mp_strategy = false;
  // LibTorch-specific settings.
  std::string device = "cpu";
  bool cuda_graphs = false;
  // auto, direct or winograd: the algorithm of float32 3x3 stride-1 CPU
  // convolutions (kernels/convolution.h).
  std::string convolution_algorithm = "auto";
  int64_t intra_op_parallelism_threads = 0;
  int64_t inter_op_parallelism_threads = 0;
  std::optional<int64_t> seed;
  // Multi-worker settings (PyTorch's names).
  double bucket_cap_mb = 25.0;
  // none, or fp16: gradients cross the wire as float16 (PyTorch DDP's
  // fp16_compress_hook).
  std::string gradient_compression = "none";
  int64_t collective_timeout_seconds = 600;
  // More threads than this are refused: LibTorch starts them all at once,
  // and beyond the cores they only slow it down.
  static constexpr int64_t kMaxThreads = 1024;
  void visit(Visitor& v) override;
  void validate() const override;
  std::vector<IgnoredKey> ignored_keys() const override;
};

// Model Garden's TrainerConfig.
struct TrainerConfig : Config {
  OptimizationConfig optimizer_config;
  int64_t steps_per_loop = 1000;
  // Each step's batch is split into this many parts by rows, one forward and
  // backward each, and the summed gradients make one update.
  int64_t gradient_accumulation_steps = 1;
  int64_t summary_interval = 1000;
  int64_t checkpoint_interval = 1000;
  int64_t max_to_keep = 5;
  int64_t continuous_eval_timeout = 60 * 60;
  int64_t train_steps = 0;
  int64_t validation_steps = -1;
  int64_t validation_interval = 1000;
  std::string best_checkpoint_export_subdir;
  std::string best_checkpoint_eval_metric;
  std::string best_checkpoint_metric_comp = "higher";
  double loss_upper_bound = 1e6;
  int64_t recovery_begin_steps = 0;
  int64_t recovery_max_trials = 0;
  std::string validation_summary_subdir = "validation";
  bool preemption_on_demand_checkpoint = true;
  void visit(Visitor& v) override;
  void validate() const override;
};

// Model Garden's TaskConfig. A task's own config derives from
// TaskConfigWith<ModelConfig, DataConfigType> (below), which supplies the
// typed `model`, `train_data` and `validation_data`; extra task keys go in
// visit_task_fields().
struct TaskConfig : Config {
  std::string init_checkpoint;
  // Which sub-modules of the model init_checkpoint restores (empty or
  // "all": every tensor the checkpoint and the model share).
  NameList init_checkpoint_modules;
  // Checkpoint-name prefix -> model-name prefix, for a checkpoint of
  // another task (e.g. "discriminator.encoder." -> "encoder.").
  std::map<std::string, std::string> init_checkpoint_rename;
  std::string name;
  std::optional<DifferentialPrivacyConfig> differential_privacy_config;

  // Garden: the key and value by which this task's optimizer takes a
  // learning-rate factor per parameter (Task::learning_rate_scales), e.g.
  // "task.layerwise_lr_decay=0.8"; "" when it takes none. parameter_server
  // training refuses it before any process waits for another.
  virtual std::string learning_rate_scales_setting() const { return ""; }
  // Garden: the key and value of a setting that needs synchronous workers
  // (a batch norm over every worker's batch), e.g.
  // "task.model.norm_activation.use_sync_bn=true"; "" when none is set.
  // parameter_server training refuses it.
  virtual std::string synchronous_setting() const { return ""; }

  virtual Config* model_config() = 0;
  virtual DataConfig& train_data_config() = 0;
  virtual DataConfig& validation_data_config() = 0;
  const DataConfig& train_data_config() const {
    return const_cast<TaskConfig*>(this)->train_data_config();
  }
  const DataConfig& validation_data_config() const {
    return const_cast<TaskConfig*>(this)->validation_data_config();
  }

  void visit(Visitor& v) final;

  // Fills keys the user left unset from the files the task names (tagging:
  // class_names from the meta data beside its records). finalize_config
  // calls it before validation; a key the user set that the files
  // contradict is a garden::Error naming both values.
  virtual void resolve_from_files() {}

 protected:
  // Task-specific keys, written after the common ones.
  virtual void visit_task_fields(Visitor&) {}
};

template <class ModelConfigType, class DataConfigType = DataConfig>
struct TaskConfigWith : TaskConfig {
  ModelConfigType model;
  DataConfigType train_data;
  DataConfigType validation_data;
  Config* model_config() override { return &model; }
  DataConfig& train_data_config() override { return train_data; }
  DataConfig& validation_data_config() override { return validation_data; }
};

// Model Garden's ExperimentConfig: task, trainer, runtime.
struct ExperimentConfig : Config {
  std::shared_ptr<TaskConfig> task;
  TrainerConfig trainer;
  RuntimeConfig runtime;
  void visit(Visitor& v) override;
  // A task is set; restrictions between task, trainer and runtime.
  void validate() const override;
};

}  // namespace garden::config
