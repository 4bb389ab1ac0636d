#include "garden/nlp/modeling/decoding.h"

#include <torch/torch.h>

#include <algorithm>
#include <utility>

#include "garden/nlp/modeling/beam_search.h"

namespace garden::nlp {

std::vector<int64_t> repeated_ngram_tokens(const int64_t* tokens, int64_t length,
                                           int64_t ngram_size) {
  std::vector<int64_t> banned;
  if (ngram_size <= 0 || length < ngram_size - 1) return banned;
  // The next n-gram would start with the last ngram_size - 1 tokens.
  const int64_t* prefix = tokens + (length - (ngram_size - 1));
  for (int64_t i = 0; i + ngram_size - 1 < length; ++i)
    if (std::equal(tokens + i, tokens + i + ngram_size - 1, prefix))
      banned.push_back(tokens[i + ngram_size - 1]);
  return banned;
}

BannedTokensFn no_repeat_ngram_ban(int64_t ngram_size) {
  if (ngram_size <= 0) return {};
  return [ngram_size](const at::Tensor& ids) {
    std::vector<std::pair<int64_t, int64_t>> banned;
    // ids [N, step + 1]: the initial id, then the generated tokens. The
    // first n-gram that can repeat one needs ngram_size of them.
    if (ids.size(1) - 1 < ngram_size) return banned;
    const at::Tensor host = ids.to(torch::kCPU, torch::kLong).contiguous();
    const int64_t width = host.size(1);
    const int64_t* data = host.data_ptr<int64_t>();
    for (int64_t r = 0; r < host.size(0); ++r)
      for (int64_t token : repeated_ngram_tokens(data + r * width + 1, width - 1, ngram_size))
        banned.emplace_back(r, token);
    return banned;
  };
}

std::vector<std::vector<int64_t>> translate_ids(Seq2SeqTransformerImpl& model,
                                                const at::Tensor& source_ids, int64_t eos_id,
                                                const DecodeOptions& options) {
  torch::NoGradGuard no_grad;
  const int64_t batch = source_ids.size(0);
  if (batch == 0) return {};
  // Each sentence's own limit, so that it translates the same in any batch.
  const at::Tensor max_lengths =
      options.decode_max_length
          ? torch::full({batch}, *options.decode_max_length, torch::kLong)
          : source_ids.ne(model.options().pad_id).sum(1).add(options.extra_decode_length).cpu();
  const EncoderOutput encoded = model.encode(source_ids);
  // Room for the longest decode, so no step reallocates the self-attention
  // keys. On the CPU the searches move indices into them, not the keys
  // ("step_rows", garden/nlp/modeling/cache.h).
  const int64_t max_steps = max_lengths.max().item<int64_t>();
  Cache cache = model.init_cache(encoded, batch, max_steps,
                                 /*step_rows=*/source_ids.device().is_cpu() && max_steps > 0);
  const SymbolsToLogitsFn step_fn = [&model](const at::Tensor& ids, int64_t step, Cache& c) {
    return model.decode_step(ids.select(1, step), step, c);
  };
  const BannedTokensFn banned = no_repeat_ngram_ban(options.no_repeat_ngram_size);
  // The search runs where the model does (the source ids' device).
  const at::Tensor initial = torch::zeros({batch}, source_ids.options().dtype(torch::kLong));
  const BeamSearchResult result =
      options.beam_size <= 1
          ? greedy_decode(step_fn, initial, std::move(cache), max_lengths, eos_id, banned)
          : sequence_beam_search(
                step_fn, initial, std::move(cache), model.options().vocab_size, options.beam_size,
                options.alpha, max_lengths, eos_id,
                initial.device().is_cpu() ? BeamSearchState::kHost : BeamSearchState::kTensors,
                options.rules, banned);
  // The best sequence of each example, without the initial id, up to EOS.
  const at::Tensor best = result.sequences.select(1, 0).slice(1, 1).contiguous().cpu();
  std::vector<std::vector<int64_t>> outputs(static_cast<std::size_t>(batch));
  const int64_t length = best.size(1);
  const int64_t* data = best.data_ptr<int64_t>();
  const bool forced_eos = options.rules == BeamSearchRules::kTransformers;
  const at::Tensor limits = max_lengths.to(torch::kCPU, torch::kLong).contiguous();
  for (int64_t b = 0; b < batch; ++b) {
    auto& out = outputs[static_cast<std::size_t>(b)];
    for (int64_t t = 0; t < length; ++t) {
      const int64_t id = data[b * length + t];
      if (id == eos_id || id == 0) break;
      out.push_back(id);
    }
    // transformers' forced_eos_token_id: a greedy output that reached its
    // limit ends with EOS in place of its last token (the beam search forces
    // it itself).
    if (forced_eos && options.beam_size <= 1 &&
        static_cast<int64_t>(out.size()) >= limits.data_ptr<int64_t>()[b])
      out.resize(static_cast<std::size_t>(limits.data_ptr<int64_t>()[b] - 1));
  }
  return outputs;
}

}  // namespace garden::nlp
