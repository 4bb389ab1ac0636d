// TensorFX's data description (tensorfx.data): a schema (the fields of each
// instance), metadata (statistics and vocabularies), features (what the model
// sees, made from fields by transforms), and data sets of CSV lines or
// tf.Example records. The files are read as TensorFX writes them.
//
//   auto dataset = fx::DataSet::csv("schema.yaml", "metadata.json", "features.yaml",
//                                   {{"train", "train.csv"}, {"eval", "eval.csv"}});
//   fx::Instances train = dataset.read("train");
//   fx::Transformed inputs = dataset.transformer().transform(train);
//   // inputs.tensors["X"]: [rows, width] float32; inputs.strings["Y"]: labels
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

namespace garden::fx {

// ---- schema -------------------------------------------------------------------

enum class FieldType { kInteger, kReal, kDiscrete };
const char* field_type_name(FieldType type);

struct SchemaField {
  std::string name;
  FieldType type = FieldType::kReal;
  int64_t length = 1;  // values per instance (TensorFX's valence)
  bool numeric() const { return type != FieldType::kDiscrete; }
};

// schema.yaml: `fields:`, a list of {name, type: integer|real|discrete,
// length (default 1)}, in CSV column order.
class Schema {
 public:
  explicit Schema(std::vector<SchemaField> fields);
  // `source` names the text in errors (a file path).
  static Schema parse(const std::string& yaml, const std::string& source = "the schema");
  static Schema load(const std::string& path);

  const std::vector<SchemaField>& fields() const { return fields_; }
  // The field, or nullptr.
  const SchemaField* find(const std::string& name) const;
  std::vector<std::string> names() const;
  std::string format() const;  // the YAML TensorFX writes
  const std::string& source() const { return source_; }
  // The text it was parsed from (format() for one made in code).
  std::string text() const { return text_.empty() ? format() : text_; }

 private:
  static Schema parse_schema(const std::string& yaml, const std::string& source);
  std::vector<SchemaField> fields_;
  std::string source_ = "the schema";
  std::string text_;
};

// ---- metadata -----------------------------------------------------------------

// metadata.json: per field, min / max / mean / std for numeric fields and the
// vocabulary of a discrete one, as "entries" or "vocab": {"entries"} (TensorFX
// wrote both).
class Metadata {
 public:
  Metadata() = default;
  static Metadata parse(const std::string& json, const std::string& source = "the metadata");
  static Metadata load(const std::string& path);

  bool empty() const { return json_.empty(); }
  bool has(const std::string& field) const { return json_.contains(field); }
  // Throw garden::Error naming the field and the file when missing.
  double min(const std::string& field) const;
  double max(const std::string& field) const;
  std::vector<std::string> entries(const std::string& field) const;
  const std::string& source() const { return source_; }
  std::string text() const { return json_.dump(2) + "\n"; }

 private:
  double number(const std::string& field, const char* key) const;
  nlohmann::json json_ = nlohmann::json::object();
  std::string source_ = "the metadata";
};

// ---- features -----------------------------------------------------------------

// TensorFX's feature types; `one-hot` is written with a hyphen.
enum class FeatureType { kIdentity, kTarget, kConcat, kLog, kScale, kBucketize, kOneHot };
const char* feature_type_name(FeatureType type);

struct Feature {
  std::string name;
  FeatureType type = FeatureType::kIdentity;
  std::vector<std::string> fields;  // the source fields (default: the feature's name)
  std::vector<Feature> features;    // concat's parts
  // scale: min, max (the target range, default 0 and 1); bucketize:
  // boundaries ("1,2.5,4", or a list).
  std::map<std::string, std::string> transform;
};

// features.yaml: `features:`, a list of {name, type (default identity),
// fields (a name, "a,b", or a list; default the name), features (concat),
// transform}.
class FeatureSet {
 public:
  explicit FeatureSet(std::vector<Feature> features);
  static FeatureSet parse(const std::string& yaml, const std::string& source = "the features");
  static FeatureSet load(const std::string& path);

  const std::vector<Feature>& features() const { return features_; }
  const Feature* find(const std::string& name) const;
  // The first top-level feature of type target, or nullptr.
  const Feature* target() const;
  const std::string& source() const { return source_; }
  // The text it was parsed from ("" for one made in code).
  const std::string& text() const { return text_; }

