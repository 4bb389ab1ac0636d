// Serving the translation task (garden/core/serving_module.h): "inputs", a
// source sentence (DT_STRING) -> "outputs", its translation by beam search
// (DT_STRING). The SentencePiece model is the export's asset
// "sentencepiece.model" (a MarianMT tokenizer: the assets "vocab.json",
// "source.spm" and "target.spm"). --int8 runs every dense layer and the
// output projection in int8 (garden/nlp/int8.h).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "garden/core/serving_module.h"

namespace garden::nlp {

class TranslationTask;

class TranslationServing : public ServingModule {
 public:
  explicit TranslationServing(TranslationTask& task);

  ServingSignature signature() override;
  std::map<std::string, std::string> assets() override;
  void prepare(const nlohmann::json& task_metadata,
               const std::map<std::string, std::string>& assets) override;
  Batch inputs(const std::vector<nlohmann::json>& instances) override;
  std::vector<nlohmann::json> outputs(const Batch& outputs, std::size_t count) override;
  void use_int8(Model& model) override;

 private:
  TranslationTask& translation_;
};

}  // namespace garden::nlp
