// The fine-tuning tasks and experiments (Model Garden's
// official/nlp/configs/finetuning_experiments.py).
#pragma once

namespace garden::nlp {

void register_finetuning();

}  // namespace garden::nlp
