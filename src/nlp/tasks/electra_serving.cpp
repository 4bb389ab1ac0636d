#include "garden/nlp/tasks/electra_serving.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "garden/base/error.h"
#include "garden/nlp/tasks/electra_task.h"

namespace garden::nlp {

ElectraServing::ElectraServing(ElectraPretrainTask& task)
    : ServingModule(task), config_(task.config()) {}

ServingSignature ElectraServing::signature() {
  const int64_t hidden = config_.model.discriminator_encoder.bert.hidden_size;
  return {{{"input_word_ids", {"DT_INT32", {-1}}},
           {"input_mask", {"DT_INT32", {-1}}},
           {"input_type_ids", {"DT_INT32", {-1}}}},
          {{"sequence_output", {"DT_FLOAT", {-1, hidden}}},
           {"disc_probabilities", {"DT_FLOAT", {-1}}}}};
}

Batch ElectraServing::inputs(const std::vector<nlohmann::json>& instances) {
  const BertEncoderConfig& encoder = config_.model.discriminator_encoder.bert;
  const int64_t longest_allowed =
      std::min(config_.model.sequence_length, encoder.max_position_embeddings);
  struct Row {
    std::vector<int64_t> ids, mask, types;
  };
  std::vector<Row> rows(instances.size());
  int64_t longest = 1;
  for (std::size_t i = 0; i < instances.size(); ++i) {
    const std::string where = "instance " + std::to_string(i);
    auto read = [&](const char* name, int64_t bound, std::vector<int64_t>& out) {
      return read_id_list(instances[i], name, bound, where, out);
    };
    Row& row = rows[i];
    if (!read("input_word_ids", encoder.vocab_size, row.ids))
      throw InputError(where + " has no input 'input_word_ids'");
    const auto length = static_cast<int64_t>(row.ids.size());
    if (length == 0) throw InputError(where + ": input 'input_word_ids' is empty");
    if (length > longest_allowed)
      throw InputError(where + " has " + std::to_string(length) + " tokens; the model takes " +
                       std::to_string(longest_allowed));
    if (!read("input_mask", 2, row.mask)) row.mask.assign(row.ids.size(), 1);
    if (!read("input_type_ids", encoder.type_vocab_size, row.types))
      row.types.assign(row.ids.size(), 0);
    for (const auto* list : {&row.mask, &row.types})
      if (list->size() != row.ids.size())
        throw InputError(where +
                         ": input_mask and input_type_ids must be as long as "
                         "input_word_ids (" +
                         std::to_string(length) + ")");
    longest = std::max(longest, length);
  }
  const auto batch = static_cast<int64_t>(rows.size());
  at::Tensor ids = at::zeros({batch, longest}, at::kLong);
  at::Tensor mask = at::zeros({batch, longest}, at::kLong);
  at::Tensor types = at::zeros({batch, longest}, at::kLong);
  for (int64_t b = 0; b < batch; ++b) {
    const Row& row = rows[static_cast<std::size_t>(b)];
    std::copy(row.ids.begin(), row.ids.end(), ids.data_ptr<int64_t>() + b * longest);
    std::copy(row.mask.begin(), row.mask.end(), mask.data_ptr<int64_t>() + b * longest);
    std::copy(row.types.begin(), row.types.end(), types.data_ptr<int64_t>() + b * longest);
  }
  std::vector<int64_t> lengths;
  for (const Row& row : rows) lengths.push_back(static_cast<int64_t>(row.ids.size()));
  return {{"input_word_ids", ids},
          {"input_mask", mask},
          {"input_type_ids", types},
          {"lengths", at::tensor(lengths, at::kLong)}};
}

std::vector<nlohmann::json> ElectraServing::outputs(const Batch& outputs, std::size_t count) {
  const at::Tensor sequence = outputs.at("sequence_output").to(at::kCPU, at::kDouble).contiguous();
  const at::Tensor probabilities =
      outputs.at("disc_probabilities").to(at::kCPU, at::kDouble).contiguous();
  // Each instance's own length: the padding is left out.
  const at::Tensor lengths = outputs.at("lengths").to(at::kCPU, at::kLong).contiguous();
  const int64_t length = sequence.size(1), hidden = sequence.size(2);
  std::vector<nlohmann::json> rows;
  rows.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const auto b = static_cast<int64_t>(i);
    const int64_t used = std::min(length, lengths.data_ptr<int64_t>()[b]);
    nlohmann::json seq = nlohmann::json::array();
    for (int64_t t = 0; t < used; ++t) {
      const double* h = sequence.data_ptr<double>() + (b * length + t) * hidden;
      seq.push_back(std::vector<double>(h, h + hidden));
    }
    const double* p = probabilities.data_ptr<double>() + b * length;
    rows.push_back({{"sequence_output", std::move(seq)},
                    {"disc_probabilities", std::vector<double>(p, p + used)}});
  }
  return rows;
}

}  // namespace garden::nlp
