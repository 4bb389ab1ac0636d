// Serving ELECTRA's discriminator (garden/core/serving_module.h), as Model
// Garden exports a BERT encoder: input_word_ids (required), input_mask and
// input_type_ids (default all 1 and all 0), lists of up to sequence_length
// ints -> sequence_output [S, H] and the replaced-token probabilities
// disc_probabilities [S], each instance at its own length.
#pragma once

#include <cstddef>
#include <vector>

#include "garden/core/serving_module.h"

namespace garden::nlp {

class ElectraPretrainTask;
struct ElectraPretrainConfig;

class ElectraServing : public ServingModule {
 public:
  explicit ElectraServing(ElectraPretrainTask& task);

  ServingSignature signature() override;
  Batch inputs(const std::vector<nlohmann::json>& instances) override;
  std::vector<nlohmann::json> outputs(const Batch& outputs, std::size_t count) override;

 private:
  const ElectraPretrainConfig& config_;
};

}  // namespace garden::nlp
