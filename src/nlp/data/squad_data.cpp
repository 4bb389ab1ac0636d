#include "garden/nlp/data/squad_data.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "garden/base/encoding.h"
#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/logging.h"
#include "garden/config/validation.h"
#include "garden/data/example.h"
#include "garden/data/parse_spec.h"
#include "garden/data/pipeline.h"
#include "garden/data/tfrecord.h"
#include "garden/data/wordpiece.h"
#include "garden/nlp/data/sentence_prediction_data.h"

namespace garden::nlp {

namespace {

using json = nlohmann::json;

// squad_lib's is_whitespace: the four ASCII ones and U+202F.
bool squad_whitespace(char32_t c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == 0x202F;
}

std::string utf8(const std::u32string& text) {
  std::string out;
  for (const char32_t c : text) unicode::append_utf8(c, out);
  return out;
}

// "line L, column C" of byte `offset` in `text`.
std::string line_and_column(const std::string& text, std::size_t offset) {
  offset = std::min(offset, text.size());
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

const json& field(const json& object, const char* key, json::value_t type, const std::string& where,
                  const char* type_name) {
  if (!object.is_object()) throw Error(where + " is not an object");
  const auto it = object.find(key);
  if (it == object.end()) throw Error(where + " has no '" + key + "'");
  const bool ok =
      type == json::value_t::number_integer
          ? it->is_number_integer()
          : (it->type() == type || (type == json::value_t::boolean && it->is_boolean()));
  if (!ok)
    throw Error(where + "." + key + " must be " + type_name + ", not " +
                std::string(it->type_name()));
  return *it;
}

std::string join(const std::vector<std::string>& words, std::size_t begin, std::size_t end) {
  std::string out;
  for (std::size_t i = begin; i < end; ++i) out += (i > begin ? " " : "") + words[i];
  return out;
}

std::string whitespace_joined(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (const char32_t c : unicode::decode_utf8(text)) {
    if (squad_whitespace(c)) {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
    } else {
      unicode::append_utf8(c, word);
    }
  }
  if (!word.empty()) words.push_back(word);
  return join(words, 0, words.size());
}

// The context's words (split on whitespace) and each one's first character
// and, when asked, for each character the word it is in (squad_lib's
// char_to_word_offset). Offsets count Unicode characters, as Python's.
SquadExample split_context(const std::string& context, std::vector<int64_t>* char_to_word) {
  SquadExample out;
  bool previous_whitespace = true;
  int64_t offset = 0;
  for (const char32_t c : unicode::decode_utf8(context)) {
    if (squad_whitespace(c)) {
      previous_whitespace = true;
    } else {
      if (previous_whitespace) {
        out.doc_tokens.emplace_back();
        out.doc_token_offsets.push_back(offset);
      }
      unicode::append_utf8(c, out.doc_tokens.back());
      previous_whitespace = false;
    }
    if (char_to_word) char_to_word->push_back(static_cast<int64_t>(out.doc_tokens.size()) - 1);
    ++offset;
  }
  return out;
}

}  // namespace

SquadExample squad_question(std::string qas_id, std::string question, const std::string& context) {
  SquadExample example = split_context(context, nullptr);
  example.qas_id = std::move(qas_id);
  example.question_text = std::move(question);
  return example;
}

SquadReadReport read_squad_examples(const std::string& path, bool is_training,
                                    bool version_2_with_negative) {
  const std::string text = read_file(path, "SQuAD file");
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    throw Error(path + ": " + line_and_column(text, e.byte > 0 ? e.byte - 1 : 0) + ": not JSON (" +
                e.what() + ")");
  }
  SquadReadReport report;
  const json& data = field(root, "data", json::value_t::array, path, "a list");
  for (std::size_t i = 0; i < data.size(); ++i) {
    const std::string at_article = path + ": data[" + std::to_string(i) + "]";
    const json& paragraphs =
        field(data[i], "paragraphs", json::value_t::array, at_article, "a list");
    for (std::size_t j = 0; j < paragraphs.size(); ++j) {
      const std::string at_paragraph = at_article + ".paragraphs[" + std::to_string(j) + "]";
      const auto context =
          field(paragraphs[j], "context", json::value_t::string, at_paragraph, "a string")
              .get<std::string>();
      if (unicode::invalid_utf8_offset(context) != std::string::npos)
        throw Error(at_paragraph + ".context: " + unicode::utf8_error(context));
      std::vector<int64_t> char_to_word;
      const SquadExample words = split_context(context, &char_to_word);
      const std::vector<std::string>& doc_tokens = words.doc_tokens;
      const json& qas = field(paragraphs[j], "qas", json::value_t::array, at_paragraph, "a list");
      for (std::size_t k = 0; k < qas.size(); ++k) {
        const std::string at = at_paragraph + ".qas[" + std::to_string(k) + "]";
        SquadExample example;
        example.where = at;
        const json& id = qas[k].is_object() ? qas[k].value("id", json()) : json();
        if (id.is_string())
          example.qas_id = id.get<std::string>();
        else if (id.is_number_integer())
          example.qas_id = std::to_string(id.get<int64_t>());
        else
          throw Error(at + " has no string 'id'");
        example.question_text =
            field(qas[k], "question", json::value_t::string, at, "a string").get<std::string>();
        example.doc_tokens = doc_tokens;
        example.doc_token_offsets = words.doc_token_offsets;
        if (version_2_with_negative && qas[k].contains("is_impossible"))
          example.is_impossible =
              field(qas[k], "is_impossible", json::value_t::boolean, at, "true or false")
                  .get<bool>();
        const json& answers = field(qas[k], "answers", json::value_t::array, at, "a list");
        for (std::size_t a = 0; a < answers.size(); ++a) {
          const std::string at_answer = at + ".answers[" + std::to_string(a) + "]";
          example.answers.push_back(
              field(answers[a], "text", json::value_t::string, at_answer, "a string")
                  .get<std::string>());
        }
        if (is_training && !example.is_impossible && answers.size() != 1)
          throw Error(at + " (id " + example.qas_id +
                      "): for training, each answerable question has exactly 1 answer, not " +
                      std::to_string(answers.size()));
        if (!example.is_impossible && !answers.empty()) {
          const std::string at_answer = at + ".answers[0]";
          const auto start = field(answers[0], "answer_start", json::value_t::number_integer,
                                   at_answer, "an integer")
                                 .get<int64_t>();
          example.orig_answer_text = example.answers[0];
          const auto length =
              static_cast<int64_t>(unicode::decode_utf8(example.orig_answer_text).size());
          const auto characters = static_cast<int64_t>(char_to_word.size());
          if (start < 0 || length == 0 || start + length > characters)
            throw Error(at_answer + " (id " + example.qas_id + "): answer_start " +
                        std::to_string(start) + " and " + std::to_string(length) +
                        " characters do not fit in the context's " + std::to_string(characters));
          example.start_position = char_to_word[static_cast<std::size_t>(start)];
          example.end_position = char_to_word[static_cast<std::size_t>(start + length - 1)];
          // The answer must be where answer_start says (squad_lib skips it
          // otherwise; an evaluation keeps the question, without positions).
          const std::string actual =
              join(doc_tokens, static_cast<std::size_t>(example.start_position),
                   static_cast<std::size_t>(example.end_position) + 1);
          if (example.start_position < 0 ||
              actual.find(whitespace_joined(example.orig_answer_text)) == std::string::npos) {
            if (is_training) {
              ++report.skipped;
              log_warning() << at_answer << " (id " << example.qas_id
                            << "): could not find answer '" << example.orig_answer_text
                            << "' at answer_start; skipped";
              continue;
            }
            example.start_position = example.end_position = -1;
          }
        }
        report.examples.push_back(std::move(example));
      }
    }
  }
  return report;
}

namespace {

struct DocSpan {
  int64_t start = 0, length = 0;
};

// squad_lib's _check_is_max_context: whether `position` has the most
// context (min of left and right, plus a hundredth of the length) in
// span `current` among the spans holding it.
bool is_max_context(const std::vector<DocSpan>& spans, std::size_t current, int64_t position) {
  double best_score = -1;
  std::size_t best = 0;
  bool found = false;
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const int64_t end = spans[i].start + spans[i].length - 1;
    if (position < spans[i].start || position > end) continue;
    const int64_t left = position - spans[i].start, right = end - position;
    const double score =
        static_cast<double>(std::min(left, right)) + 0.01 * static_cast<double>(spans[i].length);
    if (!found || score > best_score) {
      best_score = score;
      best = i;
      found = true;
    }
  }
  return found && best == current;
}

}  // namespace

