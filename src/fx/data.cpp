#include "garden/fx/data.h"

#include <glob.h>
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "cells.h"
#include "garden/base/encoding.h"
#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/data/example.h"
#include "garden/data/tfrecord.h"

namespace garden::fx {

using cells::split;
using cells::to_number;
using cells::trim;

namespace {

YAML::Node load_yaml(const std::string& text, const std::string& source) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw Error(source + " is not valid YAML: " + e.what());
  }
}

// Runs a parser of a YAML file: a value of the wrong kind that yaml-cpp
// itself refuses (a list where a name belongs) is one line naming the file.
template <class F>
auto with_yaml_errors(const std::string& source, F&& parse) {
  try {
    return parse();
  } catch (const YAML::Exception& e) {
    throw Error(source + ": " + e.what());
  }
}

// A field or feature name: text a CSV header, a tf.Example key and a
// summary tag can carry (UTF-8, no control character).
std::string checked_name(const YAML::Node& node, const std::string& where) {
  const std::string name = node.as<std::string>();
  bool control = false;
  for (unsigned char c : name) control = control || c < 0x20 || c == 0x7f;
  if (name.empty() || control || garden::unicode::invalid_utf8_offset(name) != std::string::npos)
    throw Error(where + ": the name must be UTF-8 text without control characters");
  return name;
}

std::string scalar_text(const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  YAML::Emitter out;
  out.SetSeqFormat(YAML::Flow);
  out << node;
  return out.c_str();
}

}  // namespace

// ---- schema ------------------------------------------------------------------------

const char* field_type_name(FieldType type) {
  switch (type) {
    case FieldType::kInteger:
      return "integer";
    case FieldType::kReal:
      return "real";
    default:
      return "discrete";
  }
}

Schema::Schema(std::vector<SchemaField> fields) : fields_(std::move(fields)) {
  if (fields_.empty()) throw Error("a schema needs one or more fields");
}

Schema Schema::parse(const std::string& yaml, const std::string& source) {
  return with_yaml_errors(source, [&] { return parse_schema(yaml, source); });
}

Schema Schema::parse_schema(const std::string& yaml, const std::string& source) {
  const YAML::Node root = load_yaml(yaml, source);
  if (!root.IsMap() || !root["fields"] || !root["fields"].IsSequence())
    throw Error(source + " has no 'fields:' list (each entry: name, type: integer|real|discrete)");
  std::vector<SchemaField> fields;
  for (const auto& entry : root["fields"]) {
    const std::string where = source + " field " + std::to_string(fields.size() + 1);
    if (!entry.IsMap() || !entry["name"] || !entry["type"])
      throw Error(where + " needs a name and a type");
    SchemaField field;
    field.name = checked_name(entry["name"], where);
    const std::string type = entry["type"].as<std::string>();
    if (type == "integer")
      field.type = FieldType::kInteger;
    else if (type == "real")
      field.type = FieldType::kReal;
    else if (type == "discrete")
      field.type = FieldType::kDiscrete;
    else
      throw Error(source + " field '" + field.name + "' has type '" + type +
                  "'; the types are integer, real and discrete");
    if (entry["length"]) {
      try {
        field.length = entry["length"].as<int64_t>();
      } catch (const YAML::Exception&) {
        field.length = -1;
      }
      if (field.length < 0)
        throw Error(source + " field '" + field.name + "' has length '" +
                    scalar_text(entry["length"]) + "'; it must be a whole number >= 0");
    }
    for (const auto& other : fields)
      if (other.name == field.name) throw Error(source + " names field '" + field.name + "' twice");
    fields.push_back(std::move(field));
  }
  if (fields.empty()) throw Error(source + " lists no field");
  Schema schema(std::move(fields));
  schema.source_ = source;
  schema.text_ = yaml;
  return schema;
}

Schema Schema::load(const std::string& path) { return parse(read_file(path, "schema"), path); }

const SchemaField* Schema::find(const std::string& name) const {
  for (const auto& field : fields_)
    if (field.name == name) return &field;
  return nullptr;
}

std::vector<std::string> Schema::names() const {
  std::vector<std::string> names;
  for (const auto& field : fields_) names.push_back(field.name);
  return names;
}

