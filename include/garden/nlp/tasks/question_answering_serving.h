// Serving the question answering task (garden/core/serving_module.h; needs
// a vocab_file, which travels in the export): `question` and `context`, raw
// text -> `answer`, its place in the context (`start`, `end`: characters,
// end exclusive) and its `score`. A context longer than one window is cut
// into windows as the evaluation cuts a paragraph, and their logits are
// merged by the evaluation's own code (QuestionAnsweringTask::windows and
// merge_answers): the answer is the one predictions.json would hold.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "garden/core/serving_module.h"
#include "garden/nlp/data/squad_data.h"

namespace garden::nlp {

class QuestionAnsweringTask;

class QuestionAnsweringServing : public ServingModule {
 public:
  explicit QuestionAnsweringServing(QuestionAnsweringTask& task);

  ServingSignature signature() override;
  std::map<std::string, std::string> assets() override;
  void prepare(const nlohmann::json& task_metadata,
               const std::map<std::string, std::string>& assets) override;
  // The windows of every instance, in order, each of seq_length tokens.
  Batch inputs(const std::vector<nlohmann::json>& instances) override;
  // Refused: the rows are windows, several per instance; predict() maps
  // them back.
  std::vector<nlohmann::json> outputs(const Batch& outputs, std::size_t count) override;
  // Every instance's windows in one pass of the model, merged into one
  // answer per instance.
  std::vector<nlohmann::json> predict(const std::vector<nlohmann::json>& instances,
                                      const RunModel& run_model) override;

 private:
  struct Windows {
    std::vector<SquadExample> questions;  // one per instance; its id is its index
    std::vector<SquadFeature> features;   // the windows, instance by instance
    Batch batch;
  };
  Windows windows(const std::vector<nlohmann::json>& instances);

  QuestionAnsweringTask& qa_;
};

}  // namespace garden::nlp
