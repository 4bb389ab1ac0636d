#include "garden/nlp/tasks/huggingface_export.h"

#include <filesystem>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/staged_directory.h"
#include "garden/core/safetensors.h"
#include "garden/data/tokenizer.h"
#include "garden/nlp/data/marian_tokenizer.h"
#include "garden/nlp/interop/huggingface.h"
#include "garden/nlp/interop/marian.h"
#include "garden/nlp/tasks/electra_task.h"
#include "garden/nlp/tasks/question_answering_task.h"
#include "garden/nlp/tasks/sentence_prediction_task.h"
#include "garden/nlp/tasks/tagging_task.h"
#include "garden/nlp/tasks/translation_task.h"

namespace garden::nlp {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

at::Tensor parameter(Model& model, const std::string& name) {
  const auto parameters = model.named_parameters(/*recurse=*/true);
  const at::Tensor* t = parameters.find(name);
  if (!t) throw Error("the model has no parameter '" + name + "'");
  return t->detach().to(at::kCPU).contiguous();
}

bool projects(const BertEncoderOptions& o) { return o.embedding_width() != o.hidden_size; }

// The encoder under "bert." or "electra.", and the config for it.
HuggingFaceExport encoder_part(Model& model, const BertEncoderOptions& o,
                               const std::string& garden_prefix, const std::string& architecture) {
  const std::string type = projects(o) ? "electra" : "bert";
  HuggingFaceExport out;
  out.config = huggingface_encoder_config(o, type);
  out.config["architectures"] = json::array({architecture});
  out.tensors = garden_encoder_to_huggingface(model, o, garden_prefix, type + ".");
  return out;
}

void add_labels(json& config, const std::vector<std::string>& names, int64_t count) {
  json id2label = json::object(), label2id = json::object();
  for (int64_t i = 0; i < count; ++i) {
    const std::string name = i < static_cast<int64_t>(names.size())
                                 ? names[static_cast<std::size_t>(i)]
                                 : "LABEL_" + std::to_string(i);
    id2label[std::to_string(i)] = name;
    label2id[name] = i;
  }
  config["id2label"] = id2label;
  config["label2id"] = label2id;
}

}  // namespace

