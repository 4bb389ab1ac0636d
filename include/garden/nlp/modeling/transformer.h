// Model Garden's seq2seq Transformer (official/nlp/modeling/models/
// seq2seq_transformer.py) and the blocks it is built from, written by hand:
// LibTorch 1.13's nn::Transformer has neither batch_first nor norm_first.
// The attention, its masks and the layout conventions (B, S, T, D, H, Dh) are
// in garden/nlp/modeling/attention.h; the dropout and attention kernels in
// garden/kernels/.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "garden/kernels/dropout.h"
#include "garden/kernels/embedding.h"
#include "garden/kernels/gelu.h"
#include "garden/kernels/int8.h"
#include "garden/kernels/layer_norm.h"
#include "garden/kernels/linear.h"
#include "garden/nlp/modeling/attention.h"
#include "garden/nlp/modeling/cache.h"

namespace garden::nlp {

// A LayerNorm module over the last dimension (`width`) with `epsilon`.
torch::nn::LayerNorm make_layer_norm(int64_t width, double epsilon);
// A LayerNorm module applied through kernels::layer_norm (garden/kernels/layer_norm.h)
// with its weight, bias and epsilon; the module's own forward when it has no
// affine parameters or normalizes more than the last dimension.
at::Tensor layer_norm(const at::Tensor& x, torch::nn::LayerNorm& norm);
// layer_norm_and_skip (garden/kernels/layer_norm.h) through the module's parameters.
std::array<at::Tensor, 2> layer_norm_and_skip(const at::Tensor& x, torch::nn::LayerNorm& norm,
                                              kernels::LayerNormSkip skip);

// The Cache (garden/nlp/modeling/cache.h) this model fills for incremental decoding. Every tensor
// has the batch on dim 0: the flattened batch x beam B for "steps/" entries, the examples E for
// "per_example/" ones (B = E x beams; init_cache makes both B rows, beam search keeps E).
// Entries:
//   "steps/layer_<i>/self_k", "steps/layer_<i>/self_v": [B, H, capacity, Dh],
//       the decoder self-attention keys/values; decode_step `step` writes
//       position `step` and reads positions 0..step. init_cache preallocates
//       `max_steps` positions; a step at the capacity grows the buffer by one
//       (with max_steps 0 they grow by one position every step).
//   "per_example/layer_<i>/cross_k", "per_example/layer_<i>/cross_v":
//       [E, H, S, Dh], cross-attention keys/values, computed once from the
//       encoder outputs by init_cache. The beams of an example attend to
//       them as one example's B / E queries, so each key is read once for
//       all of its beams.
//   "per_example/encoder_padding_mask": [E, 1, 1, S] additive mask (0 real
//       token, kMaskedValue padding).
//   "step_rows": [B, capacity] int64, only when init_cache is asked for it:
//       the "steps/" entries' rows, read and written through it (cache.h).

// Model Garden's RelativePositionEmbedding: [length, hidden_size] with
// timescales min * (max/min)^(i / (hidden_size/2 - 1)), i < hidden_size/2, and
// row p = concat(sin(p / timescale_i) for all i, cos(p / timescale_i) for all i)
// (sin half first, then cos half; not interleaved). Positions start at `start`.
// Made on `device` (no copy from the host each step on a GPU).
at::Tensor relative_position_encoding(int64_t length, int64_t hidden_size, int64_t start = 0,
                                      double min_timescale = 1.0, double max_timescale = 1.0e4,
                                      at::ScalarType dtype = at::kFloat,
                                      at::Device device = at::kCPU);

// The sinusoids a Seq2SeqTransformer adds to its embeddings.
//   kModelGarden: relative_position_encoding above, timescales 1e4^(i / (D/2 - 1)).
//   kMarian: MarianMT's (transformers' MarianSinusoidalPositionalEmbedding):
//     the same layout (sin half, then cos half) with timescales 1e4^(i / (D/2)).
enum class PositionEncoding { kModelGarden, kMarian };
// "model_garden" or "marian"; anything else throws garden::Error naming it.
PositionEncoding position_encoding_from_name(const std::string& name);
at::Tensor position_encoding(PositionEncoding style, int64_t length, int64_t hidden_size,
                             int64_t start = 0, at::ScalarType dtype = at::kFloat,
                             at::Device device = at::kCPU);

// Shared by the encoder and decoder blocks.
struct TransformerBlockOptions {
  int64_t hidden_size = 512;
  int64_t num_heads = 8;
  int64_t intermediate_size = 2048;
  std::string activation = "relu";  // relu, gelu (the exact erf form) or swish (x * sigmoid(x))
  double dropout_rate = 0.0;        // on each sublayer's output before the residual add
  double attention_dropout_rate = 0.0;
  double intermediate_dropout = 0.0;  // after the feed-forward activation
  bool use_bias = true;
  bool norm_first = false;  // true: pre-LN, x + f(LN(x)); false: post-LN, LN(x + f(x))
  double norm_epsilon = 1e-6;
};

// Dense -> activation -> dropout -> dense; shared by both blocks.
class FeedForwardImpl : public torch::nn::Module {
 public:
  explicit FeedForwardImpl(const TransformerBlockOptions& options);
  // With `output_bias`, the output layer may leave its bias out and store it
  // there (Dense::forward_deferring_bias).
  at::Tensor forward(const at::Tensor& x, at::Tensor* output_bias = nullptr);
  Dense intermediate{nullptr}, output{nullptr};

