// Registers the ELECTRA pretraining task and the electra/{pretraining,small,
// tiny} experiments (docs/tasks/electra.md).
#pragma once

namespace garden::nlp {

void register_electra();

}  // namespace garden::nlp
