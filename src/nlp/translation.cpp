#include "garden/nlp/translation.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>

#include "garden/core/config/registry.h"
#include "garden/core/error.h"
#include "garden/core/logging.h"
#include "garden/core/paths.h"
#include "garden/data/example.h"
#include "garden/data/pipeline.h"
#include "garden/data/record_source.h"
#include "garden/data/sentencepiece.h"
#include "garden/data/text_readers.h"
#include "garden/data/tfrecord.h"
#include "garden/nlp/beam_search.h"
#include "garden/nlp/bleu.h"
#include "garden/nlp/losses.h"

namespace garden::nlp {

namespace fs = std::filesystem;

// ---- config ------------------------------------------------------------------

void EncDecoderConfig::visit(config::Visitor& v) {
  v("num_layers", num_layers, "Transformer blocks in the stack.");
  v("num_attention_heads", num_attention_heads, "Attention heads per block.");
  v("intermediate_size", intermediate_size, "Width of the feed-forward layer.");
  v("activation", activation, "Feed-forward activation: relu or gelu.");
  v("dropout_rate", dropout_rate, "Dropout on each sublayer's output.");
  v("attention_dropout_rate", attention_dropout_rate, "Dropout on the attention probabilities.");
  v("intermediate_dropout", intermediate_dropout, "Dropout after the feed-forward activation.");
  v("use_bias", use_bias, "Biases in the attention and feed-forward projections.");
  v("norm_first", norm_first, "Pre-layer-norm blocks (with a final layer norm) when true.");
  v("norm_epsilon", norm_epsilon, "Layer-norm epsilon.");
}

void EncDecoderConfig::validate() const {
  if (num_layers < 1) throw config::ConfigError("num_layers must be >= 1");
  if (num_attention_heads < 1) throw config::ConfigError("num_attention_heads must be >= 1");
  if (intermediate_size < 1) throw config::ConfigError("intermediate_size must be >= 1");
  if (activation != "relu" && activation != "gelu")
    throw config::ConfigError("activation '" + activation + "' is not one of relu, gelu");
  for (double rate : {dropout_rate, attention_dropout_rate, intermediate_dropout})
    if (!(rate >= 0 && rate < 1)) throw config::ConfigError("dropout rates must be in [0, 1)");
  if (!(norm_epsilon > 0)) throw config::ConfigError("norm_epsilon must be > 0");
}

void TranslationModelConfig::visit(config::Visitor& v) {
  v("encoder", encoder, "The encoder stack.");
  v("decoder", decoder, "The decoder stack.");
  v("embedding_width", embedding_width, "Width of the shared embedding and of the model.");
  v("dropout_rate", dropout_rate, "Dropout on the embeddings plus positions.");
  v("padded_decode", padded_decode,
    "Model Garden pads decoding to decode_max_length for TPUs; accepted, and results are the "
    "same either way.");
  v("decode_max_length", decode_max_length,
    "Longest output in tokens; null: the input length plus extra_decode_length.");
  v("extra_decode_length", extra_decode_length, "Tokens allowed beyond the input length.");
  v("beam_size", beam_size, "Beam width; 1 decodes greedily.");
  v("alpha", alpha, "Length penalty ((5 + length) / 6)^alpha of beam search.");
  v("label_smoothing", label_smoothing, "Label smoothing of the training loss.");
}

void TranslationModelConfig::validate() const {
  if (embedding_width < 2 || embedding_width % 2)
    throw config::ConfigError("embedding_width must be even and >= 2");
  for (const auto* stack : {&encoder, &decoder})
    if (embedding_width % stack->num_attention_heads)
      throw config::ConfigError("embedding_width " + std::to_string(embedding_width) +
                                " is not divisible by num_attention_heads " +
                                std::to_string(stack->num_attention_heads));
  // One block configuration for both stacks (the hand-written model shares
  // it); the depths may differ.
  const auto same = [&](auto a, auto b, const char* key) {
    if (a != b)
      throw config::ConfigError(std::string("encoder.") + key + " and decoder." + key +
                                " must be equal (only num_layers may differ)");
  };
  same(encoder.num_attention_heads, decoder.num_attention_heads, "num_attention_heads");
  same(encoder.intermediate_size, decoder.intermediate_size, "intermediate_size");
  same(encoder.activation, decoder.activation, "activation");
  same(encoder.dropout_rate, decoder.dropout_rate, "dropout_rate");
  same(encoder.attention_dropout_rate, decoder.attention_dropout_rate, "attention_dropout_rate");
  same(encoder.intermediate_dropout, decoder.intermediate_dropout, "intermediate_dropout");
  same(encoder.use_bias, decoder.use_bias, "use_bias");
  same(encoder.norm_first, decoder.norm_first, "norm_first");
  same(encoder.norm_epsilon, decoder.norm_epsilon, "norm_epsilon");
  if (!(dropout_rate >= 0 && dropout_rate < 1))
    throw config::ConfigError("dropout_rate must be in [0, 1)");
  if (decode_max_length && *decode_max_length < 1)
    throw config::ConfigError("decode_max_length must be >= 1 or null");
  if (extra_decode_length < 0) throw config::ConfigError("extra_decode_length must be >= 0");
  if (beam_size < 1) throw config::ConfigError("beam_size must be >= 1");
  if (!(alpha >= 0)) throw config::ConfigError("alpha must be >= 0");
  if (!(label_smoothing >= 0 && label_smoothing < 1))
    throw config::ConfigError("label_smoothing must be in [0, 1)");
}

void TranslationDataConfig::visit(config::Visitor& v) {
  config::DataConfig::visit(v);
  v("max_seq_length", max_seq_length,
    "Training drops pairs with more tokens (EOS included) on either side; evaluation "
    "truncates them.");
  v("static_batch", static_batch,
    "Pad every batch to max_seq_length with global_batch_size // max_seq_length pairs, instead "
    "of token-budget length buckets.");
  v("src_lang", src_lang, "Source language: the tf.Example feature, or the aligned extension.");
  v("tgt_lang", tgt_lang, "Target language: the tf.Example feature, or the aligned extension.");
  v("bucket_min_boundary", bucket_min_boundary,
    "Length buckets start here (Garden; Model Garden's is 8).");
  v("bucket_boundary_scale", bucket_boundary_scale,
    "Each bucket boundary is max(x + 1, int(x * scale)) of the last (Garden; Model Garden's is "
    "1.1).");
}

void TranslationDataConfig::validate() const {
  // The file types are this task's own (tsv, aligned, tf.Example records).
  validate_reading();
  if (file_type == "aligned" && (src_lang.empty() || tgt_lang.empty()))
    throw config::ConfigError("file_type aligned needs src_lang and tgt_lang (the extensions)");
  if (file_type != "tsv" && file_type != "aligned" && file_type != "tfrecord" &&
      file_type != "tfrecord_compressed")
    throw config::ConfigError("file_type '" + file_type +
                              "' is not one of tsv, aligned, tfrecord, tfrecord_compressed");
  if ((file_type == "tfrecord" || file_type == "tfrecord_compressed") &&
      (src_lang.empty() || tgt_lang.empty()))
    throw config::ConfigError("tf.Example data needs src_lang and tgt_lang (the feature names)");
  if (max_seq_length < 2) throw config::ConfigError("max_seq_length must be >= 2");
  if (bucket_min_boundary < 1) throw config::ConfigError("bucket_min_boundary must be >= 1");
  if (!(bucket_boundary_scale >= 1))
    throw config::ConfigError("bucket_boundary_scale must be >= 1");
}

void TranslationConfig::visit_task_fields(config::Visitor& v) {
  v("sentencepiece_model_path", sentencepiece_model_path,
    "SentencePiece model; empty: train one on train_data into model_dir/sentencepiece.model.");
  v("print_translations", print_translations, "Log every validation input, output and reference.");
  v("sentencepiece_vocab_size", sentencepiece_vocab_size,
    "Vocabulary size of the SentencePiece model trained when sentencepiece_model_path is "
    "empty.");
}

void TranslationConfig::validate() const {
  if (sentencepiece_vocab_size < 8)
    throw config::ConfigError("sentencepiece_vocab_size must be >= 8");
}

// ---- data --------------------------------------------------------------------

namespace {

enum class PairFormat { kTsv, kAligned, kExample };

PairFormat pair_format(const TranslationDataConfig& data) {
  if (data.file_type == "tsv") return PairFormat::kTsv;
  if (data.file_type == "aligned") return PairFormat::kAligned;
  return PairFormat::kExample;
}

// The record reader's file type for `data` (aligned carries the target
// extension).
std::string reader_file_type(const TranslationDataConfig& data) {
  if (data.file_type == "tsv") return "text";
  if (data.file_type == "aligned") return "aligned:" + data.tgt_lang;
  return data.file_type;
}

// Splits one record into its source and target text.
class PairDecoder {
 public:
  explicit PairDecoder(const TranslationDataConfig& data)
      : format_(pair_format(data)), src_lang_(data.src_lang), tgt_lang_(data.tgt_lang) {
    if (format_ == PairFormat::kExample) {
      data::FixedLenFeature text{{}, data::DType::kString, std::nullopt};
      spec_[src_lang_] = text;
      spec_[tgt_lang_] = text;
    }
  }

