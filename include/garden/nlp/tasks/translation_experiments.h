// Registers the translation task and the wmt_transformer/{large,base,tiny,demo}
// experiments (docs/tasks/translation.md).
#pragma once

namespace garden::nlp {

void register_translation();

}  // namespace garden::nlp
