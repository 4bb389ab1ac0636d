// The registered tabular experiments: tabular/classification (no input set)
// and tabular/iris (the bundled demo).
#include "garden/tabular/classification_experiments.h"

#include <memory>

#include "garden/base/paths.h"
#include "garden/config/registry.h"
#include "garden/tabular/classification.h"
#include "garden/tabular/classification_serving.h"

namespace garden::tabular {

namespace {
std::shared_ptr<config::ExperimentConfig> iris_experiment() {
  auto experiment = std::make_shared<config::ExperimentConfig>();
  auto task = std::make_shared<TabularClassificationConfig>();
  task->name = "iris";
  task->label_column = "label";
  task->validation_split = 0.2;
  task->split_seed = 1;
  task->model.hidden_layer_sizes = {32, 32};
  task->model.dropout_rate = 0.1;
  task->train_data.input_path = bundled_data_path("iris/iris.csv");
  task->train_data.global_batch_size = 16;
  task->train_data.is_training = true;
  task->validation_data.global_batch_size = 32;
  task->validation_data.is_training = false;
  task->validation_data.drop_remainder = false;
  experiment->task = task;
  auto& trainer = experiment->trainer;
  trainer.train_steps = 400;
  trainer.steps_per_loop = 50;
  trainer.summary_interval = 50;
  trainer.checkpoint_interval = 100;
  trainer.validation_interval = 100;
  trainer.max_to_keep = 3;
  trainer.optimizer_config.optimizer.type = "adam";
  trainer.optimizer_config.learning_rate.type = "constant";
  trainer.optimizer_config.learning_rate.constant.learning_rate = 0.01;
  experiment->runtime.distribution_strategy = "one_device";
  experiment->runtime.seed = 1;
  return experiment;
}

std::shared_ptr<config::ExperimentConfig> classification_experiment() {
  auto experiment = std::make_shared<config::ExperimentConfig>();
  auto task = std::make_shared<TabularClassificationConfig>();
  task->train_data.is_training = true;
  task->train_data.global_batch_size = 32;
  task->validation_data.is_training = false;
  task->validation_data.drop_remainder = false;
  task->validation_data.global_batch_size = 32;
  experiment->task = task;
  // A run that trains out of the box: 1,000 steps of 32 rows, evaluated and
  // checkpointed every 200 (iris's 400 steps are 43 epochs of its 150 rows).
  auto& trainer = experiment->trainer;
  trainer.train_steps = 1000;
  trainer.steps_per_loop = 100;
  trainer.summary_interval = 100;
  trainer.checkpoint_interval = 200;
  trainer.validation_interval = 200;
  trainer.max_to_keep = 3;
  trainer.optimizer_config.optimizer.type = "adam";
  trainer.optimizer_config.learning_rate.constant.learning_rate = 0.001;
  experiment->runtime.distribution_strategy = "one_device";
  return experiment;
}
}  // namespace

void register_tabular() {
  register_task<TabularClassificationConfig, TabularClassificationTask>("tabular/classification");
  register_serving_module<TabularClassificationConfig, TabularClassificationTask,
                          TabularClassificationServing>("tabular/classification");
  config::register_experiment("tabular/classification",
                              "feed-forward classifier for any numeric CSV (set input paths)",
                              classification_experiment);
  config::register_experiment(
      "tabular/iris", "iris species from 4 measurements, bundled data (the demo)", iris_experiment);
}

}  // namespace garden::tabular
