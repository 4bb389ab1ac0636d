#include "garden/nlp/tasks/sentence_prediction_serving.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>

#include "garden/base/error.h"
#include "garden/nlp/data/classifier_data.h"
#include "garden/nlp/tasks/sentence_prediction_task.h"

namespace garden::nlp {

SentencePredictionServing::SentencePredictionServing(SentencePredictionTask& task)
    : ServingModule(task), prediction_(task), config_(task.config()) {}

bool SentencePredictionServing::serves_text() { return prediction_.text_tokenizer().configured(); }

ServingSignature SentencePredictionServing::signature() {
  ServingSignature signature;
  if (serves_text()) {
    for (const auto& field : config_.train_data.text_fields)
      signature.inputs.push_back({field, {"DT_STRING", {}}});
  } else {
    for (const char* name : {"input_word_ids", "input_mask", "input_type_ids"})
      signature.inputs.push_back({name, {"DT_INT32", {-1}}});
  }
  if (prediction_.regression()) {
    signature.outputs.push_back({"predictions", {"DT_FLOAT", {}}});
  } else {
    signature.outputs.push_back({"probabilities", {"DT_FLOAT", {config_.model.num_classes}}});
    signature.outputs.push_back(
        {"label", {config_.class_names.empty() ? "DT_INT64" : "DT_STRING", {}}});
  }
  return signature;
}

std::map<std::string, std::string> SentencePredictionServing::assets() {
  return prediction_.text_tokenizer().assets();
}

void SentencePredictionServing::prepare(const nlohmann::json& task_metadata,
                                        const std::map<std::string, std::string>& assets) {
  prediction_.text_tokenizer().use_assets(assets);
  ServingModule::prepare(task_metadata, assets);
}

Batch SentencePredictionServing::inputs(const std::vector<nlohmann::json>& instances) {
  const auto& encoder = config_.model.encoder.bert;
  const int64_t max_length =
      std::min(config_.validation_data.seq_length, encoder.max_position_embeddings);
  std::vector<ClassifierFeatures> rows(instances.size());
  std::vector<int64_t> lengths(instances.size());
  int64_t longest = 1;
  for (std::size_t i = 0; i < instances.size(); ++i) {
    const std::string where = "instance " + std::to_string(i);
    ClassifierFeatures& row = rows[i];
    if (serves_text()) {
      std::vector<std::string> texts;
      for (const auto& field : config_.train_data.text_fields) {
        const auto it = instances[i].find(field);
        if (it == instances[i].end()) throw InputError(where + " has no input '" + field + "'");
        if (!it->is_string())
          throw InputError(where + ": input '" + field + "' must be a string, not " +
                           std::string(it->type_name()));
        texts.push_back(it->get<std::string>());
      }
      const std::optional<std::string> second =
          texts.size() > 1 ? std::optional<std::string>(texts[1]) : std::nullopt;
      row = encode_classifier_input(prediction_.tokenizer(), texts[0], second, max_length);
    } else {
      auto read = [&](const char* name, int64_t bound, std::vector<int64_t>& out) {
        return read_id_list(instances[i], name, bound, where, out);
      };
      if (!read("input_word_ids", encoder.vocab_size, row.input_ids))
        throw InputError(where + " has no input 'input_word_ids'");
      if (row.input_ids.empty()) throw InputError(where + ": input 'input_word_ids' is empty");
      if (static_cast<int64_t>(row.input_ids.size()) > max_length)
        throw InputError(where + " has " + std::to_string(row.input_ids.size()) +
                         " tokens; the model takes " + std::to_string(max_length));
      if (!read("input_mask", 2, row.input_mask)) row.input_mask.assign(row.input_ids.size(), 1);
      if (!read("input_type_ids", encoder.type_vocab_size, row.segment_ids))
        row.segment_ids.assign(row.input_ids.size(), 0);
      if (row.input_mask.size() != row.input_ids.size() ||
          row.segment_ids.size() != row.input_ids.size())
        throw InputError(where + ": input_mask and input_type_ids must be as long as " +
                         "input_word_ids (" + std::to_string(row.input_ids.size()) + ")");
    }
    int64_t used = 0;
    for (std::size_t t = 0; t < row.input_mask.size(); ++t)
      if (row.input_mask[t]) used = static_cast<int64_t>(t) + 1;
    lengths[i] = std::max<int64_t>(used, 1);
    longest = std::max(longest, lengths[i]);
  }
  // Padded to the batch's longest row, not seq_length: the padding is
  // masked out, and shorter batches cost less.
  const auto batch = static_cast<int64_t>(rows.size());
  at::Tensor ids = at::zeros({batch, longest}, at::kLong);
  at::Tensor mask = at::zeros({batch, longest}, at::kLong);
  at::Tensor types = at::zeros({batch, longest}, at::kLong);
  for (int64_t b = 0; b < batch; ++b) {
    const auto& row = rows[static_cast<std::size_t>(b)];
    const auto n = static_cast<std::ptrdiff_t>(std::min<int64_t>(longest, row.input_ids.size()));
    std::copy(row.input_ids.begin(), row.input_ids.begin() + n,
              ids.data_ptr<int64_t>() + b * longest);
    std::copy(row.input_mask.begin(), row.input_mask.begin() + n,
              mask.data_ptr<int64_t>() + b * longest);
    std::copy(row.segment_ids.begin(), row.segment_ids.begin() + n,
              types.data_ptr<int64_t>() + b * longest);
  }
  return {{"input_word_ids", ids}, {"input_mask", mask}, {"input_type_ids", types}};
}

std::vector<nlohmann::json> SentencePredictionServing::outputs(const Batch& outputs,
                                                               std::size_t count) {
  std::vector<nlohmann::json> rows;
  rows.reserve(count);
  if (prediction_.regression()) {
    const at::Tensor predictions = outputs.at("predictions").to(at::kCPU, at::kDouble).contiguous();
    for (std::size_t i = 0; i < count; ++i)
      rows.push_back({{"predictions", predictions.data_ptr<double>()[i]}});
    return rows;
  }
  const at::Tensor probabilities =
      outputs.at("probabilities").to(at::kCPU, at::kDouble).contiguous();
  const int64_t classes = probabilities.size(1);
  for (std::size_t i = 0; i < count; ++i) {
    const double* p = probabilities.data_ptr<double>() + static_cast<int64_t>(i) * classes;
    const auto best = static_cast<int64_t>(std::max_element(p, p + classes) - p);
    nlohmann::json row = {{"probabilities", std::vector<double>(p, p + classes)}};
    if (config_.class_names.empty())
      row["label"] = best;
    else
      row["label"] = config_.class_names[static_cast<std::size_t>(best)];
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace garden::nlp
