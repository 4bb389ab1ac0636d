#include "garden/cli/import_command.h"

#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/staged_directory.h"
#include "garden/cli/cli.h"
#include "garden/config/yaml_io.h"
#include "garden/core/checkpoint.h"
#include "garden/core/task.h"
#include "garden/core/train_lib.h"
#include "garden/nlp/data/marian_tokenizer.h"
#include "garden/nlp/interop/huggingface.h"
#include "garden/nlp/tasks/translation_config.h"
#include "garden/nlp/tasks/translation_task.h"

namespace garden {

namespace {

namespace fs = std::filesystem;

struct ImportFlags {
  std::string huggingface_dir;
  std::string experiment;
  std::vector<std::string> config_files;
  std::string params_override;
  std::string model_dir;
};

void run_import(const ImportFlags& flags) {
  if (!nlp::is_huggingface_dir(flags.huggingface_dir))
    throw Error("--huggingface_dir '" + flags.huggingface_dir +
                "' is not a Hugging Face model directory (no config.json)");
  std::error_code ec;
  if (fs::exists(flags.model_dir, ec) &&
      !(fs::is_directory(flags.model_dir, ec) && fs::is_empty(flags.model_dir, ec)))
    throw Error("--model_dir '" + flags.model_dir +
                "' exists and is not empty; import writes a new run directory");
  // The directory's shapes are taken as init_checkpoint's: params.yaml
  // holds them.
  const std::string source = fs::absolute(flags.huggingface_dir).lexically_normal().string();
  auto params =
      resolve_experiment(flags.experiment, flags.config_files, flags.params_override, source);
  auto& task_config = *params->task;

  const fs::path target = fs::absolute(flags.model_dir).lexically_normal();
  write_directory_whole(target, [&](const fs::path& staging) {
    // A MarianMT tokenizer travels with the run: the run reads it from
    // model_dir/tokenizer, not from --huggingface_dir.
    auto* translation = dynamic_cast<nlp::TranslationConfig*>(&task_config);
    std::string tokenizer_dir;
    if (translation && translation->sentencepiece_model_path.empty() &&
        nlp::MarianTokenizer::is_marian_dir(source)) {
      fs::create_directories(staging / "tokenizer");
      for (const auto& [name, path] : nlp::MarianTokenizer::files(source))
        write_file_atomically((staging / "tokenizer" / name).string(), read_file(path, name));
      tokenizer_dir = (target / "tokenizer").string();
      translation->sentencepiece_model_path = (staging / "tokenizer").string();
    }
    TaskPtr task = get_task(params->task, staging.string());
    ModelPtr model = task->build_model();
    task->initialize(*model);
    CheckpointData data;
    for (const auto& [name, tensor] : model_state(*model))
      data.tensors["model/" + name] = tensor.detach().to(at::kCPU).contiguous();
    data.meta["global_step"] = 0;
    data.meta["task"] = task->checkpoint_metadata();
    data.meta["imported_from"] = source;
    if (!tokenizer_dir.empty()) {
      translation->sentencepiece_model_path = tokenizer_dir;
      data.meta["task"]["sentencepiece_model"] = tokenizer_dir;
    }
    data.meta["params"] = config::to_yaml_string(*params);
    CheckpointManager(staging.string(), 1).save(data, 0);
    write_params_yaml(*params, staging.string(), flags.experiment);
  });
  std::cout << "model_dir:   " << target.string() << "\n"
            << "checkpoint:  " << (target / "ckpt-0").string() << " (from " << source << ")\n"
            << "params.yaml: " << (target / "params.yaml").string() << "\n";
}

}  // namespace

CLI::App* add_import_command(CLI::App& app) {
  auto flags = std::make_shared<ImportFlags>();
  auto* command = app.add_subcommand(
      "import", "Convert a Hugging Face model directory into a Garden run directory (ckpt-0)");
  command
      ->add_option("--huggingface_dir", flags->huggingface_dir,
                   "The Hugging Face directory (config.json, model.safetensors, tokenizer)")
      ->required();
  command->add_option("--experiment", flags->experiment, "Registered experiment name")->required();
  command->add_option("--config_file", flags->config_files,
                      "YAML file applied over the experiment's defaults (repeatable, in order)");
  command->add_option("--params_override", flags->params_override,
                      "Overrides applied last: a.b=1,c.d='x' or a YAML/JSON mapping");
  command->add_option("--model_dir", flags->model_dir, "The run directory to write")->required();
  command->callback([flags] { run_import(*flags); });
  return command;
}

}  // namespace garden