 private:
  static FeatureSet parse_features(const std::string& yaml, const std::string& source);
  std::vector<Feature> features_;
  std::string source_ = "the features";
  std::string text_;
};

// ---- instances and transforms -----------------------------------------------------

// Parsed instances, one column per schema field: numeric fields as float32
// [rows, length] (integers too), discrete fields as rows * length strings.
// An empty CSV cell is 0 or "" (TensorFX's defaults).
struct Instances {
  int64_t rows = 0;
  std::map<std::string, at::Tensor> numeric;
  std::map<std::string, std::vector<std::string>> discrete;
};

// What the transforms make, by top-level feature name: numeric features as
// float32 [rows, width]; identity and target of a discrete field as strings.
struct Transformed {
  int64_t rows = 0;
  std::map<std::string, at::Tensor> tensors;
  std::map<std::string, std::vector<std::string>> strings;
};

// Applies a FeatureSet to Instances, as tensorfx.data.Transformer:
//   identity   the field as it is
//   target     the field as it is (a discrete target stays its labels)
//   concat     its parts side by side (all numeric)
//   log        ln(x + 1)
//   scale      (x - min) / (max - min) from the metadata, then onto
//              [transform.min, transform.max] (default [0, 1]); no clipping
//   bucketize  one-hot over len(boundaries) + 1 buckets; a value equal to a
//              boundary goes to the bucket above it
//   one-hot    one slot per metadata entry plus one for any other value
// The constructor checks every feature against the schema and metadata and
// throws one line naming the features file, the feature and the field.
class Transformer {
 public:
  Transformer(const Schema& schema, const Metadata& metadata, const FeatureSet& features);
  Transformed transform(const Instances& instances) const;
  // Columns of a numeric top-level feature (1 for identity of a real field).
  int64_t width(const std::string& feature) const;

 private:
  int64_t check(const Feature& feature, bool nested) const;
  at::Tensor numeric(const Feature& feature, const Instances& instances) const;

  Schema schema_;
  Metadata metadata_;
  FeatureSet features_;
  std::map<std::string, int64_t> widths_;
};

// ---- data sets ----------------------------------------------------------------------

// CSV lines (no header; one column per schema field, in order; every field of
// length 1). With `prediction`, a line one column short has no target: an
// empty first column is put in front, as TensorFX does. `source` names the
// lines in errors ("data/train.csv"); `first_line` numbers them.
Instances parse_csv(const Schema& schema, const std::vector<std::string>& lines,
                    const std::string& source, bool prediction = false, int64_t first_line = 1);
// Serialized tf.Example records: each schema field a feature of its kind
// (bytes_list for discrete, float_list or int64_list for numeric) with
// `length` values; a missing feature is 0 or "".
Instances parse_examples(const Schema& schema, const std::vector<std::string>& records,
                         const std::string& source);
// Instances of one after another (rows appended).
Instances concatenate(const std::vector<Instances>& parts);

// tensorfx.data.DataSet: named sources ("train", "eval") of one format, and
// the schema, metadata and features that describe them.
class DataSet {
 public:
  enum class Format { kCsv, kExamples };
  DataSet(Format format, Schema schema, Metadata metadata, std::optional<FeatureSet> features,
          std::map<std::string, std::string> sources);
  // From files (TensorFX's CsvDataSet / ExamplesDataSet); metadata and
  // features may be "" (none).
  static DataSet csv(const std::string& schema, const std::string& metadata,
                     const std::string& features, std::map<std::string, std::string> sources);
  static DataSet examples(const std::string& schema, const std::string& metadata,
                          const std::string& features, std::map<std::string, std::string> sources);

  Format format() const { return format_; }
  const Schema& schema() const { return schema_; }
  const Metadata& metadata() const { return metadata_; }
  const FeatureSet* features() const { return features_ ? &*features_ : nullptr; }
  // Throws when the data set has no features.
  const Transformer& transformer() const;
  std::vector<std::string> sources() const;
  // The source's path pattern (a glob), or "" when there is none.
  std::string source(const std::string& name) const;

  // Every instance of a source (its files matched in name order). A target
  // field's value that is not one of its metadata entries is an error
  // naming the file and line (or record), before any training.
  Instances read(const std::string& name) const;
  // Prediction input: CSV lines or serialized tf.Example records.
  Instances parse(const std::vector<std::string>& instances, const std::string& what) const;

 private:
  Format format_;
  Schema schema_;
  Metadata metadata_;
  std::optional<FeatureSet> features_;
  std::map<std::string, std::string> sources_;
  std::optional<Transformer> transformer_;
  void check_targets(const Instances& instances,
                     const std::function<std::string(std::size_t)>& where) const;
};

// Files matching a glob pattern, sorted; throws naming the pattern when none.
std::vector<std::string> match_files(const std::string& pattern, const std::string& what);

}  // namespace garden::fx
