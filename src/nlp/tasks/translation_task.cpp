#include "garden/nlp/tasks/translation_task.h"

#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <unordered_map>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/logging.h"
#include "garden/data/pipeline.h"
#include "garden/data/record_source.h"
#include "garden/data/sentencepiece.h"
#include "garden/kernels/losses.h"
#include "garden/nlp/data/marian_tokenizer.h"
#include "garden/nlp/data/translation_tokenizer.h"
#include "garden/nlp/interop/huggingface.h"
#include "garden/nlp/interop/marian.h"
#include "garden/nlp/metrics/bleu.h"
#include "garden/nlp/tasks/huggingface_export.h"

namespace garden::nlp {

namespace fs = std::filesystem;

namespace {
at::Tensor ids_tensor(const std::vector<int64_t>& ids) { return torch::tensor(ids, torch::kLong); }

// Evaluation data is read whole before the first step: its references reach
// BLEU and the summaries (JSON), so a pair that is not UTF-8 must fail now,
// not at the first evaluation, and so must a set with nothing to evaluate.
void check_evaluation_pairs(const TranslationDataConfig& data) {
  int64_t pairs = 0;
  for_each_pair(data, [&](int64_t, const std::string&, const std::string&) { ++pairs; });
  if (pairs == 0)
    throw Error("the evaluation data '" + data.input_path +
                "' holds no sentence pair: there is nothing to evaluate on");
}
}  // namespace

TranslationTask::TranslationTask(std::shared_ptr<const TranslationConfig> params,
                                 std::string logging_dir)
    : Task(params, std::move(logging_dir)), config_(*params) {}

TranslationTask::~TranslationTask() = default;

std::string TranslationTask::tokenizer_path() const {
  if (!fixed_tokenizer_path_.empty()) return fixed_tokenizer_path_;
  if (!config_.sentencepiece_model_path.empty()) return config_.sentencepiece_model_path;
  if (MarianTokenizer::is_marian_dir(config_.init_checkpoint)) return config_.init_checkpoint;
  if (logging_dir().empty())
    throw Error("sentencepiece_model_path is empty and there is no model_dir to train one in");
  return (fs::path(logging_dir()) / kSentencePieceFile).string();
}

const data::Tokenizer& TranslationTask::tokenizer() {
  if (tokenizer_) return *tokenizer_;
  const std::string path = tokenizer_path();
  if (MarianTokenizer::is_marian_dir(path)) {
    tokenizer_ = std::make_unique<MarianTokenizer>(MarianTokenizer::load(path));
    return *tokenizer_;
  }
  if (config_.sentencepiece_model_path.empty() && !fs::exists(path)) {
    // Not worth a tokenizer trained first: initialize() would refuse it.
    if (is_huggingface_dir(config_.init_checkpoint))
      throw Error("task.init_checkpoint '" + config_.init_checkpoint +
                  "' is a Hugging Face model without MarianMT's tokenizer (vocab.json, "
                  "source.spm): not a translation model Garden reads");
    if (!tokenizer_training_)
      throw Error("no SentencePiece model at '" + path +
                  "' (sentencepiece_model_path is empty and model_dir has none)");
    train_translation_sentencepiece(config_.train_data, config_.sentencepiece_vocab_size, path);
  }
  tokenizer_ = std::make_unique<data::SentencePieceTokenizer>(load_translation_sentencepiece(path));
  return *tokenizer_;
}

void TranslationTask::use_tokenizer(const std::string& path) {
  fixed_tokenizer_path_ = path;
  tokenizer_training_ = false;
  tokenizer_.reset();
}

std::vector<int64_t> TranslationTask::encode_source(const std::string& text, int64_t max_length,
                                                    bool* truncated) {
  const auto& tok = tokenizer();
  std::vector<int64_t> ids = tok.encode(text);
  const bool cut = max_length > 0 && static_cast<int64_t>(ids.size()) + 1 > max_length;
  if (cut) ids.resize(static_cast<std::size_t>(max_length - 1));
  ids.push_back(tok.eos_id());
  if (truncated) *truncated = cut;
  return ids;
}

DecodeOptions TranslationTask::decode_options() const {
  DecodeOptions options;
  options.beam_size = config_.model.beam_size;
  options.alpha = config_.model.alpha;
  options.no_repeat_ngram_size = config_.model.no_repeat_ngram_size;
  options.decode_max_length = config_.model.decode_max_length;
  options.extra_decode_length = config_.model.extra_decode_length;
  options.rules = config_.model.beam_search == "transformers" ? BeamSearchRules::kTransformers
                                                              : BeamSearchRules::kModelGarden;
  return options;
}

DatasetPtr TranslationTask::build_inputs(const config::DataConfig& params,
                                         const InputContext& input_context) {
  const auto* data_config = dynamic_cast<const TranslationDataConfig*>(&params);
  if (!data_config) throw Error("the translation task needs a TranslationDataConfig");
  const TranslationDataConfig& data = *data_config;
  const bool training = data.is_training.value_or(false);
  const auto& tok = tokenizer();
  const data::Tokenizer* tokenizer = &tok;
  const int64_t eos = tok.eos_id();

  config::DataConfig reader_config = data;
  reader_config.file_type = pair_reader_file_type(data);

  data::BatchingOptions batching;
  batching.mode = data.static_batch ? data::BatchMode::kStatic : data::BatchMode::kBucketByLength;
  batching.max_length = data.max_seq_length;
  batching.length_keys = {"inputs", "targets"};
  batching.eos_id = eos;
  batching.min_boundary = data.bucket_min_boundary;
  batching.boundary_scale = data.bucket_boundary_scale;

  // Evaluation tracks each pair by its unique id, over the sorted file list.
  std::unordered_map<std::string, int64_t> file_index;
  if (!training) {
    const auto files = data::match_files(data.input_path);
    for (std::size_t i = 0; i < files.size(); ++i) file_index[files[i]] = static_cast<int64_t>(i);
    check_evaluation_pairs(data);
  }
  auto decode = std::make_shared<PairDecoder>(data);
  // Training pairs are read as the steps go, too late to refuse one without
  // losing the run's work: the first that is not UTF-8 is a warning (training
  // the SentencePiece model here refused it already; a given model encodes
  // the bad bytes as unknown pieces).
  auto reported = std::make_shared<std::atomic<bool>>(!training);
  // MarianMT cuts targets with its target.spm.
  const auto* marian = dynamic_cast<const MarianTokenizer*>(tokenizer);
  data::LocatedMapFn map_fn = [tokenizer, marian, eos, decode, training, file_index, reported](
                                  const std::string& record, const data::RecordLocation& where) {
    std::string source, target;
    (*decode)(record, where, source, target);
    if (!reported->load(std::memory_order_relaxed)) {
      const std::string problem = decode->utf8_error(source, target, where);
      if (!problem.empty() && !reported->exchange(true))
        log_warning() << problem
                      << " (training on it; later pairs that are not UTF-8 are not "
                         "reported)";
    }
    std::vector<int64_t> source_ids = tokenizer->encode(source);
    std::vector<int64_t> target_ids =
        marian ? marian->encode_target(target) : tokenizer->encode(target);
    source_ids.push_back(eos);
    target_ids.push_back(eos);
    Batch example{{"inputs", ids_tensor(source_ids)}, {"targets", ids_tensor(target_ids)}};
    if (!training)
      example["unique_id"] =
          torch::full({1}, pair_unique_id(file_index.at(where.file), where.index), torch::kLong);
    return example;
  };
  return std::make_shared<data::InputPipeline>(reader_config, map_fn, batching, input_context);
}

ModelPtr TranslationTask::build_model() {
  const auto& model = config_.model;
  Seq2SeqTransformerOptions options;
  options.vocab_size = tokenizer().vocab_size();
  options.hidden_size = model.embedding_width;
  options.num_layers = model.encoder.num_layers;
  options.decoder_num_layers = model.decoder.num_layers;
  options.num_heads = model.encoder.num_attention_heads;
  options.intermediate_size = model.encoder.intermediate_size;
  options.activation = model.encoder.activation;
  // Model Garden's keys: the blocks drop at encoder.dropout_rate (validate()
  // keeps decoder.dropout_rate equal), the embeddings at model.dropout_rate.
  options.dropout_rate = model.encoder.dropout_rate;
  options.embedding_dropout_rate = model.dropout_rate;
  options.attention_dropout_rate = model.encoder.attention_dropout_rate;
  options.intermediate_dropout = model.encoder.intermediate_dropout;
  options.use_bias = model.encoder.use_bias;
  options.norm_first = model.encoder.norm_first;
  options.norm_epsilon = model.encoder.norm_epsilon;
  options.pad_id = 0;
  options.position_encoding = position_encoding_from_name(model.position_encoding);
  options.output_bias = model.output_bias;
  options.zero_pad_embedding = model.zero_pad_embedding;
  return Seq2SeqTransformer(options).ptr();
}

Seq2SeqTransformerImpl& TranslationTask::as_transformer(Model& model) {
  auto* transformer = model.as<Seq2SeqTransformerImpl>();
  if (!transformer) throw Error("the translation task needs its Seq2SeqTransformer model");
  return *transformer;
}

void TranslationTask::initialize(Model& model) {
  if (!is_huggingface_dir(config_.init_checkpoint)) return Task::initialize(model);
  const HuggingFaceModel hf = read_huggingface_dir(config_.init_checkpoint);
  if (hf.model_type != "marian")
    throw Error(hf.dir + "/config.json: model_type '" + hf.model_type +
                "' is not a translation model Garden reads (marian)");
  const auto* marian = dynamic_cast<const MarianTokenizer*>(&tokenizer());
  if (!marian)
    throw Error("task.init_checkpoint '" + config_.init_checkpoint +
                "' is a Hugging Face model, but the task's tokenizer '" + tokenizer_path() +
                "' is not its vocabulary (leave task.sentencepiece_model_path empty, or point it "
                "at that directory)");
  for (const auto& module : config_.init_checkpoint_modules)
    if (module != "all")
      throw Error(
          "task.init_checkpoint_modules: a MarianMT checkpoint restores the whole model "
          "(all), not '" +
          module + "'");
  auto& transformer = as_transformer(model);
  check_marian_config(hf, transformer.options(), config_.model.dropout_rate,
                      marian->marian_pad_id(), marian->to_marian(marian->eos_id()));
  const int64_t copied = load_named_tensors(
      transformer, marian_to_garden(hf, transformer.options(), marian->marian_pad_id()), hf.dir);
  log_info() << "initialized the model from " << hf.dir << " ("
             << (hf.architecture.empty() ? hf.model_type : hf.architecture) << "): " << copied
             << " tensors restored";
}

namespace {

// The decoder input: targets shifted right by one, 0 first.
at::Tensor shift_right(const at::Tensor& targets) {
  return torch::constant_pad_nd(targets, {1, 0}, 0).slice(1, 0, targets.size(1));
}
}  // namespace

Batch TranslationTask::call_model(Model& model, const Batch& features, bool) {
  auto& transformer = as_transformer(model);
  return {
      {"logits", transformer.forward(features.at("inputs"), shift_right(features.at("targets")))}};
}

Losses TranslationTask::build_losses(const Batch& labels, const Batch& model_outputs,
                                     const at::Tensor& aux_losses) {
  const kernels::PaddedCrossEntropy xent = kernels::padded_cross_entropy_loss(
      model_outputs.at("logits"), labels.at("targets"), config_.model.label_smoothing,
      /*pad_id=*/0);
  // Averaged over the non-pad target tokens, and carrying their number.
  Losses losses(xent.mean(), xent.weight_sum);
  losses.add_aux(aux_losses);
  return losses;
}

std::vector<std::string> TranslationTask::aggregated_log_names() const {
  return {"bleu_score", "sacrebleu_score"};
}

Logs TranslationTask::validation_step(const Batch& inputs, Model& model, MetricList& metrics) {
  Logs logs = Task::validation_step(inputs, model, metrics);
  torch::NoGradGuard no_grad;
  auto& transformer = as_transformer(model);
  const int64_t eos = tokenizer().eos_id();
  logs["translations"] = translate_ids(transformer, inputs.at("inputs"), eos, decode_options());
  const auto ids_it = inputs.find("unique_id");
  if (ids_it != inputs.end()) {
    const at::Tensor ids = ids_it->second.reshape({-1}).cpu().contiguous();
    logs["unique_ids"] = std::vector<std::vector<int64_t>>{
        std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel())};
  }
  return logs;
}