std::vector<SquadFeature> convert_squad_examples(const FinetuningTokenizer& tokenizer,
                                                 const std::vector<SquadExample>& examples,
                                                 const SquadConversionOptions& o) {
  if (o.max_query_length < 1) throw Error("max_query_length must be positive");
  if (o.doc_stride < 1) throw Error("doc_stride must be positive");
  if (o.max_seq_length < o.max_query_length + 4)
    throw Error("max_seq_length " + std::to_string(o.max_seq_length) +
                " leaves no room for the document after max_query_length " +
                std::to_string(o.max_query_length));
  std::vector<SquadFeature> features;
  int64_t unique_id = 1000000000;
  for (std::size_t e = 0; e < examples.size(); ++e) {
    const SquadExample& example = examples[e];
    std::vector<int64_t> query = tokenizer.tokenize(example.question_text);
    if (static_cast<int64_t>(query.size()) > o.max_query_length)
      query.resize(static_cast<std::size_t>(o.max_query_length));
    std::vector<int64_t> tok_to_orig, orig_to_tok, doc;
    for (std::size_t w = 0; w < example.doc_tokens.size(); ++w) {
      orig_to_tok.push_back(static_cast<int64_t>(doc.size()));
      for (const int64_t id : tokenizer.tokenize(example.doc_tokens[w])) {
        tok_to_orig.push_back(static_cast<int64_t>(w));
        doc.push_back(id);
      }
    }
    const auto doc_length = static_cast<int64_t>(doc.size());
    // The answer's pieces, narrowed to the pieces of its text when they lie
    // inside the words' pieces (_improve_answer_span).
    int64_t tok_start = -1, tok_end = -1;
    if (!example.is_impossible && example.start_position >= 0) {
      tok_start = orig_to_tok[static_cast<std::size_t>(example.start_position)];
      tok_end = example.end_position + 1 < static_cast<int64_t>(example.doc_tokens.size())
                    ? orig_to_tok[static_cast<std::size_t>(example.end_position + 1)] - 1
                    : doc_length - 1;
      const std::vector<int64_t> answer = tokenizer.tokenize(example.orig_answer_text);
      bool improved = false;
      for (int64_t s = tok_start; s <= tok_end && !improved; ++s)
        for (int64_t t = tok_end; t >= s && !improved; --t)
          if (t - s + 1 == static_cast<int64_t>(answer.size()) &&
              std::equal(answer.begin(), answer.end(), doc.begin() + s)) {
            tok_start = s;
            tok_end = t;
            improved = true;
          }
    }
    const int64_t max_doc = o.max_seq_length - static_cast<int64_t>(query.size()) - 3;
    std::vector<DocSpan> spans;
    for (int64_t start = 0; start < doc_length;) {
      const int64_t length = std::min(doc_length - start, max_doc);
      spans.push_back({start, length});
      if (start + length == doc_length) break;
      start += std::min(length, o.doc_stride);
    }
    if (spans.empty()) spans.push_back({0, 0});  // an empty paragraph: the question alone
    for (std::size_t s = 0; s < spans.size(); ++s) {
      SquadFeature f;
      f.unique_id = unique_id++;
      f.example_index = static_cast<int64_t>(e);
      f.doc_span_index = static_cast<int64_t>(s);
      f.tokens.push_back(tokenizer.cls_id());
      f.tokens.insert(f.tokens.end(), query.begin(), query.end());
      f.tokens.push_back(tokenizer.sep_id());
      f.segment_ids.assign(f.tokens.size(), 0);
      const auto offset = static_cast<int64_t>(f.tokens.size());
      for (int64_t i = 0; i < spans[s].length; ++i) {
        const int64_t split = spans[s].start + i;
        const auto position = static_cast<int64_t>(f.tokens.size());
        f.token_to_orig_map[position] = tok_to_orig[static_cast<std::size_t>(split)];
        f.token_is_max_context[position] = is_max_context(spans, s, split);
        f.tokens.push_back(doc[static_cast<std::size_t>(split)]);
        f.segment_ids.push_back(1);
      }
      f.tokens.push_back(tokenizer.sep_id());
      f.segment_ids.push_back(1);
      f.input_ids = f.tokens;
      f.input_mask.assign(f.tokens.size(), 1);
      const auto length = static_cast<std::size_t>(o.max_seq_length);
      f.input_ids.resize(length, 0);
      f.input_mask.resize(length, 0);
      f.segment_ids.resize(length, 0);
      f.is_impossible = example.is_impossible;
      const int64_t span_end = spans[s].start + spans[s].length - 1;
      if (!example.is_impossible && tok_start >= 0 && tok_start >= spans[s].start &&
          tok_end <= span_end) {
        f.start_position = tok_start - spans[s].start + offset;
        f.end_position = tok_end - spans[s].start + offset;
      }
      features.push_back(std::move(f));
    }
  }
  return features;
}