std::string Schema::format() const {
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "fields" << YAML::Value << YAML::BeginSeq;
  for (const auto& field : fields_) {
    out << YAML::BeginMap << YAML::Key << "length" << YAML::Value << field.length << YAML::Key
        << "name" << YAML::Value << field.name << YAML::Key << "type" << YAML::Value
        << field_type_name(field.type) << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

// ---- metadata ------------------------------------------------------------------------

Metadata Metadata::parse(const std::string& json, const std::string& source) {
  Metadata metadata;
  try {
    metadata.json_ = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    throw Error(source + " is not valid JSON: " + e.what());
  }
  if (!metadata.json_.is_object())
    throw Error(source + " must be a JSON object with one entry per field");
  metadata.source_ = source;
  return metadata;
}

Metadata Metadata::load(const std::string& path) {
  return parse(read_file(path, "metadata"), path);
}

double Metadata::number(const std::string& field, const char* key) const {
  if (!json_.contains(field) || !json_.at(field).is_object() || !json_.at(field).contains(key))
    throw Error(source_ + " has no '" + key + "' for field '" + field + "'");
  const auto& value = json_.at(field).at(key);
  if (!value.is_number())
    throw Error(source_ + " field '" + field + "': '" + key + "' is " + value.dump() +
                ", not a number");
  return value.get<double>();
}

double Metadata::min(const std::string& field) const { return number(field, "min"); }
double Metadata::max(const std::string& field) const { return number(field, "max"); }

std::vector<std::string> Metadata::entries(const std::string& field) const {
  const nlohmann::json* list = nullptr;
  if (json_.contains(field) && json_.at(field).is_object()) {
    const auto& md = json_.at(field);
    if (md.contains("entries"))
      list = &md.at("entries");
    else if (md.contains("vocab") && md.at("vocab").is_object() &&
             md.at("vocab").contains("entries"))
      list = &md.at("vocab").at("entries");
  }
  if (!list)
    throw Error(source_ + " lists no entries for field '" + field +
                "' (\"entries\": [...] or \"vocab\": {\"entries\": [...]})");
  std::vector<std::string> entries;
  if (list->is_array())
    for (const auto& entry : *list)
      if (entry.is_string()) entries.push_back(entry.get<std::string>());
  if (!list->is_array() || entries.size() != list->size() || entries.empty())
    throw Error(source_ + " field '" + field +
                "': the entries must be a non-empty list of strings");
  return entries;
}

// ---- features ------------------------------------------------------------------------

const char* feature_type_name(FeatureType type) {
  switch (type) {
    case FeatureType::kIdentity:
      return "identity";
    case FeatureType::kTarget:
      return "target";
    case FeatureType::kConcat:
      return "concat";
    case FeatureType::kLog:
      return "log";
    case FeatureType::kScale:
      return "scale";
    case FeatureType::kBucketize:
      return "bucketize";
    default:
      return "one-hot";
  }
}

namespace {

Feature parse_feature(const YAML::Node& node, const std::string& source) {
  if (!node.IsMap() || !node["name"]) throw Error(source + ": every feature needs a name");
  Feature feature;
  feature.name = checked_name(node["name"], source + ": a feature");
  const std::string type = node["type"] ? node["type"].as<std::string>() : "identity";
  bool known = false;
  for (const auto t :
       {FeatureType::kIdentity, FeatureType::kTarget, FeatureType::kConcat, FeatureType::kLog,
        FeatureType::kScale, FeatureType::kBucketize, FeatureType::kOneHot})
    if (type == feature_type_name(t)) {
      feature.type = t;
      known = true;
    }
  if (!known)
    throw Error(source + " feature '" + feature.name + "' has type '" + type +
                "'; the types are identity, target, concat, log, scale, bucketize, one-hot");
  if (node["transform"]) {
    if (!node["transform"].IsMap())
      throw Error(source + " feature '" + feature.name + "': transform must be a mapping");
    for (const auto& item : node["transform"])
      feature.transform[item.first.as<std::string>()] =
          item.second.IsSequence() ? [&] {
            std::string joined;
            for (const auto& v : item.second) joined += (joined.empty() ? "" : ",") + v.as<std::string>();
            return joined;
          }()
                                   : scalar_text(item.second);
  }
  if (feature.type == FeatureType::kConcat) {
    if (!node["features"] || !node["features"].IsSequence() || node["features"].size() == 0)
      throw Error(source + " feature '" + feature.name + "' is a concat with no 'features:' list");
    for (const auto& part : node["features"])
      feature.features.push_back(parse_feature(part, source));
    return feature;
  }
  if (!node["fields"]) {
    feature.fields = {feature.name};
  } else if (node["fields"].IsSequence()) {
    for (const auto& f : node["fields"]) feature.fields.push_back(trim(f.as<std::string>()));
  } else {
    for (const auto& f : split(node["fields"].as<std::string>(), ','))
      feature.fields.push_back(trim(f));
  }
  return feature;
}

}  // namespace

FeatureSet::FeatureSet(std::vector<Feature> features) : features_(std::move(features)) {
  if (features_.empty()) throw Error("a feature set needs one or more features");
}

FeatureSet FeatureSet::parse(const std::string& yaml, const std::string& source) {
  return with_yaml_errors(source, [&] { return parse_features(yaml, source); });
}

FeatureSet FeatureSet::parse_features(const std::string& yaml, const std::string& source) {
  const YAML::Node root = load_yaml(yaml, source);
  if (!root.IsMap() || !root["features"] || !root["features"].IsSequence())
    throw Error(source + " has no 'features:' list");
  std::vector<Feature> features;
  for (const auto& node : root["features"]) {
    features.push_back(parse_feature(node, source));
    for (std::size_t i = 0; i + 1 < features.size(); ++i)
      if (features[i].name == features.back().name)
        throw Error(source + " names feature '" + features.back().name + "' twice");
  }
  if (features.empty()) throw Error(source + " lists no feature");
  FeatureSet set(std::move(features));
  set.source_ = source;
  set.text_ = yaml;
  return set;
}

FeatureSet FeatureSet::load(const std::string& path) {
  return parse(read_file(path, "features"), path);
}

const Feature* FeatureSet::find(const std::string& name) const {
  for (const auto& feature : features_)
    if (feature.name == name) return &feature;
  return nullptr;
}

const Feature* FeatureSet::target() const {
  for (const auto& feature : features_)
    if (feature.type == FeatureType::kTarget) return &feature;
  return nullptr;
}

// ---- transforms ----------------------------------------------------------------------

namespace {

std::vector<double> boundaries_of(const Feature& feature, const std::string& source) {
  const auto it = feature.transform.find("boundaries");
  if (it == feature.transform.end())
    throw Error(source + " feature '" + feature.name +
                "' is a bucketize with no transform.boundaries (\"1,2.5,4\")");
  std::vector<double> boundaries;
  for (const auto& part : split(it->second, ',')) {
    const auto value = to_number(part, false);
    if (!value || trim(part).empty())
      throw Error(source + " feature '" + feature.name + "': boundary '" + trim(part) +
                  "' is not a number");
    if (!boundaries.empty() && *value <= boundaries.back())
      throw Error(source + " feature '" + feature.name + "': the boundaries must increase");
    boundaries.push_back(*value);
  }
  return boundaries;
}

std::pair<double, double> target_range(const Feature& feature, const std::string& source) {
  double low = 0.0, high = 1.0;
  for (const auto& [key, value] : feature.transform) {
    const auto number = to_number(value, false);
    if ((key != "min" && key != "max") || !number)
      throw Error(source + " feature '" + feature.name +
                  "': scale takes transform.min and "
                  "transform.max (numbers), not " +
                  key + ": '" + value + "'");
    (key == "min" ? low : high) = *number;
  }
  return {low, high};
}

}  // namespace

Transformer::Transformer(const Schema& schema, const Metadata& metadata, const FeatureSet& features)
    : schema_(schema), metadata_(metadata), features_(features) {
  for (const auto& feature : features_.features()) {
    const int64_t width = check(feature, /*nested=*/false);
    if (width > 0) widths_[feature.name] = width;
  }
}

int64_t Transformer::check(const Feature& feature, bool nested) const {
  const std::string& source = features_.source();
  const std::string where = source + " feature '" + feature.name + "'";
  if (feature.type == FeatureType::kConcat) {
    int64_t width = 0;
    for (const auto& part : feature.features) {
      const int64_t w = check(part, /*nested=*/true);
      if (w <= 0)
        throw Error(where + ": part '" + part.name +
                    "' is not numeric, so it cannot be concatenated");
      width += w;
    }
    return width;
  }
  if (feature.fields.size() != 1)
    throw Error(where + " names " + std::to_string(feature.fields.size()) + " fields; a " +
                feature_type_name(feature.type) + " takes one");
  const std::string& name = feature.fields.front();
  const SchemaField* field = schema_.find(name);
  if (!field)
    throw Error(where + " names field '" + name + "', which " + schema_.source() +
                " does not have");
  if (field->length != 1 && feature.type != FeatureType::kIdentity &&
      feature.type != FeatureType::kTarget)
    throw Error(where + ": field '" + name + "' has length " + std::to_string(field->length) +
                "; " + feature_type_name(feature.type) + " takes fields of length 1");
  switch (feature.type) {
    case FeatureType::kIdentity:
    case FeatureType::kTarget:
      if (nested && !field->numeric())
        throw Error(where + ": field '" + name + "' is discrete, so it cannot be concatenated");
      if (feature.type == FeatureType::kTarget && nested)
        throw Error(where + ": a target cannot be part of a concat");
      return field->numeric() ? field->length : 0;
    case FeatureType::kLog:
    case FeatureType::kScale:
    case FeatureType::kBucketize:
      if (!field->numeric())
        throw Error(where + ": a " + std::string(feature_type_name(feature.type)) +
                    " transform needs a numeric field, and '" + name + "' is discrete");
      if (feature.type == FeatureType::kScale) {
        const double low = metadata_.min(name), high = metadata_.max(name);
        if (!(high > low))
          throw Error(metadata_.source() + " field '" + name + "': max must be above min to scale");
        target_range(feature, source);
      }
      if (feature.type == FeatureType::kBucketize)
        return static_cast<int64_t>(boundaries_of(feature, source).size()) + 1;
      return 1;
    case FeatureType::kOneHot:
      if (field->numeric())
        throw Error(where + ": a one-hot transform needs a discrete field, and '" + name + "' is " +
                    field_type_name(field->type));
      return static_cast<int64_t>(metadata_.entries(name).size()) + 1;
    default:
      return 0;
  }
}

at::Tensor Transformer::numeric(const Feature& feature, const Instances& instances) const {
  if (feature.type == FeatureType::kConcat) {
    std::vector<at::Tensor> parts;
    for (const auto& part : feature.features) parts.push_back(numeric(part, instances));
    return torch::cat(parts, 1);
  }
  const std::string& name = feature.fields.front();
  if (feature.type == FeatureType::kOneHot) {
    const auto entries = metadata_.entries(name);
    const auto& values = instances.discrete.at(name);
    at::Tensor out = torch::zeros({instances.rows, static_cast<int64_t>(entries.size()) + 1});
    auto a = out.accessor<float, 2>();
    for (int64_t r = 0; r < instances.rows; ++r) {
      const auto it =
          std::find(entries.begin(), entries.end(), values[static_cast<std::size_t>(r)]);
      a[r][it - entries.begin()] = 1.0f;  // the last slot: not in the metadata
    }
    return out;
  }
  const at::Tensor x = instances.numeric.at(name);
  switch (feature.type) {
    case FeatureType::kLog:
      return torch::log(x + 1.0);
    case FeatureType::kScale: {
      const double low = metadata_.min(name), high = metadata_.max(name);
      at::Tensor v = (x - low) / (high - low);
      const auto [to_low, to_high] = target_range(feature, features_.source());
      if (to_low != 0.0 || to_high != 1.0) v = v * (to_high - to_low) + to_low;
      return v;
    }
    case FeatureType::kBucketize: {
      const auto boundaries = boundaries_of(feature, features_.source());
      at::Tensor out = torch::zeros({instances.rows, static_cast<int64_t>(boundaries.size()) + 1});
      auto a = out.accessor<float, 2>();
      const at::Tensor values = x.reshape({-1}).contiguous();
      const float* v = values.data_ptr<float>();
      for (int64_t r = 0; r < instances.rows; ++r) {
        // The number of boundaries <= x.
        const auto bucket =
            std::upper_bound(boundaries.begin(), boundaries.end(), static_cast<double>(v[r])) -
            boundaries.begin();
        a[r][bucket] = 1.0f;
      }
      return out;
    }
    default:
      return x;
  }
}

Transformed Transformer::transform(const Instances& instances) const {
  Transformed out;
  out.rows = instances.rows;
  for (const auto& feature : features_.features()) {
    const bool discrete_field =
        (feature.type == FeatureType::kIdentity || feature.type == FeatureType::kTarget) &&
        !schema_.find(feature.fields.front())->numeric();
    if (discrete_field)
      out.strings[feature.name] = instances.discrete.at(feature.fields.front());
    else
      out.tensors[feature.name] = numeric(feature, instances);
  }
  return out;
}

int64_t Transformer::width(const std::string& feature) const {
  const auto it = widths_.find(feature);
  if (it == widths_.end())
    throw Error(features_.source() + " has no numeric feature '" + feature + "'");
  return it->second;
}

}  // namespace garden::fx
