// garden export --format=huggingface: a fine-tuned or pretrained model as
// the Hugging Face architecture that computes the same function, so that
// `AutoModel*.from_pretrained(dir)` in Python loads it unchanged:
//
//   sentence_prediction  BertForSequenceClassification (pooler = the head's
//                        dense layer, classifier = its output layer)
//   tagging              BertForTokenClassification / ElectraForTokenClassification
//   question_answering   BertForQuestionAnswering / ElectraForQuestionAnswering
//   electra (pretraining) ElectraForPreTraining (the discriminator)
//   translation          MarianMTModel (garden/nlp/interop/marian.h), with
//                        MarianTokenizer's files and generation_config.json
//
// ELECTRA's names when the encoder projects its embeddings (embedding_size
// differs from hidden_size), BERT's otherwise. Anything else is refused with
// one line naming what does not map.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "garden/core/task.h"

namespace garden::nlp {

struct HuggingFaceExport {
  nlohmann::json config;                                    // config.json
  std::vector<std::pair<std::string, at::Tensor>> tensors;  // model.safetensors
  std::map<std::string, std::string> files;                 // other files: name -> contents
  // Whether the task's serving assets are copied too (a translation
  // export writes MarianTokenizer's files instead).
  bool copy_assets = true;
};

HuggingFaceExport huggingface_export(Task& task, Model& model);

// Writes `exported` (config.json, model.safetensors, its files) and the
// task's tokenizer assets (vocab.txt; a SentencePiece model as spiece.model) into
// `dir`, which must not exist yet: written beside it, then renamed.
void write_huggingface_dir(const HuggingFaceExport& exported,
                           const std::map<std::string, std::string>& assets,
                           const std::string& dir);

}  // namespace garden::nlp