namespace {

// squad_final_text's answer as characters [first, second) of orig_text.
std::pair<std::size_t, std::size_t> final_text_span(const std::string& pred_text,
                                                    const std::string& orig_text,
                                                    bool do_lower_case) {
  const data::WordPieceTokenizer basic(std::vector<std::string>{"[UNK]"}, do_lower_case);
  std::u32string tok;
  for (const auto& word : basic.basic_tokenize(orig_text)) {
    if (!tok.empty()) tok += U' ';
    for (const char32_t c : unicode::decode_utf8(word)) tok += c;
  }
  std::u32string pred;
  for (const char32_t c : unicode::decode_utf8(pred_text)) pred += c;
  std::u32string orig;
  for (const char32_t c : unicode::decode_utf8(orig_text)) orig += c;
  const std::pair<std::size_t, std::size_t> whole{0, orig.size()};
  const std::size_t start = tok.find(pred);
  if (pred.empty() || start == std::u32string::npos) return whole;
  const std::size_t end = start + pred.size() - 1;
  // Both texts without their spaces, with each character's place in the text
  // with them; they must agree in length to map one onto the other.
  auto strip = [](const std::u32string& text, std::vector<std::size_t>& to_spaced) {
    std::u32string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (text[i] == U' ') continue;
      to_spaced.push_back(i);
      out += text[i];
    }
    return out;
  };
  std::vector<std::size_t> orig_map, tok_map;
  const std::u32string orig_ns = strip(orig, orig_map);
  const std::u32string tok_ns = strip(tok, tok_map);
  if (orig_ns.size() != tok_ns.size()) return whole;
  auto to_orig = [&](std::size_t spaced) -> std::optional<std::size_t> {
    const auto it = std::lower_bound(tok_map.begin(), tok_map.end(), spaced);
    if (it == tok_map.end() || *it != spaced) return std::nullopt;
    return orig_map[static_cast<std::size_t>(it - tok_map.begin())];
  };
  const auto orig_start = to_orig(start), orig_end = to_orig(end);
  if (!orig_start || !orig_end) return whole;
  return {*orig_start, *orig_end + 1};
}

}  // namespace