  void operator()(const std::string& record, const data::RecordLocation& where, std::string& source,
                  std::string& target) const {
    switch (format_) {
      case PairFormat::kTsv: {
        std::vector<std::string> fields = data::split_fields(record);
        if (fields.size() < 2)
          throw Error("TSV file '" + where.file + "' line " + std::to_string(where.index + 1) +
                      ": no tab between source and target");
        source = std::move(fields[0]);
        target = std::move(fields[1]);
        return;
      }
      case PairFormat::kAligned: {
        const auto newline = record.find('\n');
        source = record.substr(0, newline);
        target = record.substr(newline + 1);
        return;
      }
      case PairFormat::kExample: {
        const data::Example example = data::parse_example(record);
        data::ParsedFeatures parsed = data::parse(example, spec_, where);
        source = std::move(parsed.strings.at(src_lang_).at(0));
        target = std::move(parsed.strings.at(tgt_lang_).at(0));
        return;
      }
    }
  }

 private:
  PairFormat format_;
  std::string src_lang_, tgt_lang_;
  data::ParseSpec spec_;
};

// Calls fn(unique_id, source, target) for every pair of `data`, in file order.
template <class Fn>
void for_each_pair(const TranslationDataConfig& data, Fn&& fn) {
  if (data.input_path.empty()) throw Error("the translation data has no input_path");
  const std::vector<std::string> files = data::match_files(data.input_path);
  const PairDecoder decode(data);
  std::string record, source, target;
  for (std::size_t f = 0; f < files.size(); ++f) {
    auto reader =
        data::open_record_reader(files[f], reader_file_type(data), data::tfrecord_options(data));
    int64_t index = 0;
    while (reader->next(record)) {
      decode(record, {files[f], index}, source, target);
      fn(pair_unique_id(static_cast<int64_t>(f), index), source, target);
      ++index;
    }
  }
}

at::Tensor ids_tensor(const std::vector<int64_t>& ids) { return torch::tensor(ids, torch::kLong); }

}  // namespace

std::vector<SentencePair> read_sentence_pairs(const TranslationDataConfig& data) {
  std::vector<SentencePair> pairs;
  for_each_pair(data, [&](int64_t id, const std::string& source, const std::string& target) {
    pairs.push_back({id, source, target});
  });
  return pairs;
}

// ---- decoding ----------------------------------------------------------------

std::vector<std::vector<int64_t>> translate_ids(Seq2SeqTransformerImpl& model,
                                                const at::Tensor& source_ids, int64_t eos_id,
                                                const DecodeOptions& options) {
  torch::NoGradGuard no_grad;
  const int64_t batch = source_ids.size(0);
  const int64_t max_length =
      options.decode_max_length.value_or(source_ids.size(1) + options.extra_decode_length);
  const EncoderOutput encoded = model.encode(source_ids);
  Cache cache = model.init_cache(encoded, batch);
  const SymbolsToLogitsFn step_fn = [&model](const at::Tensor& ids, int64_t step, Cache& c) {
    return model.decode_step(ids.select(1, step), step, c);
  };
  const at::Tensor initial = torch::zeros({batch}, torch::kLong);
  const BeamSearchResult result =
      options.beam_size <= 1
          ? greedy_decode(step_fn, initial, std::move(cache), max_length, eos_id)
          : sequence_beam_search(step_fn, initial, std::move(cache), model.options().vocab_size,
                                 options.beam_size, options.alpha, max_length, eos_id);
  // The best sequence of each example, without the initial id, up to EOS.
  const at::Tensor best = result.sequences.select(1, 0).slice(1, 1).contiguous().cpu();
  std::vector<std::vector<int64_t>> outputs(static_cast<std::size_t>(batch));
  const int64_t length = best.size(1);
  const int64_t* data = best.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    auto& out = outputs[static_cast<std::size_t>(b)];
    for (int64_t t = 0; t < length; ++t) {
      const int64_t id = data[b * length + t];
      if (id == eos_id || id == 0) break;
      out.push_back(id);
    }
  }
  return outputs;
}

