// Validation of the registered experiments' configs when they are locked:
// each range rule refuses a value with one line naming the full key, the
// value and what is allowed, and accepts the values its meaning allows;
// duplicate keys, bad numbers and bad regexes are refused; keys kept only for
// Model Garden compatibility give one warning at start.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "garden/base/logging.h"
#include "garden/config/registry.h"
#include "garden/config/validation.h"
#include "garden/config/yaml_io.h"
#include "garden/core/runtime.h"
#include "test_util.h"

namespace fs = std::filesystem;
namespace gc = garden::config;

namespace {

using garden_test::error_of;

// The error validate_config gives after `overrides` ("" when none).
std::string validation_error(const std::string& experiment, const std::string& overrides) {
  auto config = gc::get_experiment_config(experiment);
  gc::apply_override(*config, overrides);
  const std::string error = error_of([&] { gc::validate_config(*config); });
  return error == "(no error)" ? "" : error;
}

struct Case {
  const char* experiment;
  const char* overrides;
  // "" when the value is accepted; else the start of the one-line error.
  const char* error;
};

void check(const std::vector<Case>& cases) {
  for (const auto& c : cases) {
    const std::string error = validation_error(c.experiment, c.overrides);
    EXPECT_EQ(error.substr(0, std::string(c.error).size()), c.error)
        << c.experiment << " with " << c.overrides << "\n  gives: " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    if (*c.error == 0) {
      EXPECT_EQ(error, "") << c.overrides;
    }
  }
}

TEST(ConfigValidationTest, RangeErrorsNameTheFullKeyTheValueAndTheRange) {
  EXPECT_EQ(validation_error("tabular/iris", "task.train_data.global_batch_size=-3"),
            "task.train_data.global_batch_size: -3 is out of range; must be >= 1");
  EXPECT_EQ(validation_error("tabular/iris", "trainer.optimizer_config.optimizer.adam.clipnorm=-1"),
            "trainer.optimizer_config.optimizer.adam.clipnorm: -1 is out of range; must be > 0");
  EXPECT_EQ(validation_error("tabular/iris", "task.model.dropout_rate=1.5"),
            "task.model.dropout_rate: 1.5 is out of range; must be in [0, 1)");
  EXPECT_EQ(validation_error("tabular/iris", "trainer.loss_upper_bound=.nan"),
            "trainer.loss_upper_bound: nan is not a number; must be > 0 (inf allowed)");
  EXPECT_EQ(validation_error("tabular/iris", "task.model.dropout_rate=-.inf"),
            "task.model.dropout_rate: -inf is not finite; must be in [0, 1)");
}

TEST(ConfigValidationTest, DataKeys) {
  check({
      {"tabular/iris", "task.train_data.global_batch_size=0",
       "task.train_data.global_batch_size: 0 is out of range; must be >= 1"},
      {"tabular/iris", "task.train_data.global_batch_size=1", ""},
      {"tabular/iris", "task.validation_data.seed=-1",
       "task.validation_data.seed: -1 is out of range; must be >= 0"},
      {"tabular/iris", "task.validation_data.seed=0", ""},
      {"wmt_transformer/demo", "task.train_data.shuffle_buffer_size=-1",
       "task.train_data.shuffle_buffer_size: -1 is out of range; must be >= 0"},
      {"wmt_transformer/demo", "task.train_data.shuffle_buffer_size=0", ""},
      {"wmt_transformer/demo", "task.train_data.cycle_length=0",
       "task.train_data.cycle_length: 0 is out of range; must be >= 1"},
      {"wmt_transformer/demo", "task.train_data.cycle_length=2", ""},
      {"wmt_transformer/demo", "task.train_data.block_length=0",
       "task.train_data.block_length: 0 is out of range"},
      {"wmt_transformer/demo", "task.train_data.prefetch_buffer_size=-2",
       "task.train_data.prefetch_buffer_size: -2 is out of range; must be >= -1"},
      {"wmt_transformer/demo", "task.train_data.prefetch_buffer_size=-1", ""},
      {"wmt_transformer/demo", "task.train_data.compression_type=GZIP",
       "task.train_data.compression_type: 'GZIP' applies only to TFRecord files"},
      {"wmt_transformer/demo", "task.train_data.skip_corrupt_records=true",
       "task.train_data.skip_corrupt_records: true applies only to TFRecord files"},
      {"wmt_transformer/base", "task.train_data.compression_type=ZLIB", ""},
      {"wmt_transformer/base",
       "task.train_data.file_type=tfrecord_compressed,"
       "task.train_data.compression_type=ZLIB",
       "task.train_data.compression_type: 'ZLIB' contradicts file_type tfrecord_compressed"},
      {"wmt_transformer/demo", "task.validation_data.shuffle_buffer_size=500",
       "task.validation_data.shuffle_buffer_size: 500 has no effect: data with is_training false "
       "is read in order"},
      {"wmt_transformer/demo", "task.train_data.shuffle_buffer_size=500", ""},
      {"wmt_transformer/demo",
       "task.train_data.static_batch=true,task.train_data.drop_remainder=false",
       "task.train_data.drop_remainder: false has no effect with static_batch in training"},
      {"wmt_transformer/demo",
       "task.validation_data.static_batch=true,"
       "task.validation_data.drop_remainder=false",
       ""},
      {"wmt_transformer/demo", "task.train_data.max_seq_length=1",
       "task.train_data.max_seq_length: 1 is out of range; must be >= 2"},
      {"wmt_transformer/demo", "task.train_data.bucket_boundary_scale=0.5",
       "task.train_data.bucket_boundary_scale: 0.5 is out of range; must be >= 1"},
      {"wmt_transformer/demo", "task.train_data.bucket_boundary_scale=1.0", ""},
  });
}

TEST(ConfigValidationTest, TrainerKeys) {
  check({
      {"tabular/iris", "trainer.steps_per_loop=0",
       "trainer.steps_per_loop: 0 is out of range; must be >= 1"},
      {"tabular/iris", "trainer.max_to_keep=0", "trainer.max_to_keep: 0 is out of range"},
      {"tabular/iris", "trainer.train_steps=-1", "trainer.train_steps: -1 is out of range"},
      {"tabular/iris", "trainer.train_steps=0", ""},
      {"tabular/iris", "task.validation_data.is_training=true",
       "task.validation_data.is_training: true repeats the validation data without end, and "
       "trainer.validation_steps -1 evaluates until it ends; set is_training: false (or "
       "trainer.validation_steps)"},
      {"tabular/iris", "task.validation_data.is_training=true,trainer.validation_steps=3", ""},
      {"tabular/iris", "task.train_data.file_type=tfrecord",
       "task.train_data.file_type: 'tfrecord' is not csv; this task reads CSV files only"},
      {"tabular/iris", "task.validation_data.file_type=csv", ""},
      // Image data starts at Model Garden's 10000, which data read in order keeps.
      {"vision/flowers", "task.train_data.is_training=false", ""},
      {"vision/flowers", "task.validation_data.shuffle_buffer_size=500",
       "task.validation_data.shuffle_buffer_size: 500 has no effect: data with is_training false "
       "is read in order; leave it at its default, 10000"},
      // Model Garden's key and form: a list of two shares of the area.
      {"vision/flowers", "task.train_data.crop_area_range=[0.3,0.9]", ""},
      {"vision/flowers", "task.train_data.crop_area_range=[0.5,0.2]",
       "task.train_data.crop_area_range: [0.5, 0.2]: the smallest share is above the largest"},
      {"vision/flowers", "task.train_data.crop_area_range=[0.5]",
       "task.train_data.crop_area_range: has 1 values; give two, the smallest and largest share"},
      {"tabular/iris", "trainer.validation_steps=0",
       "trainer.validation_steps: 0 is out of range; must be -1 (the whole validation data) or "
       ">= 1"},
      {"tabular/iris", "trainer.validation_steps=-1", ""},
      {"tabular/iris", "trainer.validation_steps=3", ""},
      {"tabular/iris", "trainer.validation_interval=0",
       "trainer.validation_interval: 0 is out of range"},
      {"tabular/iris", "trainer.loss_upper_bound=0",
       "trainer.loss_upper_bound: 0 is out of range; must be > 0 (inf allowed)"},
      {"tabular/iris", "trainer.loss_upper_bound=.inf", ""},
      {"tabular/iris", "trainer.continuous_eval_timeout=-1",
       "trainer.continuous_eval_timeout: -1 is out of range; must be in [0, 1000000000]"},
      {"tabular/iris", "trainer.recovery_begin_steps=-1",
       "trainer.recovery_begin_steps: -1 is out of range"},
      {"tabular/iris", "trainer.recovery_max_trials=-1",
       "trainer.recovery_max_trials: -1 is out of range"},
      {"tabular/iris", "trainer.summary_interval=75",
       "trainer.summary_interval: 75 must be a multiple of steps_per_loop (50)"},
      {"tabular/iris", "trainer.best_checkpoint_export_subdir=best",
       "trainer.best_checkpoint_eval_metric: is empty"},
  });
}

TEST(ConfigValidationTest, RuntimeKeys) {
  check({
      {"tabular/iris", "runtime.intra_op_parallelism_threads=100000",
       "runtime.intra_op_parallelism_threads: 100000 is out of range; must be in [0, 1024] "
       "(LibTorch starts every thread at once; more threads than cores only slow it down)"},
      {"tabular/iris", "runtime.intra_op_parallelism_threads=1024", ""},
      {"tabular/iris", "runtime.intra_op_parallelism_threads=-1",
       "runtime.intra_op_parallelism_threads: -1 is out of range; must be in [0, 1024]"},
      {"tabular/iris", "runtime.inter_op_parallelism_threads=5000",
       "runtime.inter_op_parallelism_threads: 5000 is out of range; must be in [0, 1024]"},
      {"tabular/iris", "runtime.inter_op_parallelism_threads=2", ""},
      {"tabular/iris", "runtime.seed=-1", "runtime.seed: -1 is out of range; must be >= 0"},
      {"tabular/iris", "runtime.seed=0", ""},
      {"tabular/iris", "runtime.num_gpus=2",
       "runtime.num_gpus: 2 GPUs cannot be used: Garden trains on the one device runtime.device "
       "names; set num_gpus to 0 or 1 and runtime.device=cuda:N"},
      {"tabular/iris", "runtime.num_gpus=1",
       "runtime.num_gpus: 1 asks for a GPU but runtime.device is 'cpu'; Garden chooses the device "
       "with runtime.device: set runtime.device=cuda"},
      {"tabular/iris", "runtime.num_gpus=1,runtime.device=cuda:0", ""},
      {"tabular/iris", "runtime.num_gpus=-1", "runtime.num_gpus: -1 is out of range"},
      {"tabular/iris", "runtime.device=cudax",
       "runtime.device: 'cudax' is not one of cpu, cuda, cuda:N"},
      {"tabular/iris", "runtime.device=cuda:1", ""},
      {"tabular/iris", "runtime.worker_hosts='a:1,b:2',runtime.task_index=1", ""},
      {"tabular/iris", "runtime.task_index=0",
       "runtime.task_index: 0 is an index into runtime.worker_hosts, which is not set"},
      {"tabular/iris", "runtime.worker_hosts='a:1',runtime.task_index=-2",
       "runtime.task_index: -2 is out of range; must be >= -1"},
      {"tabular/iris", "runtime.distribution_strategy=multi_worker_mirrored", ""},
      {"tabular/iris", "runtime.distribution_strategy=parameter_server", ""},
      {"tabular/iris", "runtime.bucket_cap_mb=0", "runtime.bucket_cap_mb: 0 is out of range"},
      {"tabular/iris", "runtime.gradient_compression=fp16", ""},
      {"tabular/iris", "runtime.convolution_algorithm=winograd", ""},
      {"tabular/iris", "runtime.convolution_algorithm=fft",
       "runtime.convolution_algorithm: 'fft' is not one of auto, direct, winograd"},
      {"tabular/iris", "runtime.gradient_compression=int8",
       "runtime.gradient_compression: 'int8' is not one of none, fp16"},
      {"tabular/iris", "runtime.gradient_compression=bf16",
       "runtime.gradient_compression: bf16 is not implemented: LibTorch 1.13's Gloo cannot sum "
       "bfloat16; use fp16"},
      {"tabular/iris",
       "runtime.gradient_compression=fp16,runtime.distribution_strategy=parameter_server",
       "runtime.gradient_compression: fp16 applies to multi_worker_mirrored's all-reduce; "
       "parameter_server sends float32"},
      {"tabular/iris", "runtime.collective_timeout_seconds=0",
       "runtime.collective_timeout_seconds: 0 is out of range; must be >= 1"},
      {"tabular/iris", "runtime.distribution_strategy=tpu",
       "runtime.distribution_strategy: 'tpu' is not one of off, one_device, mirrored"},
      {"tabular/iris", "runtime.distribution_strategy=mirrored", ""},
      {"tabular/iris", "runtime.distribution_strategy=off", ""},
      {"wmt_transformer/base", "", ""},  // mirrored, its default
      {"wmt_transformer/large", "", ""},
      {"tabular/iris", "runtime.loss_scale=dynamic",
       "runtime.loss_scale: 'dynamic' applies only with mixed_precision_dtype float16 (it is "
       "null)"},
      {"tabular/iris", "runtime.loss_scale=128,runtime.mixed_precision_dtype=bfloat16",
       "runtime.loss_scale: '128' applies only with mixed_precision_dtype float16 (it is "
       "bfloat16)"},
      {"tabular/iris", "runtime.loss_scale=dynamic,runtime.mixed_precision_dtype=float16", ""},
      {"tabular/iris", "runtime.loss_scale=128,runtime.mixed_precision_dtype=float16", ""},
      {"tabular/iris", "runtime.loss_scale=-2,runtime.mixed_precision_dtype=float16",
       "runtime.loss_scale: '-2' is not 'dynamic' or a positive number"},
      {"tabular/iris", "runtime.num_packs=0", "runtime.num_packs: 0 is out of range"},
  });
}

TEST(ConfigValidationTest, OptimizerKeys) {
  const std::string opt = "trainer.optimizer_config.optimizer.";
  const std::vector<std::pair<std::string, std::string>> raw = {
      {"adam.clipnorm=1.0", ""},
      {"adam.clipvalue=0", "adam.clipvalue: 0 is out of range; must be > 0"},
      {"adam.global_clipnorm=-1", "adam.global_clipnorm: -1 is out of range"},
      {"adam.clipnorm=1.0," + opt + "adam.global_clipnorm=1.0",
       "adam.global_clipnorm: cannot be set together with clipnorm"},
      {"sgd.momentum=1.5", "sgd.momentum: 1.5 is out of range; must be in [0, 1]"},
      {"sgd.momentum=0.9", ""},
      {"sgd.decay=-1", "sgd.decay: -1 is out of range; must be >= 0"},
      {"adam.beta_1=1", "adam.beta_1: 1 is out of range; must be in [0, 1)"},
      {"adam.beta_1=0", ""},
      {"adam.beta_2=-0.1", "adam.beta_2: -0.1 is out of range"},
      {"adam.epsilon=0", "adam.epsilon: 0 is out of range; must be > 0"},
      {"adam.epsilon=1e-320", ""},  // a subnormal is a positive number
      {"rmsprop.rho=1", "rmsprop.rho: 1 is out of range; must be in [0, 1)"},
      {"rmsprop.momentum=1", "rmsprop.momentum: 1 is out of range"},
      {"adagrad.initial_accumulator_value=-0.1",
       "adagrad.initial_accumulator_value: -0.1 is out of range; must be >= 0"},
      {"adagrad.initial_accumulator_value=0", ""},
      {"adamw.weight_decay_rate=-0.01", "adamw.weight_decay_rate: -0.01 is out of range"},
      {"adamw.gradient_clip_norm=0", ""},
      {"adamw.gradient_clip_norm=-1", "adamw.gradient_clip_norm: -1 is out of range"},
      {"lamb.beta_2=1.5", "lamb.beta_2: 1.5 is out of range"},
      {"lamb.weight_decay_rate=0.01", ""},
  };
  std::vector<std::string> overrides, errors;
  for (const auto& [o, e] : raw) {
    overrides.push_back(opt + o);
    errors.push_back(e.empty() ? "" : opt + e);
  }
  std::vector<Case> cases;
  for (std::size_t i = 0; i < raw.size(); ++i)
    cases.push_back({"tabular/iris", overrides[i].c_str(), errors[i].c_str()});
  check(cases);
}

TEST(ConfigValidationTest, LearningRateWarmupAndEmaKeys) {
  check({
      {"tabular/iris", "trainer.optimizer_config.learning_rate.constant.learning_rate=-0.1",
       "trainer.optimizer_config.learning_rate.constant.learning_rate: -0.1 is out of range; must "
       "be >= 0"},
      {"tabular/iris", "trainer.optimizer_config.learning_rate.constant.learning_rate=0", ""},
      {"tabular/iris", "trainer.optimizer_config.learning_rate.type=exponential",
       "trainer.optimizer_config.learning_rate.exponential.initial_learning_rate: must be set for "
       "learning_rate.type exponential"},
      {"tabular/iris",
       "trainer.optimizer_config.learning_rate.type=exponential,"
       "trainer.optimizer_config.learning_rate.exponential={initial_learning_rate: 0.1, "
       "decay_steps: 100, decay_rate: 0.5}",
       ""},
      {"tabular/iris", "trainer.optimizer_config.learning_rate.exponential.decay_rate=0",
       "trainer.optimizer_config.learning_rate.exponential.decay_rate: 0 is out of range; must be "
       "> 0"},
      {"tabular/iris", "trainer.optimizer_config.learning_rate.exponential.decay_steps=0",
       "trainer.optimizer_config.learning_rate.exponential.decay_steps: 0 is out of range"},
      {"tabular/iris", "trainer.optimizer_config.learning_rate.cosine.alpha=1.5",
       "trainer.optimizer_config.learning_rate.cosine.alpha: 1.5 is out of range; must be in [0, "
       "1]"},
      {"tabular/iris", "trainer.optimizer_config.learning_rate.polynomial.power=-1",
       "trainer.optimizer_config.learning_rate.polynomial.power: -1 is out of range"},
      {"tabular/iris", "trainer.optimizer_config.learning_rate.power.power=-2", ""},
      {"tabular/iris",
       "trainer.optimizer_config.learning_rate.power_linear.linear_decay_fraction=2",
       "trainer.optimizer_config.learning_rate.power_linear.linear_decay_fraction: 2 is out of "
       "range; must be in [0, 1]"},
      {"tabular/iris",
       "trainer.optimizer_config.learning_rate.stepwise={boundaries: [10, 5], values: [1, 2, 3]}",
       "trainer.optimizer_config.learning_rate.stepwise.boundaries[1]: 5 is not above the "
       "boundary before it (10)"},
      {"tabular/iris",
       "trainer.optimizer_config.learning_rate.stepwise={boundaries: [10], values: [0.1, -1]}",
       "trainer.optimizer_config.learning_rate.stepwise.values[1]: -1 is out of range"},
      {"tabular/iris",
       "trainer.optimizer_config.learning_rate.stepwise={boundaries: [10], values: [0.1]}",
       "trainer.optimizer_config.learning_rate.stepwise.values: has 1 entries for 1 boundaries"},
      {"tabular/iris", "trainer.optimizer_config.warmup.type=linear",
       "trainer.optimizer_config.warmup.linear.warmup_steps: must be set for warmup.type linear"},
      {"tabular/iris",
       "trainer.optimizer_config.warmup.type=linear,"
       "trainer.optimizer_config.warmup.linear.warmup_steps=10",
       ""},
      {"tabular/iris", "trainer.optimizer_config.warmup.linear.warmup_learning_rate=-1",
       "trainer.optimizer_config.warmup.linear.warmup_learning_rate: -1 is out of range"},
      {"tabular/iris", "trainer.optimizer_config.warmup.polynomial.power=-1",
       "trainer.optimizer_config.warmup.polynomial.power: -1 is out of range"},
      {"tabular/iris", "trainer.optimizer_config.ema.average_decay=1.5",
       "trainer.optimizer_config.ema.average_decay: 1.5 is out of range; must be in [0, 1]"},
      {"tabular/iris", "trainer.optimizer_config.ema.average_decay=0.999", ""},
      {"tabular/iris", "trainer.optimizer_config.ema.start_step=-1",
       "trainer.optimizer_config.ema.start_step: -1 is out of range"},
  });
}

TEST(ConfigValidationTest, TaskKeys) {
  check({
      {"tabular/iris", "task.differential_privacy_config.clipping_norm=0",
       "task.differential_privacy_config.clipping_norm: 0 is out of range; must be > 0"},
      {"tabular/iris", "task.differential_privacy_config.noise_multiplier=-1",
       "task.differential_privacy_config.noise_multiplier: -1 is out of range"},
      {"tabular/iris", "task.differential_privacy_config.noise_multiplier=1.1", ""},
      {"tabular/iris",
       "task.differential_privacy_config={},trainer.optimizer_config.optimizer.adam.clipnorm=1",
       "trainer.optimizer_config.optimizer.adam.clipnorm: 1 cannot be set together with "
       "task.differential_privacy_config, which does its own clipping"},
      {"tabular/iris", "task.validation_split=1",
       "task.validation_split: 1 is out of range; must be in [0, 1)"},
      {"tabular/iris", "task.validation_split=0.999", ""},
      {"tabular/iris", "task.split_seed=-1", "task.split_seed: -1 is out of range"},
      {"tabular/iris", "task.model.hidden_layer_sizes=[8, 0]",
       "task.model.hidden_layer_sizes[1]: 0 is out of range; must be >= 1"},
      {"tabular/iris", "task.train_data.shuffle_buffer_size=1000",
       "task.train_data.shuffle_buffer_size: 1000 has no effect here: the table is read into "
       "memory and fully shuffled each epoch; leave shuffle_buffer_size at its default"},
      {"tabular/iris", "task.train_data.cache=true",
       "task.train_data.cache: true has no effect here"},
      {"tabular/iris", "task.validation_data.prefetch_buffer_size=2",
       "task.validation_data.prefetch_buffer_size: 2 has no effect here"},
      {"tabular/iris", "task.train_data.cycle_length=2", "task.train_data.cycle_length: 2 has"},
      {"tabular/iris", "task.train_data.file_type=csv", ""},
      {"tabular/iris", "task.train_data.file_type=tsv",
       "task.train_data.file_type: 'tsv' is not csv; this task reads CSV files only"},
      {"wmt_transformer/demo", "task.model.beam_size=0",
       "task.model.beam_size: 0 is out of range; must be >= 1"},
      {"wmt_transformer/demo", "task.model.label_smoothing=1",
       "task.model.label_smoothing: 1 is out of range; must be in [0, 1)"},
      {"wmt_transformer/demo", "task.model.alpha=-1", "task.model.alpha: -1 is out of range"},
      {"wmt_transformer/demo", "task.model.decode_max_length=0",
       "task.model.decode_max_length: 0 is out of range"},
      {"wmt_transformer/demo", "task.model.encoder.norm_epsilon=0",
       "task.model.encoder.norm_epsilon: 0 is out of range; must be > 0"},
      {"wmt_transformer/demo", "task.model.embedding_width=130",
       "task.model.embedding_width: 130 is not divisible by num_attention_heads 4"},
      // The blocks' dropout is the stacks' own (Model Garden's meaning), the
      // embeddings' model.dropout_rate; the two stacks share one rate.
      {"wmt_transformer/demo",
       "task.model.encoder.dropout_rate=0.3,task.model.decoder.dropout_rate=0.3", ""},
      {"wmt_transformer/demo", "task.model.encoder.dropout_rate=0.3",
       "task.model.decoder.dropout_rate: must equal encoder.dropout_rate"},
      {"wmt_transformer/demo", "task.model.encoder.num_attention_heads=8",
       "task.model.decoder.num_attention_heads: must equal encoder.num_attention_heads"},
      {"wmt_transformer/demo", "task.sentencepiece_vocab_size=7",
       "task.sentencepiece_vocab_size: 7 is out of range; must be >= 8"},
  });
}

TEST(ConfigValidationTest, BadRegexesNameTheirKey) {
  check({
      {"tabular/iris",
       "trainer.optimizer_config.optimizer.adamw.exclude_from_weight_decay=[bias, '(unclosed']",
       "trainer.optimizer_config.optimizer.adamw.exclude_from_weight_decay[1]: '(unclosed' is not "
       "a regular expression ("},
      {"tabular/iris", "trainer.optimizer_config.optimizer.adamw.include_in_weight_decay=['[a']",
       "trainer.optimizer_config.optimizer.adamw.include_in_weight_decay[0]: '[a' is not a "
       "regular expression"},
      {"tabular/iris", "trainer.optimizer_config.optimizer.lamb.exclude_from_weight_decay=['*x']",
       "trainer.optimizer_config.optimizer.lamb.exclude_from_weight_decay[0]: '*x' is not"},
      {"tabular/iris",
       "trainer.optimizer_config.optimizer.lamb.exclude_from_layer_adaptation=['a)']",
       "trainer.optimizer_config.optimizer.lamb.exclude_from_layer_adaptation[0]: 'a)' is not"},
      {"tabular/iris",
       "trainer.optimizer_config.optimizer.lamb.exclude_from_layer_adaptation=[LayerNorm, "
       "'bias$']",
       ""},
  });
}

TEST(ConfigValidationTest, SubnormalsAreNumbersAndOverflowIsRefused) {
  auto config = gc::get_experiment_config("tabular/iris");
  gc::apply_override(*config, "trainer.optimizer_config.optimizer.adam.epsilon=1e-320");
  EXPECT_EQ(config->trainer.optimizer_config.optimizer.adam.epsilon, 1e-320);
  EXPECT_GT(config->trainer.optimizer_config.optimizer.adam.epsilon, 0.0);
  EXPECT_EQ(error_of([&] { gc::apply_override(*config, "trainer.loss_upper_bound=1e400"); }),
            "config key 'trainer.loss_upper_bound': 1e400 is beyond the largest float (about "
            "1.8e308) (in --params_override)");
}

// Found by fuzz/params_override_fuzz.cpp: an item with nothing before its
// '=' reached back() of an empty list of key segments.
TEST(ConfigValidationTest, AnOverrideWithoutAKeyIsRefused) {
  auto config = gc::get_experiment_config("tabular/iris");
  EXPECT_EQ(error_of([&] { gc::apply_override(*config, "trainer.train_steps=5,=3"); }),
            "params_override: '=3' has no key before '='");
  EXPECT_EQ(error_of([&] { gc::apply_override(*config, "a=1, =2"); }),
            "params_override: '=2' has no key before '='");
}

// Found by fuzzing: YAML allows a mapping or a list as a key, and reading it
// as a name escaped as yaml-cpp's bare "bad conversion".
TEST(ConfigValidationTest, AKeyThatIsAMappingOrAListIsRefused) {
  auto config = gc::get_experiment_config("tabular/iris");
  EXPECT_EQ(error_of([&] { gc::apply_override(*config, "{ {num_layers=a}: 1 }"); }),
            "a config key at line 1 is a mapping, not a name (in --params_override)");
  EXPECT_EQ(error_of([&] { gc::apply_override(*config, "{trainer: {[1, 2]: 3}}"); }),
            "a config key under 'trainer' at line 1 is a list, not a name (in --params_override)");
}

// ---- the experiment params.yaml records ---------------------------------------

TEST(ConfigValidationTest, AParamsFileRecordsItsExperimentInsideItsChecksum) {
  auto written = gc::get_experiment_config("tabular/iris");
  const std::string text = gc::params_file_text(*written, "tabular/iris");
  const auto newline = text.find('\n');
  const std::string body = text.substr(newline + 1);
  EXPECT_EQ(body, "# experiment: tabular/iris\n" + gc::to_yaml_string(*written));
  EXPECT_EQ(gc::params_file_experiment(text), "tabular/iris");
  // Read back as a config file: the line is a comment, the checksum holds.
  const auto file = (fs::path(::testing::TempDir()) / "garden_recorded_params.yaml").string();
  std::ofstream(file, std::ios::binary) << text;
  auto read = gc::get_experiment_config("tabular/iris");
  gc::apply_file(*read, file);
  EXPECT_EQ(gc::to_yaml_string(*read), gc::to_yaml_string(*written));
  // With the checksum line deleted (an edited file), still read.
  EXPECT_EQ(gc::params_file_experiment(body), "tabular/iris");
  EXPECT_EQ(gc::params_file_experiment(gc::params_file_text(*written)), "");
  EXPECT_EQ(gc::params_file_experiment("task:\n# experiment: x\n"), "");
  EXPECT_EQ(gc::params_file_experiment(""), "");
}

// ---- params.yaml's checksum line ------------------------------------------------

TEST(ConfigValidationTest, AParamsFileCutShortOrChangedOnDiskIsRefusedNamingIt) {
  const auto dir = fs::path(::testing::TempDir()) / "garden_config_checksum";
  fs::create_directories(dir);
  const auto file = (dir / "params.yaml").string();
  auto written = gc::get_experiment_config("tabular/iris");
  gc::apply_override(*written, "trainer.train_steps=77");
  const std::string text = gc::params_file_text(*written);
  // The checksum line, then exactly the YAML, with its length and CRC.
  const auto newline = text.find('\n');
  const std::string yaml = gc::to_yaml_string(*written);
  EXPECT_EQ(text.substr(newline + 1), yaml);
  EXPECT_EQ(text.rfind("# garden params: " + std::to_string(yaml.size()) + " bytes, crc32c ", 0),
            0u)
      << text;
  auto write = [&](const std::string& bytes) { std::ofstream(file, std::ios::binary) << bytes; };

  write(text);
  auto read = gc::get_experiment_config("tabular/iris");
  gc::apply_file(*read, file);
  EXPECT_EQ(gc::to_yaml_string(*read), yaml);

  // Cut at a line boundary: still valid YAML, but not what was written.
  write(text.substr(0, text.rfind('\n', text.size() - 2) + 1));
  const std::string cut = error_of([&] { gc::apply_file(*read, file); });
  EXPECT_EQ(cut.rfind("config file '" + file + "' is damaged: ", 0), 0u) << cut;
  EXPECT_NE(cut.find("(cut short?)"), std::string::npos) << cut;

  // The value in the YAML, not a "77" the checksum line may hold (its CRC
  // depends on the data paths, so on where the repository is checked out).
  std::string flipped = text;
  const std::string steps_key = "train_steps: 77";
  const auto steps_at = flipped.find(steps_key, newline);
  ASSERT_NE(steps_at, std::string::npos) << text;
  flipped[steps_at + steps_key.size() - 2] = '8';
  write(flipped);
  EXPECT_EQ(error_of([&] { gc::apply_file(*read, file); }),
            "config file '" + file +
                "' is damaged: its content does not match the CRC-32C written with it; if you "
                "edited it on purpose, delete its first line");

  // Edited on purpose, the checksum line deleted: taken as it is.
  write(flipped.substr(newline + 1));
  gc::apply_file(*read, file);
  EXPECT_EQ(read->trainer.train_steps, 87);
  fs::remove_all(dir);
}

// ---- duplicate keys -----------------------------------------------------------

TEST(ConfigValidationTest, DuplicateKeysAreRefusedWithTheirLines) {
  const auto dir = fs::path(::testing::TempDir()) / "garden_config_duplicates";
  fs::create_directories(dir);
  const auto file = (dir / "params.yaml").string();
  std::ofstream(file) << "trainer:\n  train_steps: 5\n  steps_per_loop: 5\n  train_steps: 7\n";
  auto config = gc::get_experiment_config("tabular/iris");
  EXPECT_EQ(
      error_of([&] { gc::apply_file(*config, file); }),
      "duplicate config key 'trainer.train_steps' at line 4 (first at line 2) (in " + file + ")");
  std::ofstream(file) << "task: {name: a}\ntrainer: {}\ntask: {name: b}\n";
  EXPECT_EQ(error_of([&] { gc::apply_file(*config, file); }),
            "duplicate config key 'task' at line 3 (first at line 1) (in " + file + ")");
  fs::remove_all(dir);

  EXPECT_EQ(error_of([&] {
              gc::apply_override(*config, "trainer:\n  train_steps: 5\n  train_steps: 7\n");
            }),
            "duplicate config key 'trainer.train_steps' at line 3 (first at line 2) (in "
            "--params_override)");
  EXPECT_EQ(
      error_of([&] { gc::apply_override(*config, "{trainer: {train_steps: 5, train_steps: 7}}"); }),
      "duplicate config key 'trainer.train_steps' at line 1 (first at line 1) (in "
      "--params_override)");
  EXPECT_EQ(
      error_of([&] { gc::apply_override(*config, "trainer.train_steps=5,trainer.train_steps=7"); }),
      "params_override: 'trainer.train_steps' is set twice");
  EXPECT_EQ(error_of([&] {
              gc::apply_override(*config, "trainer={train_steps: 5},trainer.train_steps=7");
            }),
            "params_override: 'trainer.train_steps' is set twice (also by 'trainer')");
  EXPECT_EQ(error_of([&] {
              gc::apply_override(*config, "trainer.train_steps=5,trainer={steps_per_loop: 5}");
            }),
            "params_override: 'trainer' is set twice (also by 'trainer.train_steps')");
  // Different keys under one prefix are no duplicates.
  gc::apply_override(*config, "trainer.train_steps=5,trainer.steps_per_loop=5");
  EXPECT_EQ(config->trainer.train_steps, 5);
}

// ---- compatibility keys ------------------------------------------------------

TEST(ConfigValidationTest, CompatibilityKeysGiveOneWarningAtStart) {
  auto config = gc::get_experiment_config("tabular/iris");
  EXPECT_TRUE(gc::compatibility_warnings(*config).empty());
  gc::apply_override(*config,
                     "runtime.enable_xla=true,runtime.tpu=local,runtime.num_packs=2,"
                     "trainer.optimizer_config.optimizer.adam.name=MyAdam");
  const auto warnings = gc::compatibility_warnings(*config);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0],
            "accepted for Model Garden compatibility, without effect in Garden: "
            "trainer.optimizer_config.optimizer.adam.name (Keras's name for the optimizer; Garden "
            "does not use it), runtime.enable_xla (LibTorch has no XLA), runtime.tpu (no TPU "
            "support), runtime.num_packs (gradients are packed by bucket_cap_mb)");

  // finalize_config logs it once, as a warning.
  const auto log = fs::path(::testing::TempDir()) / "garden_config_compatibility.log";
  fs::remove(log);
  garden::set_log_file(log.string());
  garden::finalize_config(*config);
  garden::set_log_file("");
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  fs::remove(log);
  const std::string logged = text.str();
  const auto at = logged.find(warnings[0]);
  EXPECT_NE(at, std::string::npos) << logged;
  EXPECT_EQ(logged.find(warnings[0], at + 1), std::string::npos) << logged;
}

TEST(ConfigValidationTest, ModelGardenRuntimeKeysLoadWithTheirDefaults) {
  // A Model Garden params.yaml's runtime section, as its RuntimeConfig writes it.
  auto config = gc::get_experiment_config("tabular/iris");
  gc::read_config(*config, YAML::Load(R"(
runtime:
  all_reduce_alg: null
  batchnorm_spatial_persistent: false
  dataset_num_private_threads: null
  default_shard_dim: -1
  distribution_strategy: mirrored
  enable_xla: false
  gpu_thread_mode: null
  loss_scale: null
  mixed_precision_dtype: null
  num_cores_per_replica: 1
  num_gpus: 0
  num_packs: 1
  per_gpu_thread_count: 0
  run_eagerly: false
  task_index: -1
  tpu: null
  tpu_enable_xla_dynamic_padder: null
  use_tpu_mp_strategy: false
  worker_hosts: null
)"));
  EXPECT_EQ(error_of([&] { gc::validate_config(*config); }), "(no error)");
  EXPECT_TRUE(gc::compatibility_warnings(*config).empty());
}

}  // namespace
