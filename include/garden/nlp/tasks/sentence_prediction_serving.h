// Serving the sentence prediction task (garden/core/serving_module.h). With
// train_data.vocab_file: raw text in each of train_data.text_fields (the
// tokenizer travels in the export's assets); without: input_word_ids (and
// input_mask, input_type_ids). Out: probabilities [num_classes] and label
// (its class name when class_names are given, else its index), or
// predictions for regression.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "garden/core/serving_module.h"

namespace garden::nlp {

class SentencePredictionTask;
struct SentencePredictionConfig;

class SentencePredictionServing : public ServingModule {
 public:
  explicit SentencePredictionServing(SentencePredictionTask& task);

  ServingSignature signature() override;
  std::map<std::string, std::string> assets() override;
  void prepare(const nlohmann::json& task_metadata,
               const std::map<std::string, std::string>& assets) override;
  Batch inputs(const std::vector<nlohmann::json>& instances) override;
  std::vector<nlohmann::json> outputs(const Batch& outputs, std::size_t count) override;

 private:
  bool serves_text();

  SentencePredictionTask& prediction_;
  const SentencePredictionConfig& config_;
};

}  // namespace garden::nlp
