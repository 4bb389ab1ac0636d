#include "garden/core/builtins.h"

#include <mutex>

#include "garden/nlp/translation.h"
#include "garden/tabular/classification.h"

namespace garden {

void register_builtins() {
  static std::once_flag once;
  std::call_once(once, [] {
    tabular::register_tabular();
    nlp::register_translation();
  });
}

}  // namespace garden
