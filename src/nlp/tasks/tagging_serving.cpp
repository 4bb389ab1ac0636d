#include "garden/nlp/tasks/tagging_serving.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <sstream>

#include "garden/base/error.h"
#include "garden/nlp/data/tagging_data.h"
#include "garden/nlp/tasks/tagging_task.h"

namespace garden::nlp {

TaggingServing::TaggingServing(TaggingTask& task)
    : ServingModule(task), tagging_(task), config_(task.config()) {}

ServingSignature TaggingServing::signature() {
  if (!tagging_.text_tokenizer().configured())
    throw Error("the tagging task serves raw text: set task.train_data.vocab_file");
  return {{{"sentence", {"DT_STRING", {}}}}, {{"labels", {"DT_STRING", {-1}}}}};
}

std::map<std::string, std::string> TaggingServing::assets() {
  return tagging_.text_tokenizer().assets();
}

void TaggingServing::prepare(const nlohmann::json& task_metadata,
                             const std::map<std::string, std::string>& assets) {
  tagging_.text_tokenizer().use_assets(assets);
  ServingModule::prepare(task_metadata, assets);
}

Batch TaggingServing::inputs(const std::vector<nlohmann::json>& instances) {
  const int64_t max_length = std::min(config_.validation_data.seq_length,
                                      config_.model.encoder.bert.max_position_embeddings);
  std::vector<TaggingFeatures> rows;
  std::vector<std::vector<int64_t>> word_positions;
  int64_t longest = 1, most_words = 1;
  for (std::size_t i = 0; i < instances.size(); ++i) {
    const std::string where = "instance " + std::to_string(i);
    const auto it = instances[i].find("sentence");
    if (it == instances[i].end()) throw InputError(where + " has no input 'sentence'");
    if (!it->is_string())
      throw InputError(where + ": input 'sentence' must be a string, not " +
                       std::string(it->type_name()));
    TaggingExample example;
    std::istringstream words(it->get<std::string>());
    for (std::string word; words >> word;) {
      example.words.push_back(word);
      example.label_ids.push_back(0);
    }
    if (example.words.empty()) throw InputError(where + ": input 'sentence' has no word");
    auto parts = encode_tagging_example(tagging_.tokenizer(), example, max_length);
    if (parts.size() > 1)
      throw InputError(where + " is longer than the model's " + std::to_string(max_length) +
                       " tokens");
    // The first piece of each word carries its label id (0 here).
    std::vector<int64_t> positions;
    for (int64_t t = 0; t < max_length; ++t)
      if (parts[0].label_ids[static_cast<std::size_t>(t)] >= 0) positions.push_back(t);
    int64_t used = 0;
    for (int64_t t = 0; t < max_length; ++t)
      if (parts[0].input_mask[static_cast<std::size_t>(t)]) used = t + 1;
    longest = std::max(longest, used);
    most_words = std::max<int64_t>(most_words, static_cast<int64_t>(positions.size()));
    rows.push_back(std::move(parts[0]));
    word_positions.push_back(std::move(positions));
  }
  const auto batch = static_cast<int64_t>(rows.size());
  at::Tensor ids = at::zeros({batch, longest}, at::kLong);
  at::Tensor mask = at::zeros({batch, longest}, at::kLong);
  at::Tensor positions = at::full({batch, most_words}, -1, at::kLong);
  for (int64_t b = 0; b < batch; ++b) {
    const auto& row = rows[static_cast<std::size_t>(b)];
    std::copy(row.input_ids.begin(), row.input_ids.begin() + longest,
              ids.data_ptr<int64_t>() + b * longest);
    std::copy(row.input_mask.begin(), row.input_mask.begin() + longest,
              mask.data_ptr<int64_t>() + b * longest);
    const auto& p = word_positions[static_cast<std::size_t>(b)];
    std::copy(p.begin(), p.end(), positions.data_ptr<int64_t>() + b * most_words);
  }
  return {{"input_word_ids", ids},
          {"input_mask", mask},
          {"input_type_ids", at::zeros({batch, longest}, at::kLong)},
          {"word_positions", positions}};
}

std::vector<nlohmann::json> TaggingServing::outputs(const Batch& outputs, std::size_t count) {
  const at::Tensor predictions = outputs.at("predictions").to(at::kCPU, at::kLong).contiguous();
  const at::Tensor positions = outputs.at("word_positions").to(at::kCPU, at::kLong).contiguous();
  const auto predicted_at = predictions.accessor<int64_t, 2>();
  const auto position_at = positions.accessor<int64_t, 2>();
  std::vector<nlohmann::json> rows;
  for (std::size_t i = 0; i < count; ++i) {
    const auto b = static_cast<int64_t>(i);
    std::vector<std::string> labels;
    for (int64_t w = 0; w < positions.size(1); ++w) {
      const int64_t t = position_at[b][w];
      if (t < 0) break;
      labels.push_back(config_.class_names.at(static_cast<std::size_t>(predicted_at[b][t])));
    }
    rows.push_back({{"labels", labels}});
  }
  return rows;
}

}  // namespace garden::nlp
