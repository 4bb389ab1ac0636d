#include "garden/fx/models.h"

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <mutex>

#include "garden/base/error.h"
#include "garden/config/optimization.h"

namespace garden::fx {

// ---- FeedForwardClassificationArguments ------------------------------------------------

void FeedForwardClassificationArguments::init_parser(ArgumentParser& parser) {
  ModelArguments::init_parser(parser);
  parser.add("--learning-rate", &learning_rate, "Gradient descent's learning rate (default 0.01)");
  parser.add_indexed(
      "--hidden-layers", &hidden_layer_units,
      "Units of hidden layer N (1-based): --hidden-layers:1 20 --hidden-layers:2 10");
}

void FeedForwardClassificationArguments::process() {
  ModelArguments::process();
  if (!(learning_rate > 0))
    throw Error("argument --learning-rate: " + std::to_string(learning_rate) + " must be > 0");
  hidden_layers.clear();
  for (std::size_t i = 0; i < hidden_layer_units.size(); ++i) {
    if (!hidden_layer_units[i])
      throw Error("argument --hidden-layers:" + std::to_string(i + 1) +
                  " is missing (layers are numbered from 1 without gaps)");
    if (*hidden_layer_units[i] < 1)
      throw Error("argument --hidden-layers:" + std::to_string(i + 1) + ": " +
                  std::to_string(*hidden_layer_units[i]) + " units; a layer needs at least 1");
    hidden_layers.push_back({"layer_" + std::to_string(i), *hidden_layer_units[i], "relu"});
  }
}

// ---- FeedForwardClassification -------------------------------------------------------------

FeedForwardClassification::FeedForwardClassification(std::shared_ptr<ModelArguments> args)
    : ModelBuilder(std::move(args)) {
  if (!dynamic_cast<const FeedForwardClassificationArguments*>(args_.get()))
    throw Error("FeedForwardClassification needs FeedForwardClassificationArguments");
}

const FeedForwardClassificationArguments& FeedForwardClassification::ff_args() const {
  return static_cast<const FeedForwardClassificationArguments&>(*args_);
}

namespace {
// TensorFlow's truncated_normal: N(0, stddev^2), values beyond two standard
// deviations drawn again.
void truncated_normal_(at::Tensor tensor, double stddev) {
  torch::NoGradGuard no_grad;
  tensor.normal_(0.0, stddev);
  for (at::Tensor outside = tensor.abs() > 2 * stddev; outside.any().item<bool>();
       outside = tensor.abs() > 2 * stddev)
    tensor.masked_scatter_(outside, torch::randn({outside.sum().item<int64_t>()}) * stddev);
}
}  // namespace

void FeedForwardClassification::build_init() {
  const DataSet& data = dataset();
  const FeatureSet* features = data.features();
  if (!features || !features->find("X"))
    throw Error("FeedForwardClassification reads the feature named X (the model's inputs); " +
                (features ? features->source() : std::string("the data set (no --data-features)")) +
                " has none");
  const Feature* target = features->find("Y");
  if (!target || target->type != FeatureType::kTarget)
    throw Error("FeedForwardClassification predicts the target feature named Y; " +
                features->source() + " has none (- name: Y, type: target, fields: ...)");
  const SchemaField* field = data.schema().find(target->fields.front());
  if (!field || field->numeric())
    throw Error("FeedForwardClassification needs a discrete target; " + features->source() +
                " feature Y reads field '" + target->fields.front() + "', which is not discrete");
  labels_ = data.metadata().entries(field->name);
  module_ = std::make_shared<torch::nn::Module>();
  int64_t width = data.transformer().width("X");
  std::vector<std::pair<std::string, int64_t>> sizes;
  for (const auto& layer : ff_args().hidden_layers) sizes.emplace_back(layer.name, layer.units);
  sizes.emplace_back("logits", static_cast<int64_t>(labels_.size()));
  layers_.clear();
  for (const auto& [name, units] : sizes) {
    torch::nn::Linear linear(width, units);
    truncated_normal_(linear->weight, 1.0 / std::sqrt(static_cast<double>(width)));
    torch::NoGradGuard no_grad;
    linear->bias.zero_();
    layers_.push_back(module_->register_module(name, linear));
    width = units;
  }
}

Values FeedForwardClassification::build_inference(const Transformed& inputs, bool) {
  const auto it = inputs.tensors.find("X");
  if (it == inputs.tensors.end()) throw Error("the inputs have no feature X");
  at::Tensor x = it->second;
  for (std::size_t i = 0; i + 1 < layers_.size(); ++i) x = torch::relu(layers_[i]->forward(x));
  return {{{"logits", layers_.back()->forward(x)}}, {}};
}

at::Tensor FeedForwardClassification::label_indices(const Transformed& inputs) const {
  const auto it = inputs.strings.find("Y");
  if (it == inputs.strings.end()) throw Error("the inputs have no target feature Y");
  std::vector<int64_t> indices;
  for (const auto& label : it->second) {
    const auto at = std::find(labels_.begin(), labels_.end(), label);
    if (at == labels_.end()) {
      std::string list;
      for (const auto& l : labels_) list += (list.empty() ? "" : ", ") + l;
      throw Error("target label '" + label + "' is not in " + dataset().metadata().source() +
                  " (entries of field '" + dataset().features()->find("Y")->fields.front() +
                  "': " + list + ")");
    }
    indices.push_back(at - labels_.begin());
  }
  return torch::tensor(indices, torch::kLong);
}

at::Tensor FeedForwardClassification::build_training(int64_t, const Transformed& inputs,
                                                     const Values& inferences) {
  return torch::nn::functional::cross_entropy(inferences.tensors.at("logits"),
                                              label_indices(inputs));
}

Values FeedForwardClassification::build_output(const Transformed&, const Values& inferences) {
  const at::Tensor logits = inferences.tensors.at("logits");
  Values outputs;
  outputs.tensors["scores"] = torch::softmax(logits, 1);
  const at::Tensor best = logits.argmax(1);
  auto& labels = outputs.strings["label"];
  for (int64_t r = 0; r < best.size(0); ++r)
    labels.push_back(labels_[static_cast<std::size_t>(best[r].item<int64_t>())]);
  return outputs;
}

EvaluationValue FeedForwardClassification::build_evaluation(const Transformed& inputs,
                                                            const Values& outputs) {
  const auto& predicted = outputs.strings.at("label");
  const auto& expected = inputs.strings.at("Y");
  EvaluationValue value;
  for (std::size_t i = 0; i < predicted.size(); ++i) value.sum += predicted[i] == expected[i];
  value.count = static_cast<double>(predicted.size());
  return value;
}

config::OptimizationConfig FeedForwardClassification::build_optimizer_config() {
  // tf.train.GradientDescentOptimizer(learning_rate).
  config::OptimizationConfig config;
  config.optimizer.type = "sgd";
  config.learning_rate.type = "constant";
  config.learning_rate.constant.learning_rate = ff_args().learning_rate;
  return config;
}

// ---- registry -----------------------------------------------------------------------------

namespace {
std::map<std::string, ModelType>& registry() {
  static std::map<std::string, ModelType> types = [] {
    std::map<std::string, ModelType> builtin;
    builtin["feedforward_classification"] = {
        [](const std::vector<std::string>& args) -> std::shared_ptr<ModelArguments> {
          return ModelArguments::parse<FeedForwardClassificationArguments>(args);
        },
        [](std::shared_ptr<ModelArguments> args) -> std::unique_ptr<ModelBuilder> {
          return std::make_unique<FeedForwardClassification>(std::move(args));
        }};
    return builtin;
  }();
  return types;
}
}  // namespace

void register_model(const std::string& name, ModelType type) {
  if (registry().count(name)) throw Error("fx model '" + name + "' is registered already");
  registry()[name] = std::move(type);
}

const ModelType& model_type(const std::string& name) {
  const auto it = registry().find(name);
  if (it == registry().end()) {
    std::string list;
    for (const auto& [known, type] : registry()) list += (list.empty() ? "" : ", ") + known;
    throw Error("unknown fx model '" + name + "'; the models are: " + list +
                " (register your own with garden::fx::register_model)");
  }
  return it->second;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& [name, type] : registry()) names.push_back(name);
  return names;
}

}  // namespace garden::fx
