// `garden launch`: starts the processes of a multi-worker run on this
// machine, as torchrun does.
//
//   garden launch --nproc_per_node=2 -- train --experiment=tabular/iris
//     --model_dir=/tmp/iris --params_override=runtime.distribution_strategy=multi_worker_mirrored
//   (one command line)
//
// Each process gets torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT); --evaluator adds one more
// process, the evaluator of TF_CONFIG, running continuous_eval. Their lines
// come out prefixed "[rank R] " ("[evaluator] "), SIGTERM and SIGINT are
// passed on to all, and when one fails the others are stopped and launch
// exits non-zero naming it and its last line.
#pragma once

namespace garden {

// argv[1] is "launch". Returns the exit code.
int run_launch(int argc, char** argv);

}  // namespace garden
