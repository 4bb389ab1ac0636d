// TensorFX's data reading: CSV lines and tf.Example records into
// Instances, and the DataSet over the files of a --data-* flag.
#include <glob.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>

#include "cells.h"
#include "garden/base/encoding.h"
#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/data/example.h"
#include "garden/data/tfrecord.h"
#include "garden/fx/data.h"

namespace garden::fx {

using cells::split;
using cells::to_number;
using cells::trim;

// ---- reading ------------------------------------------------------------------------

namespace {

Instances empty_instances(const Schema& schema, int64_t rows) {
  Instances instances;
  instances.rows = rows;
  for (const auto& field : schema.fields()) {
    if (field.numeric())
      instances.numeric[field.name] = torch::zeros({rows, field.length});
    else
      instances.discrete[field.name].assign(static_cast<std::size_t>(rows * field.length), "");
  }
  return instances;
}

}  // namespace

Instances parse_csv(const Schema& schema, const std::vector<std::string>& lines,
                    const std::string& source, bool prediction, int64_t first_line) {
  for (const auto& field : schema.fields())
    if (field.length != 1)
      throw Error(schema.source() + " field '" + field.name + "' has length " +
                  std::to_string(field.length) + "; CSV data takes fields of length 1");
  const auto& fields = schema.fields();
  Instances instances = empty_instances(schema, static_cast<int64_t>(lines.size()));
  std::vector<float*> columns(fields.size(), nullptr);
  for (std::size_t f = 0; f < fields.size(); ++f)
    if (fields[f].numeric()) columns[f] = instances.numeric.at(fields[f].name).data_ptr<float>();
  for (std::size_t r = 0; r < lines.size(); ++r) {
    std::string line = lines[r];
    if (!line.empty() && line.back() == '\r') line.pop_back();
    auto cells = cells::split_csv(line);
    const std::string where =
        source + " line " + std::to_string(first_line + static_cast<int64_t>(r));
    if (prediction && cells.size() + 1 == fields.size()) cells.insert(cells.begin(), "");
    if (cells.size() != fields.size())
      throw Error(where + " has " + std::to_string(cells.size()) + " columns; " + schema.source() +
                  " has " + std::to_string(fields.size()) + " fields");
    for (std::size_t f = 0; f < fields.size(); ++f) {
      if (!fields[f].numeric()) {
        instances.discrete[fields[f].name][r] = cells[f];
        continue;
      }
      const auto value = to_number(cells[f], fields[f].type == FieldType::kInteger);
      if (!value)
        throw Error(where + ", field '" + fields[f].name + "': '" + cells[f] + "' is not " +
                    (fields[f].type == FieldType::kInteger ? "an integer" : "a real number"));
      columns[f][r] = static_cast<float>(*value);
    }
  }
  return instances;
}

Instances parse_examples(const Schema& schema, const std::vector<std::string>& records,
                         const std::string& source) {
  Instances instances = empty_instances(schema, static_cast<int64_t>(records.size()));
  for (std::size_t r = 0; r < records.size(); ++r) {
    const std::string where = source + " record " + std::to_string(r + 1);
    data::Example example;
    try {
      example = data::parse_example(records[r]);
    } catch (const std::exception& e) {
      throw Error(where + " is not a tf.Example: " + e.what());
    }
    for (const auto& field : schema.fields()) {
      const auto it = example.find(field.name);
      if (it == example.end()) continue;  // TensorFX's default: 0 or ""
      const auto& value = it->second;
      const std::size_t length = static_cast<std::size_t>(field.length);
      if (field.length > 0 && value.size() != length)
        throw Error(where + ", field '" + field.name + "': " + std::to_string(value.size()) +
                    " values, the schema says " + std::to_string(field.length));
      if (!field.numeric()) {
        if (value.kind != data::FeatureValue::Kind::kBytes)
          throw Error(where + ", field '" + field.name + "' is a " + data::kind_name(value.kind) +
                      "; a discrete field is a bytes_list");
        for (std::size_t i = 0; i < length; ++i)
          instances.discrete[field.name][r * length + i] = value.bytes[i];
        continue;
      }
      if (value.kind == data::FeatureValue::Kind::kBytes)
        throw Error(where + ", field '" + field.name + "' is a bytes_list; a " +
                    field_type_name(field.type) + " field is a float_list or int64_list");
      auto row = instances.numeric.at(field.name)[static_cast<int64_t>(r)];
      for (std::size_t i = 0; i < length; ++i)
        row[static_cast<int64_t>(i)] = value.kind == data::FeatureValue::Kind::kFloat
                                           ? static_cast<double>(value.floats[i])
                                           : static_cast<double>(value.ints[i]);
    }
  }
  return instances;
}

Instances concatenate(const std::vector<Instances>& parts) {
  if (parts.empty()) return {};
  if (parts.size() == 1) return parts.front();
  Instances out;
  for (const auto& [name, tensor] : parts.front().numeric) {
    std::vector<at::Tensor> all;
    for (const auto& part : parts) all.push_back(part.numeric.at(name));
    out.numeric[name] = torch::cat(all, 0);
  }
  for (const auto& [name, values] : parts.front().discrete) {
    auto& all = out.discrete[name];
    for (const auto& part : parts)
      all.insert(all.end(), part.discrete.at(name).begin(), part.discrete.at(name).end());
  }
  for (const auto& part : parts) out.rows += part.rows;
  return out;
}

std::vector<std::string> match_files(const std::string& pattern, const std::string& what) {
  glob_t matches{};
  const int status = ::glob(pattern.c_str(), 0, nullptr, &matches);
  std::vector<std::string> files;
  if (status == 0)
    for (std::size_t i = 0; i < matches.gl_pathc; ++i) files.emplace_back(matches.gl_pathv[i]);
  globfree(&matches);
  if (files.empty()) throw Error(what + " '" + pattern + "' matches no file");
  std::sort(files.begin(), files.end());
  return files;
}

// ---- DataSet ------------------------------------------------------------------------

DataSet::DataSet(Format format, Schema schema, Metadata metadata,
                 std::optional<FeatureSet> features, std::map<std::string, std::string> sources)
    : format_(format),
      schema_(std::move(schema)),
      metadata_(std::move(metadata)),
      features_(std::move(features)),
      sources_(std::move(sources)) {
  if (features_) transformer_.emplace(schema_, metadata_, *features_);
}

namespace {
DataSet from_files(DataSet::Format format, const std::string& schema, const std::string& metadata,
                   const std::string& features, std::map<std::string, std::string> sources) {
  if (schema.empty()) throw Error("--data-schema is required: the schema of the data (YAML)");
  std::optional<FeatureSet> feature_set;
  if (!features.empty()) feature_set = FeatureSet::load(features);
  return DataSet(format, Schema::load(schema),
                 metadata.empty() ? Metadata() : Metadata::load(metadata), std::move(feature_set),
                 std::move(sources));
}
}  // namespace

DataSet DataSet::csv(const std::string& schema, const std::string& metadata,
                     const std::string& features, std::map<std::string, std::string> sources) {
  return from_files(Format::kCsv, schema, metadata, features, std::move(sources));
}

DataSet DataSet::examples(const std::string& schema, const std::string& metadata,
                          const std::string& features, std::map<std::string, std::string> sources) {
  return from_files(Format::kExamples, schema, metadata, features, std::move(sources));
}

const Transformer& DataSet::transformer() const {
  if (!transformer_) throw Error("the data set has no features (--data-features)");
  return *transformer_;
}

std::vector<std::string> DataSet::sources() const {
  std::vector<std::string> names;
  for (const auto& [name, path] : sources_)
    if (!path.empty()) names.push_back(name);
  return names;
}

std::string DataSet::source(const std::string& name) const {
  const auto it = sources_.find(name);
  return it == sources_.end() ? "" : it->second;
}

Instances DataSet::read(const std::string& name) const {
  const std::string pattern = source(name);
  if (pattern.empty())
    throw Error("the data set has no '" + name + "' source (--data-" + name + ")");
  std::vector<Instances> parts;
  for (const auto& file : match_files(pattern, "--data-" + name)) {
    if (format_ == Format::kCsv) {
      std::vector<std::string> lines;
      std::ifstream in(file);
      if (!in) throw Error("cannot read " + file);
      for (std::string line; std::getline(in, line);) lines.push_back(line);
      // A byte order mark (Excel's "CSV UTF-8") is not part of the first cell.
      if (!lines.empty() && lines[0].compare(0, 3, "\xEF\xBB\xBF") == 0) lines[0].erase(0, 3);
      // A final empty line is the file's end, not an instance.
      while (!lines.empty() && trim(lines.back()).empty()) lines.pop_back();
      parts.push_back(parse_csv(schema_, lines, file));
      check_targets(parts.back(),
                    [&file](std::size_t row) { return file + " line " + std::to_string(row + 1); });
    } else {
      std::vector<std::string> records;
      data::TFRecordReader reader(file);
      for (std::string record; reader.read(record);) records.push_back(record);
      parts.push_back(parse_examples(schema_, records, file));
      check_targets(parts.back(), [&file](std::size_t row) {
        return file + " record " + std::to_string(row + 1);
      });
    }
  }
  return concatenate(parts);
}

void DataSet::check_targets(const Instances& instances,
                            const std::function<std::string(std::size_t)>& where) const {
  if (!features_ || metadata_.empty()) return;
  for (const auto& feature : features_->features()) {
    if (feature.type != FeatureType::kTarget) continue;
    for (const auto& field : feature.fields) {
      const auto values = instances.discrete.find(field);
      if (values == instances.discrete.end() || !metadata_.has(field)) continue;
      const std::vector<std::string> labels = metadata_.entries(field);
      const std::size_t per_row =
          instances.rows > 0 ? values->second.size() / static_cast<std::size_t>(instances.rows) : 1;
      for (std::size_t i = 0; i < values->second.size(); ++i) {
        const std::string& value = values->second[i];
        const std::size_t row = i / std::max<std::size_t>(per_row, 1);
        if (std::find(labels.begin(), labels.end(), value) != labels.end()) continue;
        std::string list;
        for (const auto& label : labels) list += (list.empty() ? "" : ", ") + label;
        throw Error(where(row) + ", field '" + field + "': '" + value +
                    "' is not one of its labels in " + metadata_.source() + " (" + list + ")");
      }
    }
  }
}

Instances DataSet::parse(const std::vector<std::string>& instances, const std::string& what) const {
  if (format_ == Format::kCsv) return parse_csv(schema_, instances, what, /*prediction=*/true);
  return parse_examples(schema_, instances, what);
}

}  // namespace garden::fx
