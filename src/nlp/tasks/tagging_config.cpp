#include "garden/nlp/tasks/tagging_config.h"

#include "garden/base/error.h"
#include "garden/config/validation.h"
#include "garden/nlp/data/sentence_prediction_data.h"

namespace garden::nlp {

void TaggingModelConfig::visit(config::Visitor& v) {
  v("encoder", encoder, "The encoder a pretraining run's checkpoint fills.");
  v("head_dropout", head_dropout, "Dropout before the per-token dense layer.");
  v("head_initializer_range", head_initializer_range,
    "Stddev of the per-token dense layer's truncated-normal initializer.");
}

void TaggingModelConfig::validate() const {
  config::check_range("head_dropout", head_dropout, config::Range::at_least(0).below(1));
  config::check_range("head_initializer_range", head_initializer_range, config::Range::above(0));
}

TaggingConfig::TaggingConfig() {
  init_checkpoint_modules = config::NameList{{"encoder"}};
  validation_data.is_training = false;
  validation_data.drop_remainder = false;
}

void TaggingConfig::visit_task_fields(config::Visitor& v) {
  v("hub_module_url", hub_module_url, "A TF Hub encoder (not supported: leave empty).");
  v("class_names", class_names,
    "The label of each id, in order (e.g. O, B-PER, I-PER, ...); empty: the label_list of the "
    "meta data beside train_data's records.");
  v("seqeval_mode", seqeval_mode,
    "Entities for precision, recall and f1, as seqeval finds them: default (conlleval's: an I- "
    "after O starts one) or strict (IOB2: only B- starts one).");
  v("layerwise_lr_decay", layerwise_lr_decay,
    "ELECTRA's fine-tuning flag: each encoder layer learns at this factor of the rate of the "
    "layer above it (the embeddings lowest, the task's head at the rate itself); 1: one rate for "
    "all.");
}

namespace {

std::string bracketed(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return "[" + out + "]";
}

}  // namespace

void TaggingConfig::resolve_from_files() {
  const bool from_train = !train_data.input_path.empty();
  const std::string& input_path = from_train ? train_data.input_path : validation_data.input_path;
  const std::string key =
      from_train ? "task.train_data.input_path" : "task.validation_data.input_path";
  if (input_path.empty()) return;
  const auto meta = find_tagging_meta_data(input_path);
  if (!meta) {
    if (class_names.empty())
      throw Error(
          "task.class_names is empty and no tagging meta data (a JSON file with task_type "
          "bert_tagging, as create_finetuning_data writes) is in the folder of " +
          key + " '" + input_path + "': list the label of each id in task.class_names");
    return;
  }
  std::vector<const TaggingMetaData*> all = {&*meta};
  for (const auto& other : meta->others) all.push_back(&other);
  if (class_names.empty()) {
    if (!meta->others.empty())
      throw Error("task.class_names is empty and the folder of " + key +
                  " holds tagging meta data with different label lists: '" + meta->path + "' " +
                  bracketed(meta->label_list) + " and '" + meta->others.front().path + "' " +
                  bracketed(meta->others.front().label_list) + ": set task.class_names");
    class_names = config::NameList(meta->label_list.begin(), meta->label_list.end());
    return;
  }
  for (const auto* m : all)
    if (m->label_list == static_cast<const std::vector<std::string>&>(class_names)) return;
  throw Error("task.class_names " + bracketed(class_names) + " differ from the label_list " +
              bracketed(meta->label_list) + " of the meta data '" + meta->path + "' beside " + key +
              "; leave task.class_names unset to take the meta data's");
}

void TaggingConfig::validate() const {
  config::check_range("layerwise_lr_decay", layerwise_lr_decay,
                     config::Range::above(0.0).at_most(1.0));
  const auto& t = train_data;
  const auto& e = validation_data;
  check_validation_tokenizer_keys(t.vocab_file, t.tokenization, t.lower_case, e.vocab_file,
                                  e.tokenization, e.lower_case);
  if (!hub_module_url.empty())
    config::refuse("hub_module_url", "TF Hub modules are not supported; use init_checkpoint");
  model.encoder.bert.check_fits("train_data", train_data.seq_length);
  model.encoder.bert.check_fits("validation_data", validation_data.seq_length);
  if (seqeval_mode != "default" && seqeval_mode != "strict")
    config::refuse("seqeval_mode", "'" + seqeval_mode + "' is not one of default, strict");
  if (seqeval_mode == "strict")
    for (std::size_t i = 0; i < class_names.size(); ++i) {
      const std::string& name = class_names[i];
      if (name.empty() || (name[0] != 'B' && name[0] != 'I' && name[0] != 'O'))
        config::refuse("class_names", "seqeval_mode strict reads IOB2 tags: class " +
                                          std::to_string(i) + " '" + name +
                                          "' does not start with B, I or O");
    }
}

BertTokenClassifierOptions TaggingConfig::model_options() const {
  BertTokenClassifierOptions o;
  o.encoder = model.encoder.bert.options();
  o.num_classes = static_cast<int64_t>(class_names.size());
  o.dropout_rate = model.head_dropout;
  o.initializer_range = model.head_initializer_range;
  return o;
}

}  // namespace garden::nlp