// ---- task --------------------------------------------------------------------

TranslationTask::TranslationTask(std::shared_ptr<const TranslationConfig> params,
                                 std::string logging_dir)
    : Task(params, std::move(logging_dir)), config_(*params) {}

TranslationTask::~TranslationTask() = default;

std::string TranslationTask::tokenizer_path() const {
  if (!config_.sentencepiece_model_path.empty()) return config_.sentencepiece_model_path;
  if (logging_dir().empty())
    throw Error("sentencepiece_model_path is empty and there is no model_dir to train one in");
  return (fs::path(logging_dir()) / kSentencePieceFile).string();
}

void TranslationTask::train_tokenizer(const std::string& model_path) {
  const auto& train = config_.train_data;
  if (train.input_path.empty())
    throw Error(
        "sentencepiece_model_path is empty, and train_data.input_path is too: there is "
        "no text to train a SentencePiece model on");
  const auto start = std::chrono::steady_clock::now();
  const fs::path dir = fs::path(model_path).parent_path();
  // A failure leaves model_dir as it was: removed again if made here.
  const bool made_dir = fs::create_directories(dir);
  // Everything goes to temporary names first: a killed run never leaves a
  // half-written model where the next run would load it.
  const std::string stem = (dir / "sentencepiece.tmp").string();
  const std::string text_path = stem + ".txt";
  auto clean_up = [&] {
    std::error_code ignored;
    fs::remove(text_path, ignored);
    if (made_dir) fs::remove(dir, ignored);  // only when empty
  };
  data::SentencePieceTrainOptions options;
  try {
    int64_t sentences = 0;
    {
      std::ofstream text(text_path, std::ios::binary | std::ios::trunc);
      if (!text) throw Error("cannot write '" + text_path + "'");
      for_each_pair(train, [&](int64_t, const std::string& source, const std::string& target) {
        for (const std::string* line : {&source, &target}) {
          if (line->empty()) continue;
          text << *line << '\n';
          ++sentences;
        }
      });
      if (!text.flush()) throw Error("cannot write '" + text_path + "'");
    }
    log_info() << "training a joint SentencePiece model (vocab_size "
               << config_.sentencepiece_vocab_size << ") on " << sentences << " sentences of '"
               << train.input_path << "'";
    options.input = {text_path};
    options.model_prefix = stem;
    options.vocab_size = config_.sentencepiece_vocab_size;
    options.model_type = "unigram";
    options.character_coverage = 1.0;
    // Model Garden's ids: 0 pads (and starts decoding), 1 ends a sentence.
    options.pad_id = 0;
    options.eos_id = 1;
    options.unk_id = 2;
    options.bos_id = -1;
    // SentencePiece holds its input in memory; a sample is as good for a vocabulary.
    if (sentences > 4'000'000) options.input_sentence_size = 4'000'000;
    options.num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    options.extra_flags = {"max_sentence_length=16384"};
    try {
      data::train_sentencepiece(options);
    } catch (const std::exception& e) {
      throw Error("task.sentencepiece_vocab_size " + std::to_string(options.vocab_size) + " on '" +
                  train.input_path + "': " + e.what());
    }
  } catch (...) {
    clean_up();
    throw;
  }
  fs::remove(text_path);
  fs::rename(stem + ".vocab", fs::path(model_path).replace_extension(".vocab"));
  fs::rename(stem + ".model", model_path);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log_info() << "SentencePiece model written to " << model_path << " in " << std::fixed
             << std::setprecision(1) << seconds << " s";
}