 private:
  bool gelu_, swish_;
  double dropout_;
};
TORCH_MODULE(FeedForward);

// Model Garden's TransformerEncoderBlock: self-attention then feed-forward.
class TransformerEncoderBlockImpl : public torch::nn::Module {
 public:
  explicit TransformerEncoderBlockImpl(const TransformerBlockOptions& options);
  // x [B, S, D], mask additive [B, 1, 1, S] (or undefined) -> [B, S, D].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& mask = {});
  // forward with a second handle on x for the first residual sum (skip: x
  // itself, or the [1] of the block before): {the output, its handle for the
  // next block}. Post-LN stacks pass the handles on, so each layer norm's
  // output gradients are summed in its own backward (layer_norm_and_skip).
  std::array<at::Tensor, 2> forward_with_skip(const at::Tensor& x, const at::Tensor& skip,
                                              const at::Tensor& mask = {});

  MultiHeadAttention self_attention{nullptr};
  torch::nn::LayerNorm self_attention_norm{nullptr};
  FeedForward feed_forward{nullptr};
  torch::nn::LayerNorm output_norm{nullptr};

 private:
  TransformerBlockOptions options_;
};
TORCH_MODULE(TransformerEncoderBlock);

// Model Garden's TransformerDecoderBlock: causal self-attention, cross
// attention to the encoder outputs, then feed-forward.
class TransformerDecoderBlockImpl : public torch::nn::Module {
 public:
  explicit TransformerDecoderBlockImpl(const TransformerBlockOptions& options);
  // x [B, T, D], memory [B, S, D], self_mask e.g. causal_mask(T), cross_mask
  // e.g. padding_mask(src) -> [B, T, D].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& memory, const at::Tensor& self_mask,
                     const at::Tensor& cross_mask);
  // One decoding step at position `step`: x [B, 1, D]. self_k/self_v
  // [B, H, capacity, Dh] hold the earlier steps' keys/values at positions
  // 0..step-1; this step's are written at `step` (a buffer of capacity
  // `step` is replaced by one a position longer). With step_rows (int64
  // [B, > step], the cache's "step_rows"), self_k/self_v [B0, H, > step, Dh]
  // are read through it: row b's position s is in buffer row
  // step_rows[b][s], and this step's keys/values go to row step_rows[b][step].
  at::Tensor forward_step(const at::Tensor& x, int64_t step, at::Tensor& self_k, at::Tensor& self_v,
                          const at::Tensor& cross_k, const at::Tensor& cross_v,
                          const at::Tensor& cross_mask, const at::Tensor& step_rows = {});

  MultiHeadAttention self_attention{nullptr};
  torch::nn::LayerNorm self_attention_norm{nullptr};
  MultiHeadAttention cross_attention{nullptr};
  torch::nn::LayerNorm cross_attention_norm{nullptr};
  FeedForward feed_forward{nullptr};
  torch::nn::LayerNorm output_norm{nullptr};

 private:
  TransformerBlockOptions options_;
};
TORCH_MODULE(TransformerDecoderBlock);

struct Seq2SeqTransformerOptions {
  int64_t vocab_size = 32000;
  int64_t hidden_size = 512;        // also the embedding width
  int64_t num_layers = 6;           // encoder layers (and decoder layers, unless set below)
  int64_t decoder_num_layers = -1;  // -1: num_layers
  int64_t num_heads = 8;
  int64_t intermediate_size = 2048;
  std::string activation = "relu";
  double dropout_rate = 0.1;  // on each block's sublayer outputs
  // On the embeddings + positions; -1: dropout_rate. (Model Garden's
  // model.dropout_rate; its encoder/decoder.dropout_rate is dropout_rate.)
  double embedding_dropout_rate = -1;
  double attention_dropout_rate = 0.1;
  double intermediate_dropout = 0.1;
  bool use_bias = true;
  bool norm_first = true;  // pre-LN, with final layer norms on both stacks
  double norm_epsilon = 1e-6;
  int64_t pad_id = 0;
  // Model Garden multiplies the embeddings of pad_id by 0; MarianMT reads
  // its <pad> row (the decoder's first input) as it is.
  bool zero_pad_embedding = true;
  PositionEncoding position_encoding = PositionEncoding::kModelGarden;
  // A bias added to the logits (MarianMT's final_logits_bias): a buffer,
  // not trained, as in transformers.
  bool output_bias = false;