std::string squad_final_text(const std::string& pred_text, const std::string& orig_text,
                             bool do_lower_case) {
  const auto [first, end] = final_text_span(pred_text, orig_text, do_lower_case);
  const std::vector<char32_t> orig = unicode::decode_utf8(orig_text);
  return utf8(std::u32string(orig.begin() + static_cast<std::ptrdiff_t>(first),
                             orig.begin() + static_cast<std::ptrdiff_t>(end)));
}

namespace {

// The n largest logits' positions, highest first (ties: the earlier).
std::vector<int64_t> best_indexes(const std::vector<float>& logits, int64_t n) {
  std::vector<int64_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return logits[static_cast<std::size_t>(a)] > logits[static_cast<std::size_t>(b)];
  });
  if (static_cast<int64_t>(order.size()) > n) order.resize(static_cast<std::size_t>(n));
  return order;
}

// The text of pieces: WordPiece joins them and glues "##" continuations;
// SentencePiece's "▁" marks a word's start.
std::string pieces_text(const FinetuningTokenizer& tokenizer, const std::vector<int64_t>& ids) {
  std::string out;
  for (const int64_t id : ids) {
    std::string piece = tokenizer.piece(id);
    if (tokenizer.kind() == FinetuningTokenizer::Kind::kWordPiece) {
      if (piece.rfind("##", 0) == 0)
        out += piece.substr(2);
      else
        out += (out.empty() ? "" : " ") + piece;
    } else {
      out += piece;
    }
  }
  return out;
}

// Where character `index` of doc words `first`... joined by single spaces
// lies in the example's context (a character of a word, not a space).
int64_t context_offset(const SquadExample& example, int64_t first, std::size_t index) {
  std::size_t at = 0;
  for (auto w = static_cast<std::size_t>(first); w < example.doc_tokens.size(); ++w) {
    const std::size_t length = unicode::decode_utf8(example.doc_tokens[w]).size();
    if (index < at + length)
      return example.doc_token_offsets.at(w) + static_cast<int64_t>(index - at);
    at += length + 1;
  }
  return -1;
}

}  // namespace

