#include "garden/nlp/tasks/huggingface_export.h"

#include <filesystem>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/staged_directory.h"
#include "garden/config/registry.h"
#include "garden/core/safetensors.h"
#include "garden/nlp/interop/huggingface.h"

namespace garden::nlp {

namespace fs = std::filesystem;
using json = nlohmann::json;

at::Tensor huggingface_parameter(Model& model, const std::string& name) {
  const auto parameters = model.named_parameters(/*recurse=*/true);
  const at::Tensor* t = parameters.find(name);
  if (!t) throw Error("the model has no parameter '" + name + "'");
  return t->detach().to(at::kCPU).contiguous();
}

bool encoder_projects(const BertEncoderOptions& o) { return o.embedding_width() != o.hidden_size; }

HuggingFaceExport huggingface_encoder_export(Model& model, const BertEncoderOptions& o,
                                             const std::string& garden_prefix,
                                             const std::string& architecture) {
  const std::string type = encoder_projects(o) ? "electra" : "bert";
  HuggingFaceExport out;
  out.config = huggingface_encoder_config(o, type);
  out.config["architectures"] = json::array({architecture});
  out.tensors = garden_encoder_to_huggingface(model, o, garden_prefix, type + ".");
  return out;
}

void add_huggingface_tokenizer_config(HuggingFaceExport& out, const std::string& tokenization,
                                      bool lower_case) {
  json settings = {{"do_lower_case", lower_case}};
  if (tokenization == "WordPiece") settings["tokenizer_class"] = "BertTokenizer";
  out.files["tokenizer_config.json"] = settings.dump(2) + "\n";
}

void add_huggingface_labels(json& config, const std::vector<std::string>& names, int64_t count) {
  json id2label = json::object(), label2id = json::object();
  for (int64_t i = 0; i < count; ++i) {
    const std::string name = i < static_cast<int64_t>(names.size())
                                 ? names[static_cast<std::size_t>(i)]
                                 : "LABEL_" + std::to_string(i);
    id2label[std::to_string(i)] = name;
    label2id[name] = i;
  }
  config["id2label"] = id2label;
  config["label2id"] = label2id;
}

namespace {
// Exporters by task name (the name register_task gave), each for its config
// type.
struct ExporterEntry {
  std::type_index config_type;
  HuggingFaceExporter exporter;
};
config::Registry<ExporterEntry>& exporters() {
  static config::Registry<ExporterEntry> registry("huggingface_exporter");
  return registry;
}
}  // namespace

void register_huggingface_exporter(std::type_index config_type, const std::string& task_name,
                                   HuggingFaceExporter exporter) {
  exporters().add(task_name, ExporterEntry{config_type, std::move(exporter)});
}

HuggingFaceExport huggingface_export(Task& task, Model& model) {
  const std::type_index config_type(typeid(task.task_config()));
  std::string names;
  for (const auto& name : exporters().names()) {
    const ExporterEntry& entry = exporters().get(name);
    if (entry.config_type == config_type) return entry.exporter(task, model);
    names += (names.empty() ? "" : ", ") + name;
  }
  throw Error("--format=huggingface: task '" + task.name() +
              "' has no Hugging Face architecture in Garden yet (" + names + " export)");
}

void write_huggingface_dir(const HuggingFaceExport& exported,
                           const std::map<std::string, std::string>& assets,
                           const std::string& dir) {
  if (dir.empty()) throw Error("--export_dir is empty");
  std::error_code ec;
  if (fs::exists(dir, ec))
    throw Error("--export_dir '" + dir +
                "' exists; a Hugging Face directory is written whole, "
                "into a new path");
  write_directory_whole(dir, [&](const fs::path& staging) {
    write_file_atomically((staging / "config.json").string(), exported.config.dump(2) + "\n");
    write_safetensors((staging / "model.safetensors").string(), exported.tensors,
                      {{"format", "pt"}});
    for (const auto& [name, contents] : exported.files)
      write_file_atomically((staging / name).string(), contents);
    if (exported.copy_assets)
      for (const auto& [name, path] : assets) {
        const std::string file = name == "sp.model" ? "spiece.model" : name;
        write_file_atomically((staging / file).string(),
                              read_file(path, "the task's asset '" + name + "'"));
      }
  });
}

}  // namespace garden::nlp
