#include "regularized_classification.h"

#include <algorithm>

#include <garden/base/error.h>
#include <garden/fx/models.h>
#include <torch/torch.h>

namespace example {

namespace fx = garden::fx;

void RegularizedClassificationArguments::init_parser(fx::ArgumentParser& parser) {
  fx::ModelArguments::init_parser(parser);  // --data-*, --output, --max-steps, ...
  parser.add("--learning-rate", &learning_rate, "Adam's learning rate (default 0.01)");
  parser.add("--hidden-units", &hidden_units, "Units of the hidden layer (default 0: none)");
  parser.add("--dropout", &dropout, "Dropout rate before the logits while training (default 0)");
  parser.add("--l2", &l2, "Weight of the L2 penalty on the weights (default 0)");
}

void RegularizedClassificationArguments::process() {
  fx::ModelArguments::process();
  if (!(learning_rate > 0)) throw garden::Error("argument --learning-rate must be > 0");
  if (hidden_units < 0) throw garden::Error("argument --hidden-units must be >= 0");
  if (!(dropout >= 0 && dropout < 1)) throw garden::Error("argument --dropout must be in [0, 1)");
  if (!(l2 >= 0)) throw garden::Error("argument --l2 must be >= 0");
}

RegularizedClassification::RegularizedClassification(std::shared_ptr<fx::ModelArguments> args)
    : fx::ModelBuilder(std::move(args)) {
  if (!dynamic_cast<const RegularizedClassificationArguments*>(args_.get()))
    throw garden::Error("RegularizedClassification needs RegularizedClassificationArguments");
}

const RegularizedClassificationArguments& RegularizedClassification::my_args() const {
  return static_cast<const RegularizedClassificationArguments&>(*args_);
}

void RegularizedClassification::build_init() {
  // The data set is known here: the input width and the labels.
  const fx::DataSet& data = dataset();
  const fx::FeatureSet* features = data.features();
  if (!features || !features->find("X") || !features->find("Y"))
    throw garden::Error("regularized_classification reads features X and Y (--data-features)");
  labels_ = data.metadata().entries(features->find("Y")->fields.front());
  if (labels_.empty()) throw garden::Error("the target Y has no entries in the metadata");
  module_ = std::make_shared<torch::nn::Module>();
  int64_t width = data.transformer().width("X");
  if (my_args().hidden_units > 0) {
    hidden_ = module_->register_module("hidden", torch::nn::Linear(width, my_args().hidden_units));
    width = my_args().hidden_units;
  }
  dropout_ = module_->register_module("dropout", torch::nn::Dropout(my_args().dropout));
  logits_ = module_->register_module(
      "logits", torch::nn::Linear(width, static_cast<int64_t>(labels_.size())));
}

fx::Values RegularizedClassification::build_inference(const fx::Transformed& inputs, bool) {
  // module().train() / eval() (set by the trainer) switches the dropout.
  at::Tensor x = inputs.tensors.at("X");
  if (hidden_) x = torch::relu(hidden_->forward(x));
  return {{{"logits", logits_->forward(dropout_->forward(x))}}, {}};
}

at::Tensor RegularizedClassification::targets(const fx::Transformed& inputs) const {
  std::vector<int64_t> indices;
  for (const auto& label : inputs.strings.at("Y")) {
    const auto at = std::find(labels_.begin(), labels_.end(), label);
    if (at == labels_.end()) throw garden::Error("label '" + label + "' is not in the metadata");
    indices.push_back(at - labels_.begin());
  }
  return torch::tensor(indices, torch::kLong);
}

at::Tensor RegularizedClassification::build_training(int64_t, const fx::Transformed& inputs,
                                                     const fx::Values& inferences) {
  at::Tensor loss =
      torch::nn::functional::cross_entropy(inferences.tensors.at("logits"), targets(inputs));
  if (my_args().l2 > 0) {
    for (const auto& item : module_->named_parameters())
      if (item.key().find("weight") != std::string::npos)
        loss = loss + my_args().l2 * item.value().pow(2).sum();
  }
  return loss;
}

fx::Values RegularizedClassification::build_output(const fx::Transformed&,
                                                   const fx::Values& inferences) {
  const at::Tensor logits = inferences.tensors.at("logits");
  fx::Values outputs;
  outputs.tensors["scores"] = torch::softmax(logits, 1);
  const at::Tensor best = logits.argmax(1);
  for (int64_t r = 0; r < best.size(0); ++r)
    outputs.strings["label"].push_back(labels_.at(static_cast<size_t>(best[r].item<int64_t>())));
  return outputs;
}

fx::EvaluationValue RegularizedClassification::build_evaluation(const fx::Transformed& inputs,
                                                                const fx::Values& outputs) {
  const auto& predicted = outputs.strings.at("label");
  const auto& expected = inputs.strings.at("Y");
  fx::EvaluationValue value;  // accuracy, as a streaming mean
  for (size_t i = 0; i < predicted.size(); ++i) value.sum += predicted[i] == expected[i];
  value.count = static_cast<double>(predicted.size());
  return value;
}

garden::config::OptimizationConfig RegularizedClassification::build_optimizer_config() {
  // Any of Garden's optimizers and schedules; parameter servers build the
  // same one over their shards.
  garden::config::OptimizationConfig config;
  config.optimizer.type = "adam";
  config.learning_rate.type = "constant";
  config.learning_rate.constant.learning_rate = my_args().learning_rate;
  return config;
}

void register_regularized_classification() {
  fx::register_model(
      "regularized_classification",
      {[](const std::vector<std::string>& args) -> std::shared_ptr<fx::ModelArguments> {
         return fx::ModelArguments::parse<RegularizedClassificationArguments>(args);
       },
       [](std::shared_ptr<fx::ModelArguments> args) -> std::unique_ptr<fx::ModelBuilder> {
         return std::make_unique<RegularizedClassification>(std::move(args));
       }});
}

}  // namespace example