SquadPredictions postprocess_squad(const FinetuningTokenizer& tokenizer,
                                   const std::vector<SquadExample>& examples,
                                   const std::vector<SquadFeature>& features,
                                   const std::vector<SquadRawResult>& results,
                                   const SquadPostprocessOptions& o) {
  std::map<int64_t, const SquadRawResult*> by_id;
  for (const auto& r : results) by_id[r.unique_id] = &r;
  std::vector<std::vector<const SquadFeature*>> of_example(examples.size());
  for (const auto& f : features)
    if (f.example_index >= 0 && f.example_index < static_cast<int64_t>(examples.size()))
      of_example[static_cast<std::size_t>(f.example_index)].push_back(&f);

  struct Prelim {
    const SquadFeature* feature;
    int64_t start, end;
    double start_logit, end_logit;
  };
  SquadPredictions out;
  for (std::size_t e = 0; e < examples.size(); ++e) {
    const SquadExample& example = examples[e];
    std::vector<Prelim> prelim;
    double null_score = 0, null_start = 0, null_end = 0;
    bool have_null = false;
    for (const SquadFeature* f : of_example[e]) {
      const auto it = by_id.find(f->unique_id);
      if (it == by_id.end()) continue;
      const SquadRawResult& r = *it->second;
      const auto tokens = static_cast<int64_t>(f->tokens.size());
      if (o.version_2_with_negative && !r.start_logits.empty() && !r.end_logits.empty()) {
        const double score = r.start_logits[0] + r.end_logits[0];
        if (!have_null || score < null_score) {
          null_score = score;
          null_start = r.start_logits[0];
          null_end = r.end_logits[0];
          have_null = true;
        }
      }
      for (const int64_t s : best_indexes(r.start_logits, o.n_best_size))
        for (const int64_t t : best_indexes(r.end_logits, o.n_best_size)) {
          if (s >= tokens || t >= tokens || !f->token_to_orig_map.count(s) ||
              !f->token_to_orig_map.count(t))
            continue;
          const auto max_context = f->token_is_max_context.find(s);
          if (max_context == f->token_is_max_context.end() || !max_context->second) continue;
          if (t < s || t - s + 1 > o.max_answer_length) continue;
          prelim.push_back({f, s, t, r.start_logits[static_cast<std::size_t>(s)],
                            r.end_logits[static_cast<std::size_t>(t)]});
        }
    }
    if (have_null) prelim.push_back({nullptr, 0, 0, null_start, null_end});
    std::stable_sort(prelim.begin(), prelim.end(), [](const Prelim& a, const Prelim& b) {
      return a.start_logit + a.end_logit > b.start_logit + b.end_logit;
    });
    std::vector<SquadNbestEntry> nbest;
    std::vector<std::string> seen;
    for (const Prelim& p : prelim) {
      if (static_cast<int64_t>(nbest.size()) >= o.n_best_size) break;
      std::string text;
      int64_t start_char = -1, end_char = -1;
      if (p.feature && p.start > 0) {
        const int64_t first = p.feature->token_to_orig_map.at(p.start);
        const int64_t last = p.feature->token_to_orig_map.at(p.end);
        const std::string orig = join(example.doc_tokens, static_cast<std::size_t>(first),
                                      static_cast<std::size_t>(last) + 1);
        const std::vector<char32_t> chars = unicode::decode_utf8(orig);
        std::pair<std::size_t, std::size_t> span{0, chars.size()};
        if (tokenizer.kind() == FinetuningTokenizer::Kind::kWordPiece) {
          const std::vector<int64_t> ids(p.feature->tokens.begin() + p.start,
                                         p.feature->tokens.begin() + p.end + 1);
          span = final_text_span(whitespace_joined(pieces_text(tokenizer, ids)), orig,
                                 o.do_lower_case);
        }
        text = utf8(std::u32string(chars.begin() + static_cast<std::ptrdiff_t>(span.first),
                                   chars.begin() + static_cast<std::ptrdiff_t>(span.second)));
        if (!example.doc_token_offsets.empty()) {
          start_char = context_offset(example, first, span.first);
          end_char = context_offset(example, first, span.second - 1) + 1;
        }
      }
      if (std::find(seen.begin(), seen.end(), text) != seen.end()) continue;
      seen.push_back(text);
      nbest.push_back({text, p.start_logit, p.end_logit, 0, start_char, end_char});
    }
    if (o.version_2_with_negative && have_null &&
        std::find(seen.begin(), seen.end(), std::string()) == seen.end())
      nbest.push_back({"", null_start, null_end, 0, -1, -1});
    if (nbest.empty()) nbest.push_back({"empty", 0, 0, 0, -1, -1});
    // Probabilities: a softmax over the entries' total scores.
    double top = -INFINITY, sum = 0;
    for (const auto& n : nbest) top = std::max(top, n.start_logit + n.end_logit);
    for (auto& n : nbest) sum += (n.probability = std::exp(n.start_logit + n.end_logit - top));
    for (auto& n : nbest) n.probability /= sum;

    if (!o.version_2_with_negative) {
      out.answers[example.qas_id] = nbest.front().text;
    } else {
      const auto best = std::find_if(nbest.begin(), nbest.end(),
                                     [](const SquadNbestEntry& n) { return !n.text.empty(); });
      const double diff =
          best == nbest.end() ? INFINITY : null_score - best->start_logit - best->end_logit;
      out.scores_diff[example.qas_id] = diff;
      out.answers[example.qas_id] =
          diff > o.null_score_diff_threshold || best == nbest.end() ? "" : best->text;
    }
    out.nbest[example.qas_id] = std::move(nbest);
  }
  return out;
}