Batch TranslationTask::inference_step(const Batch& inputs, Model& model) {
  torch::NoGradGuard no_grad;
  // Already so when served: no write to the shared model (predict_batches
  // runs this on several threads at once).
  if (model.is_training()) model.eval();
  const auto outputs = translate_ids(as_transformer(model), inputs.at("inputs"),
                                     tokenizer().eos_id(), decode_options());
  int64_t longest = 1;
  for (const auto& row : outputs) longest = std::max<int64_t>(longest, row.size());
  at::Tensor padded = torch::zeros({static_cast<int64_t>(outputs.size()), longest}, torch::kLong);
  for (std::size_t b = 0; b < outputs.size(); ++b)
    for (std::size_t t = 0; t < outputs[b].size(); ++t)
      padded[static_cast<int64_t>(b)][static_cast<int64_t>(t)] = outputs[b][t];
  return {{"outputs", padded}};
}

Logs TranslationTask::reduce_aggregated_logs(const Logs& aggregated_logs, int64_t global_step) {
  const auto translations_it = aggregated_logs.find("translations");
  const auto ids_it = aggregated_logs.find("unique_ids");
  if (translations_it == aggregated_logs.end() || ids_it == aggregated_logs.end()) return {};
  const auto& outputs = std::get<std::vector<std::vector<int64_t>>>(translations_it->second);
  std::vector<int64_t> ids;
  for (const auto& batch : std::get<std::vector<std::vector<int64_t>>>(ids_it->second))
    ids.insert(ids.end(), batch.begin(), batch.end());
  if (ids.size() != outputs.size())
    throw Error("translation validation: " + std::to_string(outputs.size()) + " outputs for " +
                std::to_string(ids.size()) + " unique ids");

  // The references are the raw target sentences (not their truncated
  // tokenization), in unique-id order.
  std::map<int64_t, const SentencePair*> by_id;
  const std::vector<SentencePair> pairs = read_sentence_pairs(config_.validation_data);
  for (const auto& pair : pairs) by_id[pair.unique_id] = &pair;
  std::vector<std::size_t> order(ids.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return ids[a] < ids[b]; });

  const auto& tok = tokenizer();
  std::vector<std::string> hypotheses, references, sources;
  for (std::size_t i : order) {
    const auto it = by_id.find(ids[i]);
    if (it == by_id.end())
      throw Error("translation validation: unique id " + std::to_string(ids[i]) +
                  " is not a pair of '" + config_.validation_data.input_path + "'");
    hypotheses.push_back(tok.decode(outputs[i]));
    references.push_back(it->second->target);
    sources.push_back(it->second->source);
  }
  Logs logs;
  logs["bleu_score"] = static_cast<double>(model_garden_bleu(references, hypotheses));
  logs["sacrebleu_score"] = corpus_bleu(hypotheses, {references}).score;

  if (config_.print_translations.value_or(false))
    for (std::size_t i = 0; i < hypotheses.size(); ++i)
      log_info() << "step " << global_step << " translation " << i
                 << "\n  input:     " << sources[i] << "\n  output:    " << hypotheses[i]
                 << "\n  reference: " << references[i];
  // A few examples for TensorBoard's text dashboard (markdown).
  std::vector<std::string> examples;
  for (std::size_t i = 0; i < std::min<std::size_t>(5, hypotheses.size()); ++i)
    examples.push_back("input: " + sources[i] + "  \noutput: " + hypotheses[i] +
                       "  \nreference: " + references[i]);
  logs["translations"] = examples;
  return logs;
}

