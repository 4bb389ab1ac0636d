// `garden import`: a Hugging Face model directory as a Garden run directory.
#pragma once

namespace CLI {
class App;
}

namespace garden {

// Adds the `import` subcommand to `app`:
//   import --huggingface_dir DIR --experiment NAME --model_dir OUT
//          [--config_file F]... [--params_override S]
// Builds the experiment's task and model with task.init_checkpoint = DIR
// (the task's own Hugging Face reader checks config.json against the config
// and loads the weights, as training would), then writes OUT/ckpt-0 (the
// model's weights at step 0), OUT/params.yaml and, for a MarianMT
// translation model, its tokenizer files in OUT/tokenizer (params.yaml's
// task.sentencepiece_model_path points there), so that translate, export,
// predict and serve read OUT, and a fine-tuning run takes it as
// task.init_checkpoint. OUT must not exist or be empty; it is written beside
// itself and renamed into place, so a failure leaves nothing. One
// garden::Error line for each failure.
CLI::App* add_import_command(CLI::App& app);

}  // namespace garden