int64_t write_squad_records(const std::vector<SquadFeature>& features, bool is_training,
                            const std::string& path) {
  AtomicFile file(path);
  data::TFRecordWriter writer(file.temporary_path());
  for (const auto& f : features) {
    data::Example record;
    record["unique_ids"] = data::FeatureValue::of_ints({f.unique_id});
    record["input_ids"] = data::FeatureValue::of_ints(f.input_ids);
    record["input_mask"] = data::FeatureValue::of_ints(f.input_mask);
    record["segment_ids"] = data::FeatureValue::of_ints(f.segment_ids);
    record["start_positions"] = data::FeatureValue::of_ints({f.start_position});
    record["end_positions"] = data::FeatureValue::of_ints({f.end_position});
    if (is_training)
      record["is_impossible"] = data::FeatureValue::of_ints({f.is_impossible ? 1 : 0});
    writer.write(data::serialize_example(record));
  }
  writer.close();
  file.commit();
  return static_cast<int64_t>(features.size());
}

FinetuningDataReport create_squad_data(const FinetuningDataOptions& o) {
  const FinetuningDataOptions& squad = o;
  if (squad.squad_data_file.empty())
    throw Error("--squad_data_file is empty: name the SQuAD JSON file to convert");
  if (!o.eval_data_output_path.empty())
    throw Error(
        "--eval_data_output_path is not used for squad: the evaluation reads the SQuAD JSON "
        "itself (task.validation_data.input_path)");
  const auto tokenizer = open_finetuning_tokenizer(o, {{"--squad_data_file", o.squad_data_file}});
  const SquadReadReport read = read_squad_examples(squad.squad_data_file, /*is_training=*/true,
                                                   squad.version_2_with_negative);
  SquadConversionOptions conversion;
  conversion.max_seq_length = o.max_seq_length;
  conversion.doc_stride = squad.doc_stride;
  conversion.max_query_length = squad.max_query_length;
  conversion.is_training = true;
  const auto features = convert_squad_examples(*tokenizer, read.examples, conversion);
  FinetuningDataReport report;
  report.train_examples = write_squad_records(features, true, o.train_data_output_path);
  json meta = {{"task_type", "bert_squad"},
               {"train_data_size", report.train_examples},
               {"max_seq_length", o.max_seq_length},
               {"max_query_length", squad.max_query_length},
               {"doc_stride", squad.doc_stride},
               {"version_2_with_negative", squad.version_2_with_negative},
               {"questions", static_cast<int64_t>(read.examples.size())},
               {"skipped_questions", read.skipped}};
  report.meta_data = meta.dump(2) + "\n";
  write_file_atomically(o.meta_data_file_path, report.meta_data);
  return report;
}

