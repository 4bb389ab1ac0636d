// Registers Garden's own tasks and experiments. Idempotent; run_main calls it.
#pragma once

namespace garden {
void register_builtins();
}
