#include "garden/nlp/data/sentence_pairs.h"

#include "garden/base/encoding.h"
#include "garden/base/error.h"
#include "garden/data/parse_spec.h"
#include "garden/data/record_source.h"
#include "garden/data/text_readers.h"
#include "garden/data/tfrecord.h"

namespace garden::nlp {

namespace {
enum class PairFormat { kTsv, kAligned, kExample };

PairFormat pair_format(const TranslationDataConfig& data) {
  if (data.file_type == "tsv") return PairFormat::kTsv;
  if (data.file_type == "aligned") return PairFormat::kAligned;
  return PairFormat::kExample;
}
}  // namespace

std::string pair_reader_file_type(const TranslationDataConfig& data) {
  if (data.file_type == "tsv") return "text";
  if (data.file_type == "aligned") return "aligned:" + data.tgt_lang;
  return data.file_type;
}

struct PairDecoder::Impl {
  PairFormat format;
  std::string src_lang, tgt_lang;
  data::ParseSpec spec;
};

PairDecoder::PairDecoder(const TranslationDataConfig& data)
    : impl_(std::make_unique<Impl>(Impl{pair_format(data), data.src_lang, data.tgt_lang, {}})) {
  if (impl_->format == PairFormat::kExample) {
    data::FixedLenFeature text{{}, data::DType::kString, std::nullopt};
    impl_->spec[impl_->src_lang] = text;
    impl_->spec[impl_->tgt_lang] = text;
  }
}

PairDecoder::~PairDecoder() = default;

void PairDecoder::operator()(const std::string& record, const data::RecordLocation& where,
                             std::string& source, std::string& target) const {
  switch (impl_->format) {
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
      data::ParsedFeatures parsed = data::parse(example, impl_->spec, where);
      source = std::move(parsed.strings.at(impl_->src_lang).at(0));
      target = std::move(parsed.strings.at(impl_->tgt_lang).at(0));
      return;
    }
  }
}

std::string PairDecoder::utf8_error(const std::string& source, const std::string& target,
                                    const data::RecordLocation& where) const {
  const std::string line = std::to_string(where.index + 1);
  for (const bool is_target : {false, true}) {
    const std::string problem = unicode::utf8_error(is_target ? target : source);
    if (problem.empty()) continue;
    switch (impl_->format) {
      case PairFormat::kTsv:
        return "TSV file '" + where.file + "' line " + line + ", column " +
               (is_target ? "2 (target)" : "1 (source)") + ": " + problem;
      case PairFormat::kAligned:
        return "file '" +
               (is_target ? data::aligned_target_path(where.file, impl_->tgt_lang) : where.file) +
               "' line " + line + ": " + problem;
      case PairFormat::kExample:
        return "TFRecord file '" + where.file + "', record " + std::to_string(where.index) +
               ", feature '" + (is_target ? impl_->tgt_lang : impl_->src_lang) + "': " + problem;
    }
  }
  return "";
}

void for_each_pair(const TranslationDataConfig& data,
                   const std::function<void(int64_t, const std::string&, const std::string&)>& fn) {
  if (data.input_path.empty()) throw Error("the translation data has no input_path");
  const std::vector<std::string> files = data::match_files(data.input_path);
  const PairDecoder decode(data);
  std::string record, source, target;
  for (std::size_t f = 0; f < files.size(); ++f) {
    auto reader = data::open_record_reader(files[f], pair_reader_file_type(data),
                                           data::tfrecord_options(data));
    int64_t index = 0;
    while (reader->next(record)) {
      const data::RecordLocation where{files[f], index};
      decode(record, where, source, target);
      if (std::string problem = decode.utf8_error(source, target, where); !problem.empty())
        throw Error(problem);
      fn(pair_unique_id(static_cast<int64_t>(f), index), source, target);
      ++index;
    }
  }
}

std::vector<SentencePair> read_sentence_pairs(const TranslationDataConfig& data) {
  std::vector<SentencePair> pairs;
  for_each_pair(data, [&](int64_t id, const std::string& source, const std::string& target) {
    pairs.push_back({id, source, target});
  });
  return pairs;
}

}  // namespace garden::nlp
