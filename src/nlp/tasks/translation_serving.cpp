#include "garden/nlp/tasks/translation_serving.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>

#include "garden/base/error.h"
#include "garden/data/tokenizer.h"
#include "garden/nlp/data/marian_tokenizer.h"
#include "garden/nlp/modeling/transformer.h"
#include "garden/nlp/tasks/translation_task.h"

namespace garden::nlp {

TranslationServing::TranslationServing(TranslationTask& task)
    : ServingModule(task), translation_(task) {}

ServingSignature TranslationServing::signature() {
  return {{{"inputs", {"DT_STRING", {}}}}, {{"outputs", {"DT_STRING", {}}}}};
}

std::map<std::string, std::string> TranslationServing::assets() {
  const std::string path = translation_.tokenizer_path();
  if (!MarianTokenizer::is_marian_dir(path)) return {{TranslationTask::kSentencePieceFile, path}};
  return MarianTokenizer::files(path);
}

void TranslationServing::prepare(const nlohmann::json& task_metadata,
                                 const std::map<std::string, std::string>& assets) {
  const auto vocab = assets.find(MarianTokenizer::kVocabFile);
  const auto it = vocab != assets.end() ? vocab : assets.find(TranslationTask::kSentencePieceFile);
  if (it == assets.end())
    throw Error(std::string("the export has no asset '") + TranslationTask::kSentencePieceFile +
                "'");
  // A MarianMT tokenizer is the folder its three assets are in.
  translation_.use_tokenizer(vocab != assets.end()
                                 ? std::filesystem::path(it->second).parent_path().string()
                                 : it->second);
  ServingModule::prepare(task_metadata, assets);
}

Batch TranslationServing::inputs(const std::vector<nlohmann::json>& instances) {
  const int64_t max_length = translation_.config().validation_data.max_seq_length;
  std::vector<std::vector<int64_t>> rows;
  rows.reserve(instances.size());
  std::size_t longest = 1;
  for (std::size_t i = 0; i < instances.size(); ++i) {
    const auto it = instances[i].find("inputs");
    if (it == instances[i].end())
      throw InputError("instance " + std::to_string(i) + " has no input 'inputs'");
    if (!it->is_string())
      throw InputError("instance " + std::to_string(i) + ": input 'inputs' must be a string, not " +
                       std::string(it->type_name()));
    rows.push_back(translation_.encode_source(it->get<std::string>(), max_length));
    longest = std::max(longest, rows.back().size());
  }
  at::Tensor source = torch::zeros(
      {static_cast<int64_t>(rows.size()), static_cast<int64_t>(longest)}, torch::kLong);
  for (std::size_t b = 0; b < rows.size(); ++b)
    std::copy(rows[b].begin(), rows[b].end(),
              source.data_ptr<int64_t>() + static_cast<int64_t>(b) * source.size(1));
  return {{"inputs", source}};
}

std::vector<nlohmann::json> TranslationServing::outputs(const Batch& outputs, std::size_t count) {
  const at::Tensor ids = outputs.at("outputs").to(torch::kCPU).contiguous();
  const auto& tok = translation_.tokenizer();
  std::vector<nlohmann::json> rows;
  rows.reserve(count);
  for (std::size_t b = 0; b < count; ++b) {
    const int64_t* row = ids.data_ptr<int64_t>() + static_cast<int64_t>(b) * ids.size(1);
    std::vector<int64_t> tokens;
    for (int64_t t = 0; t < ids.size(1) && row[t] != 0; ++t) tokens.push_back(row[t]);
    rows.push_back({{"outputs", tok.decode(tokens)}});
  }
  return rows;
}

void TranslationServing::use_int8(Model& model) {
  TranslationTask::as_transformer(model).use_int8(true);
}

}  // namespace garden::nlp