void QADataConfig::visit(config::Visitor& v) {
  config::DataConfig::visit(v);
  v("seq_length", seq_length, "Tokens per window: the length of input_ids.");
  v("version_2_with_negative", version_2_with_negative,
    "SQuAD v2.0: questions may have no answer (scored by the no-answer logit).");
  v("input_preprocessed_data_path", input_preprocessed_data_path,
    "Evaluation: the folder the converted windows are written to (empty: a temporary one).");
  v("doc_stride", doc_stride, "Evaluation: pieces between the starts of two windows.");
  v("query_length", query_length, "Evaluation: the question's pieces kept at most.");
  v("vocab_file", vocab_file, "The tokenizer (vocab.txt or a SentencePiece model).");
  v("tokenization", tokenization, "WordPiece or SentencePiece: what vocab_file is.");
  v("do_lower_case", do_lower_case, "Lower-case (and strip accents) before tokenizing.");
}

void QADataConfig::validate() const {
  validate_reading();
  config::check_range("seq_length", seq_length, config::Range::at_least(8));
  config::check_range("doc_stride", doc_stride, config::Range::at_least(1));
  config::check_range("query_length", query_length, config::Range::at_least(1));
  if (!is_training.value_or(false) && query_length + 4 > seq_length)
    config::refuse("query_length", std::to_string(query_length) +
                                       " leaves no room for the document in seq_length " +
                                       std::to_string(seq_length));
  if (tokenization != "WordPiece" && tokenization != "SentencePiece")
    config::refuse("tokenization", "'" + tokenization + "' is not one of WordPiece, SentencePiece");
  if (file_type != "tfrecord" && file_type != "tfrecord_compressed")
    config::refuse("file_type", "'" + file_type + "' is not one of tfrecord, tfrecord_compressed");
}

std::vector<config::IgnoredKey> QADataConfig::ignored_keys() const {
  std::vector<config::IgnoredKey> out = config::DataConfig::ignored_keys();
  if (!is_training.value_or(false)) return out;
  const QADataConfig defaults;
  const char* why = "training reads create_finetuning_data's records, whose windows its flags made";
  config::note_ignored(out, "doc_stride", doc_stride, defaults.doc_stride, why);
  config::note_ignored(out, "query_length", query_length, defaults.query_length, why);
  config::note_ignored(out, "input_preprocessed_data_path", input_preprocessed_data_path,
                       defaults.input_preprocessed_data_path, why);
  return out;
}

DatasetPtr build_squad_inputs(const QADataConfig& params, const InputContext& input_context,
                              int64_t vocab_size) {
  if (params.input_path.empty())
    config::refuse("input_path", "is empty; name the TFRecord files create_finetuning_data wrote");
  using data::DType;
  using data::FixedLenFeature;
  auto spec = std::make_shared<data::ParseSpec>();
  for (const char* name : {"input_ids", "input_mask", "segment_ids"})
    (*spec)[name] = FixedLenFeature{{params.seq_length}, DType::kInt64, std::nullopt};
  for (const char* name : {"unique_ids", "start_positions", "end_positions"})
    (*spec)[name] = FixedLenFeature{{1}, DType::kInt64, std::nullopt};
  std::shared_ptr<const data::ParseSpec> frozen = spec;
  const int64_t length = params.seq_length;
  data::LocatedMapFn map_fn = [frozen, vocab_size, length](const std::string& record,
                                                           const data::RecordLocation& where) {
    const std::string at = record_place(where);
    Batch parsed = parse_record(record, where, *frozen, at);
    check_input_ids(parsed.at("input_ids"), vocab_size, at);
    for (const char* name : {"start_positions", "end_positions"}) {
      const int64_t p = parsed.at(name).item<int64_t>();
      if (p < 0 || p >= length)
        throw data::DataError(at + ": feature '" + name + "' is " + std::to_string(p) +
                              ", outside the " + std::to_string(length) + " tokens");
    }
    return Batch{{"input_word_ids", parsed.at("input_ids")},
                 {"input_mask", parsed.at("input_mask")},
                 {"input_type_ids", parsed.at("segment_ids")},
                 {"unique_ids", parsed.at("unique_ids").reshape({})},
                 {"start_positions", parsed.at("start_positions").reshape({})},
                 {"end_positions", parsed.at("end_positions").reshape({})}};
  };
  return std::make_shared<data::InputPipeline>(params, std::move(map_fn), data::BatchingOptions{},
                                               input_context);
}

}  // namespace garden::nlp
