// Hugging Face model directories (config.json, model.safetensors, the
// tokenizer's files), read into Garden's BERT encoder and its heads by name:
//
//   BertModel, BertForPreTraining, BertForSequenceClassification
//     embeddings.{word,position,token_type}_embeddings, embeddings.LayerNorm
//     encoder.layer.<i>.attention.self.{query,key,value}   ->
//     layer_<i>.self_attention.query_key_value encoder.layer.<i>.attention.output.dense / LayerNorm
//     -> .self_attention.output / _layer_norm encoder.layer.<i>.intermediate.dense, output.dense ->
//     .feed_forward.intermediate / output encoder.layer.<i>.output.LayerNorm                   ->
//     .output_layer_norm pooler.dense, classifier (sequence classification)   -> the classifier
//     head's dense, out_proj
//   ElectraModel, ElectraForPreTraining, ElectraForMaskedLM,
//   ElectraForSequenceClassification: the same encoder under "electra.",
//     plus embeddings_project -> embedding_projection.
//
// Every config.json key that changes the computation is compared with the
// Garden encoder's; a difference is one garden::Error naming the key and
// both values. A tensor of the wrong shape names the tensor, the shape found
// and the shape expected.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "garden/nlp/modeling/bert_encoder.h"

namespace garden::nlp {

// A directory holding config.json and model.safetensors (or only
// pytorch_model.bin: see read_pytorch_state_dict).
bool is_huggingface_dir(const std::string& path);

// pytorch_model.bin (torch.save's zip format) through LibTorch's unpickler,
// which reads a dict of name -> tensor; the OrderedDict that
// torch.save(model.state_dict()) and save_pretrained write is refused with
// one line saying how to convert it.
std::map<std::string, at::Tensor> read_pytorch_state_dict(const std::string& path);

struct HuggingFaceModel {
  std::string dir;
  nlohmann::json config;                           // config.json
  std::map<std::string, at::Tensor> tensors;       // model.safetensors, by its names
  std::string weights_file = "model.safetensors";  // or pytorch_model.bin: named in errors
  std::string architecture;                        // config.json's architectures[0], or ""
  std::string model_type;                          // bert, electra, marian, ...
};

// Reads config.json and model.safetensors (else pytorch_model.bin); one
// garden::Error line naming the file for anything missing or malformed.
HuggingFaceModel read_huggingface_dir(const std::string& dir);
// config.json alone (no tensors): what a config's resolution reads.
HuggingFaceModel read_huggingface_config(const std::string& dir);

// Compares config.json with `options` (model_type bert or electra; vocab,
// widths, layers, heads, activation, positions, types, layer-norm epsilon,
// dropouts, embedding_size, position_embedding_type absolute, no decoder).
// Throws naming the first key that differs, as
// "DIR/config.json: hidden_size 64 differs from task.model.encoder.bert.hidden_size 32".
void check_huggingface_encoder_config(const HuggingFaceModel& model,
                                      const BertEncoderOptions& options,
                                      const std::string& garden_prefix);

// The encoder's tensors under Garden's names (prefixed by `garden_prefix`,
// e.g. "encoder."), from the model's BERT or ELECTRA encoder (found under
// "", "bert." or "electra."). Throws naming a tensor that is missing.
std::map<std::string, at::Tensor> huggingface_encoder_tensors(const HuggingFaceModel& model,
                                                              const BertEncoderOptions& options,
                                                              const std::string& garden_prefix);

// Copies `tensors` into `module`'s parameters (or buffers) by name; each must exist and
// have the parameter's shape (else garden::Error naming it, the shape found
// and the shape expected). Returns how many were copied.
int64_t load_named_tensors(torch::nn::Module& module,
                           const std::map<std::string, at::Tensor>& tensors,
                           const std::string& source);

// The other direction: a Garden encoder's tensors (named as `garden_prefix`
// + its parameter names in `module`) under Hugging Face's names for
// `model_type` bert (BertModel: no prefix) or electra (ElectraModel), and
// the config.json that describes them.
std::vector<std::pair<std::string, at::Tensor>> garden_encoder_to_huggingface(
    torch::nn::Module& module, const BertEncoderOptions& options, const std::string& garden_prefix,
    const std::string& hf_prefix);
nlohmann::json huggingface_encoder_config(const BertEncoderOptions& options,
                                          const std::string& model_type);

}  // namespace garden::nlp

namespace garden::config {
struct TaskConfig;
}

namespace garden::nlp {

// A fine-tuning task's initialize() when task.init_checkpoint names a
// Hugging Face directory: the encoder (module "encoder." of `model`) from
// the checkpoint's BERT or ELECTRA encoder, plus `extra` (Garden name ->
// Hugging Face name) when init_checkpoint_modules is "all" or empty, or
// lists the Garden module. Other modules are refused naming them. Returns
// false, doing nothing, when init_checkpoint is not such a directory.
// `required_extra`: tensors that must be in the checkpoint (init_cls_pooler).
bool initialize_from_huggingface(const config::TaskConfig& task, torch::nn::Module& model,
                                 const BertEncoderOptions& encoder,
                                 const std::map<std::string, std::string>& extra = {},
                                 const std::map<std::string, std::string>& required_extra = {});

}  // namespace garden::nlp
