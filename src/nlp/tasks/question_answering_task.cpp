#include "garden/nlp/tasks/question_answering_task.h"

#include <ATen/ATen.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/logging.h"
#include "garden/nlp/interop/huggingface.h"
#include "garden/nlp/metrics/squad_metrics.h"
#include "garden/nlp/tasks/huggingface_export.h"

namespace garden::nlp {

namespace {

constexpr std::string_view kQuestionAnswering = "question answering";

namespace fs = std::filesystem;

// A validation step's outputs: each feature's unique id, and its logits.
constexpr const char* kSquadIds = "squad_unique_ids";
constexpr const char* kSquadLogits = "squad_logits";

// Evaluation's (and serving's) tokenizer: validation_data's vocab_file, else
// train_data's.
TaskTextTokenizer evaluation_tokenizer(const QuestionAnsweringConfig& c) {
  const bool own = !c.validation_data.vocab_file.empty();
  return TaskTextTokenizer(own ? c.validation_data.vocab_file : c.train_data.vocab_file,
                           c.validation_data.tokenization, c.validation_data.do_lower_case,
                           own ? "task.validation_data.vocab_file" : "task.train_data.vocab_file",
                           c.model.encoder.bert.vocab_size);
}

}  // namespace

QuestionAnsweringTask::QuestionAnsweringTask(std::shared_ptr<const QuestionAnsweringConfig> params,
                                             std::string logging_dir)
    : Task(params, std::move(logging_dir)),
      config_(*params),
      text_tokenizer_(evaluation_tokenizer(*params)) {}

QuestionAnsweringTask::~QuestionAnsweringTask() {
  if (temporary_dir_.empty()) return;
  std::error_code ignored;
  fs::remove_all(temporary_dir_, ignored);
}

const FinetuningTokenizer& QuestionAnsweringTask::tokenizer() {
  if (!text_tokenizer_.configured())
    throw Error(
        "task.validation_data.vocab_file is empty: the evaluation tokenizes the SQuAD JSON with "
        "it (vocab.txt or a SentencePiece model)");
  return text_tokenizer_.get();
}

std::vector<SquadFeature> QuestionAnsweringTask::windows(
    const std::vector<SquadExample>& examples) {
  const auto& data = config_.validation_data;
  SquadConversionOptions conversion;
  conversion.max_seq_length = data.seq_length;
  conversion.doc_stride = data.doc_stride;
  conversion.max_query_length = data.query_length;
  return convert_squad_examples(tokenizer(), examples, conversion);
}

SquadPredictions QuestionAnsweringTask::merge_answers(const std::vector<SquadExample>& examples,
                                                      const std::vector<SquadFeature>& windows,
                                                      const std::vector<SquadRawResult>& results) {
  const auto& data = config_.validation_data;
  SquadPostprocessOptions options;
  options.n_best_size = config_.n_best_size;
  options.max_answer_length = config_.max_answer_length;
  options.do_lower_case = data.do_lower_case;
  options.version_2_with_negative = data.version_2_with_negative;
  options.null_score_diff_threshold = config_.null_score_diff_threshold;
  return postprocess_squad(tokenizer(), examples, windows, results, options);
}

DatasetPtr QuestionAnsweringTask::build_inputs(const config::DataConfig& params,
                                               const InputContext& input_context) {
  const auto* data = dynamic_cast<const QADataConfig*>(&params);
  if (!data) throw Error("the question answering task reads QADataConfig data");
  const int64_t vocab_size = config_.model.encoder.bert.vocab_size;
  if (data->is_training.value_or(false))
    return build_squad_inputs(*data, input_context, vocab_size);
  if (data->input_path.empty())
    throw Error("task.validation_data.input_path is empty: name the SQuAD JSON file");
  const SquadReadReport read =
      read_squad_examples(data->input_path, /*is_training=*/false, data->version_2_with_negative);
  eval_features_ = windows(read.examples);
  eval_examples_ = read.examples;
  std::string dir = data->input_preprocessed_data_path;
  if (dir.empty()) {
    if (temporary_dir_.empty()) {
      std::string pattern = (fs::temp_directory_path() / "garden_squad_XXXXXX").string();
      if (!::mkdtemp(pattern.data()))
        throw Error("cannot make a temporary folder for the SQuAD evaluation windows");
      temporary_dir_ = pattern;
    }
    dir = temporary_dir_;
  } else {
    fs::create_directories(dir);
  }
  QADataConfig converted = *data;
  converted.input_path = (fs::path(dir) / "eval.tf_record").string();
  converted.file_type = "tfrecord";
  converted.compression_type = "";
  write_squad_records(eval_features_, /*is_training=*/false, converted.input_path);
  log_info() << "SQuAD evaluation: " << eval_examples_.size() << " questions in "
             << eval_features_.size() << " windows of " << data->seq_length << " tokens";
  return build_squad_inputs(converted, input_context, vocab_size);
}

void QuestionAnsweringTask::initialize(Model& model) {
  // A Hugging Face BERT or ELECTRA directory gives the encoder; anything
  // else is a Garden checkpoint.
  // A *ForQuestionAnswering's qa_outputs is Garden's span_labeling layer,
  // restored with init_checkpoint_modules [all] (or [span_labeling]).
  if (!initialize_from_huggingface(config_, model, config_.model.encoder.bert.options(),
                                   {{"span_labeling.weight", "qa_outputs.weight"},
                                    {"span_labeling.bias", "qa_outputs.bias"}}))
    Task::initialize(model);
}

ModelPtr QuestionAnsweringTask::build_model() {
  text_tokenizer_.check();
  return BertSpanLabeler(config_.model_options()).ptr();
}

Batch QuestionAnsweringTask::call_model(Model& model, const Batch& features, bool) {
  auto [start, end] = model_as<BertSpanLabelerImpl>(model, kQuestionAnswering, "a BertSpanLabeler")
                          .forward(batch_tensor(features, "input_word_ids", kQuestionAnswering),
                                   batch_tensor(features, "input_mask", kQuestionAnswering),
                                   batch_tensor(features, "input_type_ids", kQuestionAnswering));
  return {{"start_logits", start}, {"end_logits", end}};
}

Losses QuestionAnsweringTask::build_losses(const Batch& labels, const Batch& model_outputs,
                                           const at::Tensor& aux_losses) {
  const auto part = [&](const char* logits, const char* positions) {
    return at::cross_entropy_loss(
        batch_tensor(model_outputs, logits, kQuestionAnswering).to(at::kFloat),
        batch_tensor(labels, positions, kQuestionAnswering).reshape(-1).to(at::kLong));
  };
  const at::Tensor loss =
      (part("start_logits", "start_positions") + part("end_logits", "end_positions")) / 2;
  Losses losses;
  losses.add(kLoss, loss,
             at::scalar_tensor(static_cast<double>(
                 batch_tensor(labels, "start_positions", kQuestionAnswering).numel())));
  losses.add_aux(aux_losses);
  return losses;
}

MetricList QuestionAnsweringTask::build_metrics(bool) {
  return {std::make_shared<SparseCategoricalAccuracy>(
              "start_position_accuracy", MetricInputs{"start_positions", "start_logits", ""}),
          std::make_shared<SparseCategoricalAccuracy>(
              "end_position_accuracy", MetricInputs{"end_positions", "end_logits", ""})};
}

void QuestionAnsweringTask::add_validation_outputs(const Batch& inputs, const Batch& outputs,
                                                   Logs& logs) {
  const at::Tensor ids =
      batch_tensor(inputs, "unique_ids", kQuestionAnswering).reshape(-1).to(at::kCPU, at::kLong);
  const at::Tensor start = outputs.at("start_logits").to(at::kCPU, at::kFloat).contiguous();
  const at::Tensor end = outputs.at("end_logits").to(at::kCPU, at::kFloat).contiguous();
  const auto id_at = ids.accessor<int64_t, 1>();
  const auto start_at = start.accessor<float, 2>();
  const auto end_at = end.accessor<float, 2>();
  // Per feature: its unique id, and its start logits then its end logits.
  IdRows id_rows;
  ValueRows logit_rows;
  for (int64_t b = 0; b < ids.size(0); ++b) {
    id_rows.push_back({id_at[b]});
    std::vector<double> row;
    for (int64_t t = 0; t < start.size(1); ++t) row.push_back(start_at[b][t]);
    for (int64_t t = 0; t < end.size(1); ++t) row.push_back(end_at[b][t]);
    logit_rows.push_back(std::move(row));
  }
  logs[kSquadIds] = std::move(id_rows);
  logs[kSquadLogits] = std::move(logit_rows);
}

Logs QuestionAnsweringTask::reduce_aggregated_logs(const Logs& aggregated_logs, int64_t) {
  Logs logs;
  const auto ids_it = aggregated_logs.find(kSquadIds);
  const auto logits_it = aggregated_logs.find(kSquadLogits);
  if (ids_it == aggregated_logs.end() || logits_it == aggregated_logs.end()) return logs;
  const auto& id_rows = std::get<IdRows>(ids_it->second);
  const auto& logit_rows = std::get<ValueRows>(logits_it->second);
  if (id_rows.size() != logit_rows.size())
    throw Error("question answering: " + std::to_string(logit_rows.size()) + " logit rows for " +
                std::to_string(id_rows.size()) + " unique ids");
  std::vector<SquadRawResult> results;
  for (std::size_t i = 0; i < id_rows.size(); ++i) {
    const auto& row = logit_rows[i];
    if (id_rows[i].size() != 1 || row.size() % 2 != 0)
      throw Error("question answering: a raw result of " + std::to_string(id_rows[i].size()) +
                  " ids and " + std::to_string(row.size()) + " logits");
    SquadRawResult r;
    r.unique_id = id_rows[i][0];
    const std::size_t length = row.size() / 2;
    for (std::size_t t = 0; t < length; ++t) {
      r.start_logits.push_back(static_cast<float>(row[t]));
      r.end_logits.push_back(static_cast<float>(row[length + t]));
    }
    results.push_back(std::move(r));
  }
  const auto& data = config_.validation_data;
  const SquadPredictions predictions = merge_answers(eval_examples_, eval_features_, results);
  std::map<std::string, std::vector<std::string>> truths;
  for (const auto& example : eval_examples_) truths[example.qas_id] = example.answers;
  const SquadScores scores =
      evaluate_squad(truths, predictions.answers, data.version_2_with_negative);
  logs["exact_match"] = scores.exact_match / 100.0;
  logs["final_f1"] = scores.f1 / 100.0;
  if (!logging_dir().empty()) {
    fs::create_directories(logging_dir());
    write_file_atomically((fs::path(logging_dir()) / "predictions.json").string(),
                          nlohmann::json(predictions.answers).dump(2) + "\n");
  }
  return logs;
}

HuggingFaceExport QuestionAnsweringTask::to_huggingface(Task& task, Model& model) {
  const auto* c = &dynamic_cast<const QuestionAnsweringConfig&>(task.task_config());
  const BertEncoderOptions o = c->model.encoder.bert.options();
  const std::string type = encoder_projects(o) ? "Electra" : "Bert";
  HuggingFaceExport out =
      huggingface_encoder_export(model, o, "encoder.", type + "ForQuestionAnswering");
  out.tensors.emplace_back("qa_outputs.weight",
                           huggingface_parameter(model, "span_labeling.weight"));
  out.tensors.emplace_back("qa_outputs.bias", huggingface_parameter(model, "span_labeling.bias"));
  add_huggingface_tokenizer_config(out, c->validation_data.tokenization,
                                   c->validation_data.do_lower_case);
  return out;
}

}  // namespace garden::nlp
