// Registers task `tabular/classification` and the experiments
// tabular/classification and tabular/iris (docs/tasks/tabular.md).
#pragma once

namespace garden::tabular {

void register_tabular();

}  // namespace garden::tabular