const data::SentencePieceTokenizer& TranslationTask::tokenizer() {
  if (tokenizer_) return *tokenizer_;
  const std::string path = tokenizer_path();
  if (config_.sentencepiece_model_path.empty() && !fs::exists(path)) {
    if (!tokenizer_training_)
      throw Error("no SentencePiece model at '" + path +
                  "' (sentencepiece_model_path is empty and model_dir has none)");
    train_tokenizer(path);
  }
  tokenizer_ =
      std::make_unique<data::SentencePieceTokenizer>(data::SentencePieceTokenizer::load(path));
  if (tokenizer_->pad_id() != 0 && tokenizer_->piece_to_id("<pad>") != 0)
    throw Error("SentencePiece model '" + path + "' has pad_id " +
                std::to_string(tokenizer_->pad_id()) +
                "; the translation task pads with id 0 (train it with --pad_id=0)");
  if (tokenizer_->eos_id() < 1)
    throw Error("SentencePiece model '" + path + "' has no EOS piece (train it with --eos_id=1)");
  return *tokenizer_;
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
  options.decode_max_length = config_.model.decode_max_length;
  options.extra_decode_length = config_.model.extra_decode_length;
  return options;
}

DatasetPtr TranslationTask::build_inputs(const config::DataConfig& params,
                                         const InputContext& input_context) {
  const auto* data_config = dynamic_cast<const TranslationDataConfig*>(&params);
  if (!data_config) throw Error("the translation task needs a TranslationDataConfig");
  const TranslationDataConfig& data = *data_config;
  const bool training = data.is_training.value_or(false);
  const auto& tok = tokenizer();
  const data::SentencePieceTokenizer* tokenizer = &tok;
  const int64_t eos = tok.eos_id();

  config::DataConfig reader_config = data;
  reader_config.file_type = reader_file_type(data);

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
  }
  auto decode = std::make_shared<PairDecoder>(data);
  data::LocatedMapFn map_fn = [tokenizer, eos, decode, training, file_index](
                                  const std::string& record, const data::RecordLocation& where) {
    std::string source, target;
    (*decode)(record, where, source, target);
    std::vector<int64_t> source_ids = tokenizer->encode(source);
    std::vector<int64_t> target_ids = tokenizer->encode(target);
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
  options.dropout_rate = model.dropout_rate;
  options.attention_dropout_rate = model.encoder.attention_dropout_rate;
  options.intermediate_dropout = model.encoder.intermediate_dropout;
  options.use_bias = model.encoder.use_bias;
  options.norm_first = model.encoder.norm_first;
  options.norm_epsilon = model.encoder.norm_epsilon;
  options.pad_id = 0;
  if (model.encoder.dropout_rate != model.dropout_rate)
    log_warning() << "model.encoder.dropout_rate " << model.encoder.dropout_rate
                  << " differs from model.dropout_rate " << model.dropout_rate
                  << "; the blocks use model.dropout_rate";
  return Seq2SeqTransformer(options).ptr();
}