nlohmann::json TranslationTask::checkpoint_metadata() const {
  if (!tokenizer_) return nlohmann::json::object();
  return {{"vocab_size", tokenizer_->vocab_size()},
          {"eos_id", tokenizer_->eos_id()},
          {"sentencepiece_model", tokenizer_path()}};
}

void TranslationTask::restore_checkpoint_metadata(const nlohmann::json& metadata) {
  if (!metadata.contains("vocab_size")) return;
  const int64_t vocab = metadata.at("vocab_size");
  if (vocab != tokenizer().vocab_size())
    throw Error("the checkpoint was trained with a vocabulary of " + std::to_string(vocab) +
                " pieces, but SentencePiece model '" + tokenizer_path() + "' has " +
                std::to_string(tokenizer_->vocab_size()));
}

int64_t TranslationTask::num_examples(const Batch& batch) const {
  const auto it = batch.find("inputs");
  return it == batch.end() ? Task::num_examples(batch) : it->second.size(0);
}

HuggingFaceExport TranslationTask::to_huggingface(Task& task, Model& model) {
  auto* translation = &dynamic_cast<TranslationTask&>(task);
  auto* transformer = model.as<Seq2SeqTransformerImpl>();
  if (!transformer) throw Error("the translation task needs its Seq2SeqTransformer model");
  const data::Tokenizer& tokenizer = translation->tokenizer();
  const auto* marian = dynamic_cast<const MarianTokenizer*>(&tokenizer);
  // A Garden SentencePiece model gets OPUS-MT's ids: <pad> last.
  const int64_t pad = marian ? marian->marian_pad_id() : tokenizer.vocab_size() - 1;
  const int64_t eos = (tokenizer.eos_id() + pad) % tokenizer.vocab_size();
  HuggingFaceExport out;
  out.config =
      marian_config(transformer->options(), translation->config().model.dropout_rate, pad, eos);
  out.tensors = garden_to_marian(*transformer, pad);
  out.files["generation_config.json"] =
      marian_generation_config(pad, eos, translation->config().model.beam_size,
                               translation->config().model.no_repeat_ngram_size)
          .dump(2) +
      "\n";
  out.files["tokenizer_config.json"] =
      nlohmann::json({{"tokenizer_class", "MarianTokenizer"}, {"model_max_length", 512}}).dump(2) +
      "\n";
  if (marian) {
    for (const auto& [name, path] : MarianTokenizer::files(marian->dir()))
      out.files[name] = read_file(path, "the tokenizer's " + name);
  } else {
    // One joint SentencePiece model for both sides.
    const std::string model_file =
        read_file(translation->tokenizer_path(), "the SentencePiece model");
    out.files[MarianTokenizer::kSourceSpmFile] = model_file;
    out.files[MarianTokenizer::kTargetSpmFile] = model_file;
    out.files[MarianTokenizer::kVocabFile] = marian_vocab_json(tokenizer);
  }
  out.copy_assets = false;
  return out;
}

}  // namespace garden::nlp
