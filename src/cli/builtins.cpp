#include "garden/cli/builtins.h"

#include <mutex>

#include "garden/nlp/tasks/electra_experiments.h"
#include "garden/nlp/tasks/finetuning_experiments.h"
#include "garden/nlp/tasks/translation_experiments.h"
#include "garden/tabular/classification_experiments.h"
#include "garden/vision/tasks/image_classification_experiments.h"

namespace garden {

void register_builtins() {
  static std::once_flag once;
  std::call_once(once, [] {
    tabular::register_tabular();
    nlp::register_translation();
    nlp::register_electra();
    nlp::register_finetuning();
    vision::register_vision();
  });
}

}  // namespace garden
