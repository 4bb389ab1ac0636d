#include "garden/nlp/tasks/question_answering_serving.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "garden/base/error.h"
#include "garden/nlp/tasks/question_answering_task.h"

namespace garden::nlp {

namespace {

// An instance's input `name`: a string holding more than whitespace.
std::string instance_text(const nlohmann::json& instance, const char* name,
                          const std::string& where) {
  const auto it = instance.find(name);
  if (it == instance.end()) throw InputError(where + " has no input '" + name + "'");
  if (!it->is_string())
    throw InputError(where + ": input '" + name + "' must be a string, not " +
                     std::string(it->type_name()));
  std::string text = it->get<std::string>();
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw InputError(where + ": input '" + name + "' is empty");
  return text;
}

}  // namespace

QuestionAnsweringServing::QuestionAnsweringServing(QuestionAnsweringTask& task)
    : ServingModule(task), qa_(task) {}

ServingSignature QuestionAnsweringServing::signature() {
  if (!qa_.text_tokenizer().configured())
    throw Error(
        "the question answering task serves raw text: set task.validation_data.vocab_file (or "
        "task.train_data.vocab_file)");
  return {{{"question", {"DT_STRING", {}}}, {"context", {"DT_STRING", {}}}},
          {{"answer", {"DT_STRING", {}}},
           {"start", {"DT_INT64", {}}},
           {"end", {"DT_INT64", {}}},
           {"score", {"DT_FLOAT", {}}}}};
}

std::map<std::string, std::string> QuestionAnsweringServing::assets() {
  return qa_.text_tokenizer().assets();
}

void QuestionAnsweringServing::prepare(const nlohmann::json& task_metadata,
                                       const std::map<std::string, std::string>& assets) {
  qa_.text_tokenizer().use_assets(assets);
  ServingModule::prepare(task_metadata, assets);
}

QuestionAnsweringServing::Windows QuestionAnsweringServing::windows(
    const std::vector<nlohmann::json>& instances) {
  Windows w;
  for (std::size_t i = 0; i < instances.size(); ++i) {
    const std::string where = "instance " + std::to_string(i);
    std::string question = instance_text(instances[i], "question", where);
    const std::string context = instance_text(instances[i], "context", where);
    w.questions.push_back(squad_question(std::to_string(i), std::move(question), context));
  }
  w.features = qa_.windows(w.questions);
  // Each window padded to seq_length, as the evaluation's are: the n best
  // starts and ends are drawn from every position's logits, padding's too,
  // so a shorter row could rank other spans.
  const auto rows = static_cast<int64_t>(w.features.size());
  const int64_t length = qa_.config().validation_data.seq_length;
  at::Tensor ids = at::zeros({rows, length}, at::kLong);
  at::Tensor mask = at::zeros({rows, length}, at::kLong);
  at::Tensor types = at::zeros({rows, length}, at::kLong);
  for (int64_t r = 0; r < rows; ++r) {
    const SquadFeature& f = w.features[static_cast<std::size_t>(r)];
    std::copy_n(f.input_ids.begin(), length, ids.data_ptr<int64_t>() + r * length);
    std::copy_n(f.input_mask.begin(), length, mask.data_ptr<int64_t>() + r * length);
    std::copy_n(f.segment_ids.begin(), length, types.data_ptr<int64_t>() + r * length);
  }
  w.batch = {{"input_word_ids", ids}, {"input_mask", mask}, {"input_type_ids", types}};
  return w;
}

Batch QuestionAnsweringServing::inputs(const std::vector<nlohmann::json>& instances) {
  return windows(instances).batch;
}

std::vector<nlohmann::json> QuestionAnsweringServing::outputs(const Batch&, std::size_t) {
  throw Error(
      "question answering maps its windows back to their questions in predict(): a batch's rows "
      "are windows, several per instance");
}

std::vector<nlohmann::json> QuestionAnsweringServing::predict(
    const std::vector<nlohmann::json>& instances, const RunModel& run_model) {
  const Windows w = windows(instances);
  const Batch outputs = run_model(w.batch);
  const at::Tensor start = outputs.at("start_logits").to(at::kCPU, at::kFloat).contiguous();
  const at::Tensor end = outputs.at("end_logits").to(at::kCPU, at::kFloat).contiguous();
  const int64_t length = start.size(1);
  std::vector<SquadRawResult> results;
  for (std::size_t r = 0; r < w.features.size(); ++r) {
    const float* s = start.data_ptr<float>() + static_cast<int64_t>(r) * length;
    const float* e = end.data_ptr<float>() + static_cast<int64_t>(r) * length;
    results.push_back({w.features[r].unique_id, std::vector<float>(s, s + length),
                       std::vector<float>(e, e + length)});
  }
  const SquadPredictions merged = qa_.merge_answers(w.questions, w.features, results);
  std::vector<nlohmann::json> answers;
  for (const SquadExample& question : w.questions) {
    const std::string& text = merged.answers.at(question.qas_id);
    // The n-best entries differ in their text: the answer's is its entry.
    const auto& nbest = merged.nbest.at(question.qas_id);
    const auto entry = std::find_if(nbest.begin(), nbest.end(),
                                    [&](const SquadNbestEntry& n) { return n.text == text; });
    const SquadNbestEntry none;
    const SquadNbestEntry& chosen = entry != nbest.end() ? *entry : none;
    // v2.0's no answer is at 0, as transformers' pipeline places it.
    const bool no_answer = text.empty();
    answers.push_back({{"answer", text},
                       {"start", no_answer ? 0 : chosen.start_char},
                       {"end", no_answer ? 0 : chosen.end_char},
                       {"score", chosen.probability}});
  }
  return answers;
}

}  // namespace garden::nlp