namespace {
Seq2SeqTransformerImpl& as_transformer(Model& model) {
  auto* transformer = model.as<Seq2SeqTransformerImpl>();
  if (!transformer) throw Error("the translation task needs its Seq2SeqTransformer model");
  return *transformer;
}

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

at::Tensor TranslationTask::build_losses(const Batch& labels, const Batch& model_outputs,
                                         const at::Tensor& aux_losses) {
  at::Tensor loss = padded_cross_entropy_loss(model_outputs.at("logits"), labels.at("targets"),
                                              config_.model.label_smoothing, /*pad_id=*/0)
                        .mean();
  if (aux_losses.defined()) loss = loss + aux_losses;
  return loss;
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
  model.eval();
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

void TranslationTask::aggregate_logs(Logs& state, const Logs& step_logs) {
  for (const char* key : {"translations", "unique_ids"}) {
    const auto it = step_logs.find(key);
    if (it == step_logs.end()) continue;
    const auto& rows = std::get<std::vector<std::vector<int64_t>>>(it->second);
    auto [slot, inserted] = state.try_emplace(key, std::vector<std::vector<int64_t>>{});
    auto& all = std::get<std::vector<std::vector<int64_t>>>(slot->second);
    all.insert(all.end(), rows.begin(), rows.end());
  }
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
          {"sentencepiece_model", tokenizer_->path()}};
}

void TranslationTask::restore_checkpoint_metadata(const nlohmann::json& metadata) {
  if (!metadata.contains("vocab_size")) return;
  const int64_t vocab = metadata.at("vocab_size");
  if (vocab != tokenizer().vocab_size())
    throw Error("the checkpoint was trained with a vocabulary of " + std::to_string(vocab) +
                " pieces, but SentencePiece model '" + tokenizer_->path() + "' has " +
                std::to_string(tokenizer_->vocab_size()));
}

int64_t TranslationTask::num_examples(const Batch& batch) const {
  const auto it = batch.find("inputs");
  return it == batch.end() ? Task::num_examples(batch) : it->second.size(0);
}

// ---- experiments -------------------------------------------------------------

namespace {

// One intra-op thread: the matrix products, most of the work, still run on
// every core through OpenBLAS's own threads, and LibTorch's OpenMP threads
// spinning beside them made a step 2x slower on 2 cores (docs/PERFORMANCE.md).
void cpu_threads(config::RuntimeConfig& runtime) { runtime.intra_op_parallelism_threads = 1; }

struct Preset {
  int64_t width, heads, ffn, layers;
};

std::shared_ptr<TranslationConfig> translation_task(const Preset& preset) {
  auto task = std::make_shared<TranslationConfig>();
  task->model.embedding_width = preset.width;
  for (auto* stack : {&task->model.encoder, &task->model.decoder}) {
    stack->num_layers = preset.layers;
    stack->num_attention_heads = preset.heads;
    stack->intermediate_size = preset.ffn;
  }
  task->train_data.is_training = true;
  task->train_data.src_lang = "en";
  task->train_data.tgt_lang = "de";
  task->validation_data.is_training = false;
  task->validation_data.drop_remainder = false;
  task->validation_data.src_lang = "en";
  task->validation_data.tgt_lang = "de";
  return task;
}

// Model Garden's wmt_transformer schedule: adam, then
// initial_learning_rate * step^-0.5 after a linear warmup.
void transformer_schedule(config::ExperimentConfig& experiment, double initial_learning_rate,
                          int64_t warmup_steps, double beta_2) {
  auto& opt = experiment.trainer.optimizer_config;
  opt.optimizer.type = "adam";
  opt.optimizer.adam.beta_1 = 0.9;
  opt.optimizer.adam.beta_2 = beta_2;
  opt.optimizer.adam.epsilon = 1e-9;
  opt.learning_rate.type = "power";
  opt.learning_rate.power.initial_learning_rate = initial_learning_rate;
  opt.learning_rate.power.power = -0.5;
  opt.warmup.type = "linear";
  opt.warmup.linear.warmup_steps = warmup_steps;
  opt.warmup.linear.warmup_learning_rate = 0.0;
}

std::shared_ptr<config::ExperimentConfig> wmt_experiment(const Preset& preset) {
  auto experiment = std::make_shared<config::ExperimentConfig>();
  auto task = translation_task(preset);
  task->train_data.global_batch_size = 24576;
  task->train_data.max_seq_length = 64;
  task->validation_data.global_batch_size = 4096;
  task->validation_data.max_seq_length = 100;
  task->model.extra_decode_length = 50;
  experiment->task = task;
  auto& trainer = experiment->trainer;
  trainer.train_steps = 300000;
  trainer.validation_steps = -1;
  trainer.steps_per_loop = 1000;
  trainer.summary_interval = 1000;
  trainer.checkpoint_interval = 5000;
  trainer.validation_interval = 5000;
  trainer.max_to_keep = 1;
  // Model Garden: 2.0 * width^-0.5 peaks at warmup_steps.
  transformer_schedule(*experiment, 2.0 / std::sqrt(static_cast<double>(preset.width)), 16000,
                       0.997);
  experiment->runtime.distribution_strategy = "mirrored";
  return experiment;
}

std::shared_ptr<config::ExperimentConfig> large_experiment() {
  return wmt_experiment({1024, 16, 4096, 6});
}
std::shared_ptr<config::ExperimentConfig> base_experiment() {
  return wmt_experiment({512, 8, 2048, 6});
}

// What the CPU-sized experiments set: TSV data, token batches in fine length
// buckets, a short warmup, beta_2 0.98 and clipping (a short run needs a faster start than
// Model Garden's 16000 warmup steps), one intra-op thread.
struct CpuRecipe {
  Preset preset;
  int64_t vocab_size, token_budget, train_max_length, shuffle_buffer_size;
  int64_t train_steps, checkpoint_interval, validation_interval, max_to_keep, warmup_steps;
};

std::shared_ptr<config::ExperimentConfig> cpu_experiment(const CpuRecipe& recipe) {
  auto experiment = std::make_shared<config::ExperimentConfig>();
  auto task = translation_task(recipe.preset);
  task->sentencepiece_vocab_size = recipe.vocab_size;
  task->train_data.file_type = "tsv";
  task->train_data.global_batch_size = recipe.token_budget;
  task->train_data.max_seq_length = recipe.train_max_length;
  task->train_data.shuffle_buffer_size = recipe.shuffle_buffer_size;
  // Short UI strings dominate gettext-style data: buckets from length 1, not
  // 8, keep the padding under 10% (docs/PERFORMANCE.md).
  task->train_data.bucket_min_boundary = 1;
  task->validation_data.file_type = "tsv";
  task->validation_data.global_batch_size = 4096;
  task->validation_data.max_seq_length = 100;
  task->model.extra_decode_length = 20;
  experiment->task = task;
  auto& trainer = experiment->trainer;
  trainer.train_steps = recipe.train_steps;
  trainer.validation_steps = -1;
  trainer.steps_per_loop = 100;
  trainer.summary_interval = 100;
  trainer.checkpoint_interval = recipe.checkpoint_interval;
  trainer.validation_interval = recipe.validation_interval;
  trainer.max_to_keep = recipe.max_to_keep;
  // 0.7 * width^-0.5 * step^-0.5 after the warmup.
  transformer_schedule(*experiment, 0.7 / std::sqrt(static_cast<double>(recipe.preset.width)),
                       recipe.warmup_steps, 0.98);
  trainer.optimizer_config.optimizer.adam.global_clipnorm = 1.0;
  experiment->runtime.distribution_strategy = "one_device";
  cpu_threads(experiment->runtime);
  return experiment;
}

// Sized for a CPU: a 30-minute run on gettext-en-de (docs/tasks/translation.md).
std::shared_ptr<config::ExperimentConfig> tiny_experiment() {
  return cpu_experiment({{256, 4, 1024, 3}, 8000, 3072, 64, 10000, 20000, 1000, 2000, 3, 800});
}

// The README's demo: a small model on a slice of gettext-en-de bundled in the
// repo, a few minutes on two cores.
std::shared_ptr<config::ExperimentConfig> demo_experiment() {
  auto experiment =
      cpu_experiment({{128, 4, 512, 2}, 2000, 2048, 48, 5000, 1200, 400, 600, 2, 300});
  auto& task = static_cast<TranslationConfig&>(*experiment->task);
  task.train_data.input_path = bundled_data_path("translation/en_de_train.tsv");
  task.validation_data.input_path = bundled_data_path("translation/en_de_valid.tsv");
  task.validation_data.max_seq_length = 64;
  experiment->runtime.seed = 1;
  return experiment;
}

}  // namespace

void register_translation() {
  register_task<TranslationConfig, TranslationTask>("translation");
  config::register_experiment("wmt_transformer/large",
                              "Model Garden's Transformer big for WMT (1024 wide, 6+6 layers); "
                              "set the data paths",
                              large_experiment);
  config::register_experiment("wmt_transformer/base",
                              "Transformer base (512 wide, 6+6 layers); set the data paths",
                              base_experiment);
  config::register_experiment("wmt_transformer/tiny",
                              "Transformer for a CPU (256 wide, 3+3 layers); set the data paths",
                              tiny_experiment);
  config::register_experiment("wmt_transformer/demo",
                              "English-German on a bundled slice of gettext catalogs (the demo)",
                              demo_experiment);
}

}  // namespace garden::nlp