  TransformerBlockOptions block_options() const;
};

struct EncoderOutput {
  at::Tensor outputs;       // [B, S, D]
  at::Tensor padding_mask;  // [B, 1, 1, S] additive
};

// Encoder-decoder Transformer with one embedding shared by the source, the
// target and the output projection (logits = hidden @ embedding^T).
// Embeddings are scaled by sqrt(D) and zeroed at pad_id, as in Model Garden
// (unless zero_pad_embedding is off).
class Seq2SeqTransformerImpl : public torch::nn::Module {
 public:
  explicit Seq2SeqTransformerImpl(const Seq2SeqTransformerOptions& options);

  // src_ids [B, S] (int64, pad_id padding).
  EncoderOutput encode(const at::Tensor& src_ids);
  // Decoder hidden states before the tied projection: [B, T, D].
  at::Tensor decode(const at::Tensor& tgt_in, const EncoderOutput& encoded);
  // Teacher forcing: tgt_in [B, T] is the already shifted decoder input.
  // Returns logits [B, T, V].
  at::Tensor forward(const at::Tensor& src_ids, const at::Tensor& tgt_in);

  // Incremental decoding (see Cache for the format). init_cache needs
  // encoded.outputs to already have `batch` rows (tile for beams first);
  // max_steps positions of self-attention keys/values are preallocated (the
  // most decode steps expected; more still work, growing the buffers). With
  // step_rows, the cache also holds "step_rows" [batch, max_steps] (each
  // row its own index; max_steps must be at least 1), through which
  // decode_step reads and writes the "steps/" entries: for Garden's searches,
  // whose beam search then moves indices instead of keys and values.
  Cache init_cache(const EncoderOutput& encoded, int64_t batch, int64_t max_steps = 0,
                   bool step_rows = false);
  // ids_at_step [B]: the decoder input at position `step` (0-based);
  // returns logits [B, V] for position `step` and extends the cache.
  at::Tensor decode_step(const at::Tensor& ids_at_step, int64_t step, Cache& cache);

  // int8 decoding (garden/nlp/int8.h): on, every dense layer and the tied
  // output projection run on int8 copies of the weights as they are now,
  // whenever gradients are off; off, float again. Throws garden::Error where
  // int8 cannot run (weights not on the CPU, no quantized engine).
  void use_int8(bool on);
  bool int8() const { return int8_projection_ != nullptr; }

  // The encoder's and decoder's input: ids [B, L] -> the embeddings scaled
  // by sqrt(D), zero at pad_id, plus the position encodings of positions
  // start .. start + L - 1, then dropout when training. In inference (not
  // training, no gradients, float32 on the CPU) one pass with the encodings
  // read from a table kept by the model, the same bits as the operations.
  // sparse_gradient: the table's gradient from this lookup is sparse
  // (kernels::embedding_rows), for a graph that also projects with the table
  // (forward), whose dense gradient it is added into.
  at::Tensor embed(const at::Tensor& ids, int64_t start, bool sparse_gradient = false);

  const Seq2SeqTransformerOptions& options() const { return options_; }
  torch::nn::Embedding embedding{nullptr};  // [V, D]; also the output projection
  std::vector<TransformerEncoderBlock> encoder_layers;
  std::vector<TransformerDecoderBlock> decoder_layers;
  torch::nn::LayerNorm encoder_norm{nullptr};  // only when norm_first
  torch::nn::LayerNorm decoder_norm{nullptr};  // only when norm_first
  at::Tensor final_logits_bias;                // [V], only with output_bias

 private:
  EncoderOutput encode(const at::Tensor& src_ids, bool sparse_gradient);
  at::Tensor decode(const at::Tensor& tgt_in, const EncoderOutput& encoded, bool sparse_gradient);
  at::Tensor project(const at::Tensor& hidden);
  // Rows 0 .. n - 1 (at least) of position_encoding in float32 on
  // the CPU, grown as decoding needs; shared by the threads that decode.
  at::Tensor position_rows(int64_t n);
  struct PositionTable;
  Seq2SeqTransformerOptions options_;
  std::shared_ptr<PositionTable> positions_;
  std::shared_ptr<const kernels::Int8Linear> int8_projection_;  // embedding^T, with use_int8
};
TORCH_MODULE(Seq2SeqTransformer);

}  // namespace garden::nlp
