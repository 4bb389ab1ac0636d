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

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <typeindex>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "garden/core/task.h"
#include "garden/nlp/modeling/bert_encoder.h"

namespace garden::nlp {

struct HuggingFaceExport {
  nlohmann::json config;                                    // config.json
  std::vector<std::pair<std::string, at::Tensor>> tensors;  // model.safetensors
  std::map<std::string, std::string> files;                 // other files: name -> contents
  // Whether the task's serving assets are copied too (a translation
  // export writes MarianTokenizer's files instead).
  bool copy_assets = true;
};

// A task's model as a Hugging Face directory. Each task that has an
// architecture registers its exporter for its config type (beside its
// register_task); the one for `task`'s config is used, and a task without
// one is refused with one line naming the tasks that export.
using HuggingFaceExporter = std::function<HuggingFaceExport(Task& task, Model& model)>;
void register_huggingface_exporter(std::type_index config_type, const std::string& task_name,
                                   HuggingFaceExporter exporter);
template <class Config>
void register_huggingface_exporter(const std::string& task_name, HuggingFaceExporter exporter) {
  register_huggingface_exporter(std::type_index(typeid(Config)), task_name, std::move(exporter));
}
HuggingFaceExport huggingface_export(Task& task, Model& model);

// What the exporters share.
// The parameter `name` of `model`, detached on the CPU; throws when absent.
at::Tensor huggingface_parameter(Model& model, const std::string& name);
// Whether the encoder projects its embeddings (ELECTRA's names then).
bool encoder_projects(const BertEncoderOptions& options);
// The encoder under "bert." or "electra." (from `garden_prefix` in the
// model), with its config.json naming `architecture`.
HuggingFaceExport huggingface_encoder_export(Model& model, const BertEncoderOptions& options,
                                             const std::string& garden_prefix,
                                             const std::string& architecture);
// tokenizer_config.json for the task's raw-text tokenizer: do_lower_case
// (so that a cased model reads back cased; BertTokenizer's default is true)
// and, for a WordPiece vocabulary, tokenizer_class BertTokenizer.
void add_huggingface_tokenizer_config(HuggingFaceExport& out, const std::string& tokenization,
                                      bool lower_case);
// id2label and label2id for `count` labels (LABEL_<i> past `names`).
void add_huggingface_labels(nlohmann::json& config, const std::vector<std::string>& names,
                            int64_t count);

// Writes `exported` (config.json, model.safetensors, its files) and the
// task's tokenizer assets (vocab.txt; a SentencePiece model as spiece.model) into
// `dir`, which must not exist yet: written beside it, then renamed.
void write_huggingface_dir(const HuggingFaceExport& exported,
                           const std::map<std::string, std::string>& assets,
                           const std::string& dir);

}  // namespace garden::nlp