HuggingFaceExport huggingface_export(Task& task, Model& model) {
  const config::TaskConfig& params = task.task_config();
  if (auto* translation = dynamic_cast<TranslationTask*>(&task)) {
    auto* transformer = model.as<Seq2SeqTransformerImpl>();
    if (!transformer) throw Error("the translation task needs its Seq2SeqTransformer model");
    const data::Tokenizer& tokenizer = translation->tokenizer();
    const auto* marian = dynamic_cast<const MarianTokenizer*>(&tokenizer);
    // A Garden SentencePiece model gets OPUS-MT's ids: <pad> last.
    const int64_t pad = marian ? marian->marian_pad_id() : tokenizer.vocab_size() - 1;
    const int64_t eos = (tokenizer.eos_id() + pad) % tokenizer.vocab_size();
    HuggingFaceExport out;
    out.config =
        marian_config(transformer->options(), translation->config().model.dropout_rate, pad, eos);
    out.tensors = garden_to_marian(*transformer, pad);
    out.files["generation_config.json"] =
        marian_generation_config(pad, eos, translation->config().model.beam_size).dump(2) + "\n";
    out.files["tokenizer_config.json"] =
        json({{"tokenizer_class", "MarianTokenizer"}, {"model_max_length", 512}}).dump(2) + "\n";
    if (marian) {
      for (const auto& [name, path] : MarianTokenizer::files(marian->dir()))
        out.files[name] = read_file(path, "the tokenizer's " + name);
    } else {
      // One joint SentencePiece model for both sides.
      const std::string model_file =
          read_file(translation->tokenizer_path(), "the SentencePiece model");
      out.files[MarianTokenizer::kSourceSpmFile] = model_file;
      out.files[MarianTokenizer::kTargetSpmFile] = model_file;
      out.files[MarianTokenizer::kVocabFile] = marian_vocab_json(tokenizer);
    }
    out.copy_assets = false;
    return out;
  }
  if (const auto* c = dynamic_cast<const SentencePredictionConfig*>(&params)) {
    const BertEncoderOptions o = c->model.encoder.bert.options();
    if (projects(o))
      throw Error(
          "--format=huggingface: this encoder projects its embeddings (embedding_size " +
          std::to_string(o.embedding_width()) + ", hidden_size " + std::to_string(o.hidden_size) +
          "), so it would be an ELECTRA, whose ElectraForSequenceClassification head computes "
          "gelu where Garden's head (Model Garden's) computes tanh: no Hugging Face "
          "architecture computes this model");
    HuggingFaceExport out = encoder_part(model, o, "encoder.", "BertForSequenceClassification");
    out.tensors.emplace_back("bert.pooler.dense.weight",
                             parameter(model, "classifier.dense.weight"));
    out.tensors.emplace_back("bert.pooler.dense.bias", parameter(model, "classifier.dense.bias"));
    out.tensors.emplace_back("classifier.weight", parameter(model, "classifier.out_proj.weight"));
    out.tensors.emplace_back("classifier.bias", parameter(model, "classifier.out_proj.bias"));
    const int64_t classes = c->model.num_classes;
    add_labels(out.config, c->class_names, classes);
    out.config["problem_type"] = classes == 1 ? "regression" : "single_label_classification";
    return out;
  }
  if (const auto* c = dynamic_cast<const TaggingConfig*>(&params)) {
    const BertEncoderOptions o = c->model.encoder.bert.options();
    const std::string type = projects(o) ? "Electra" : "Bert";
    HuggingFaceExport out = encoder_part(model, o, "encoder.", type + "ForTokenClassification");
    out.tensors.emplace_back("classifier.weight", parameter(model, "classifier.weight"));
    out.tensors.emplace_back("classifier.bias", parameter(model, "classifier.bias"));
    add_labels(out.config, c->class_names, static_cast<int64_t>(c->class_names.size()));
    out.config["classifier_dropout"] = c->model.head_dropout;
    return out;
  }
  if (const auto* c = dynamic_cast<const QuestionAnsweringConfig*>(&params)) {
    const BertEncoderOptions o = c->model.encoder.bert.options();
    const std::string type = projects(o) ? "Electra" : "Bert";
    HuggingFaceExport out = encoder_part(model, o, "encoder.", type + "ForQuestionAnswering");
    out.tensors.emplace_back("qa_outputs.weight", parameter(model, "span_labeling.weight"));
    out.tensors.emplace_back("qa_outputs.bias", parameter(model, "span_labeling.bias"));
    return out;
  }
  if (const auto* c = dynamic_cast<const ElectraPretrainConfig*>(&params)) {
    const ElectraPretrainerOptions o = c->model.options();
    if (o.generator.hidden_activation != o.discriminator.hidden_activation)
      throw Error(
          "--format=huggingface: ElectraForPreTraining's discriminator head computes the "
          "discriminator's hidden_act; Garden's (Model Garden's) computes the generator's "
          "hidden_activation '" +
          o.generator.hidden_activation + "', which differs from '" +
          o.discriminator.hidden_activation + "'");
    HuggingFaceExport out;
    BertEncoderOptions d = o.discriminator;
    out.config = huggingface_encoder_config(d, "electra");
    out.config["architectures"] = json::array({"ElectraForPreTraining"});
    out.tensors = garden_encoder_to_huggingface(model, d, "discriminator.", "electra.");
    out.tensors.emplace_back("discriminator_predictions.dense.weight",
                             parameter(model, "discriminator_projection.weight"));
    out.tensors.emplace_back("discriminator_predictions.dense.bias",
                             parameter(model, "discriminator_projection.bias"));
    out.tensors.emplace_back("discriminator_predictions.dense_prediction.weight",
                             parameter(model, "discriminator_head.weight"));
    out.tensors.emplace_back("discriminator_predictions.dense_prediction.bias",
                             parameter(model, "discriminator_head.bias"));
    return out;
  }
  throw Error("--format=huggingface: task '" + task.name() +
              "' has no Hugging Face architecture in Garden yet (sentence_prediction, tagging, "
              "question_answering, electra and translation export)");
}

void write_huggingface_dir(const HuggingFaceExport& exported,
                           const std::map<std::string, std::string>& assets,
                           const std::string& dir) {
  if (dir.empty()) throw Error("--export_dir is empty");
  std::error_code ec;
  if (fs::exists(dir, ec))
    throw Error("--export_dir '" + dir +
                "' exists; a Hugging Face directory is written whole, "
                "into a new path");
  write_directory_whole(dir, [&](const fs::path& staging) {
    write_file_atomically((staging / "config.json").string(), exported.config.dump(2) + "\n");
    write_safetensors((staging / "model.safetensors").string(), exported.tensors,
                      {{"format", "pt"}});
    for (const auto& [name, contents] : exported.files)
      write_file_atomically((staging / name).string(), contents);
    if (exported.copy_assets)
      for (const auto& [name, path] : assets) {
        const std::string file = name == "sp.model" ? "spiece.model" : name;
        write_file_atomically((staging / file).string(),
                              read_file(path, "the task's asset '" + name + "'"));
      }
  });
}

}  // namespace garden::nlp
