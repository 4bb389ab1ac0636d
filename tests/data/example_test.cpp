// Tests of tf.Example parsing, serialization, JSON and parse specs. Wire bytes are made
// and checked by the hand encoder/decoder in reference_formats.h, never by protobuf.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "garden/data/example.h"
#include "garden/data/parse_spec.h"
#include "reference_formats.h"

namespace {

using namespace garden_test::reference;
using garden::data::DataError;
using garden::data::DType;
using garden::data::Example;
using garden::data::FeatureValue;
using garden::data::FixedLenFeature;
using garden::data::ParseSpec;
using garden::data::RecordLocation;
using garden::data::VarLenFeature;
using Kind = FeatureValue::Kind;

TEST(ExampleTest, ParsesHandEncodedPackedAndUnpackedLists) {
  // Two pieces of one int64 list, one packed and one not: parsers must concatenate.
  const std::string mixed = ref_int64_list({1, 2}, true) + ref_int64_list({3}, false);
  const std::string bytes = ref_example({
      {"ints_packed", ref_feature(kInt64ListField, ref_int64_list({7, -1, 300}, true))},
      {"ints_unpacked",
       ref_feature(kInt64ListField, ref_int64_list({-5, 0, int64_t{1} << 40}, false))},
      {"floats_packed", ref_feature(kFloatListField, ref_float_list({0.5f, -2.25f}, true))},
      {"floats_unpacked", ref_feature(kFloatListField, ref_float_list({1.0f, 3.5f}, false))},
      {"mixed", ref_feature(kInt64ListField, mixed)},
      {"text", ref_feature(kBytesListField, ref_bytes_list({"a", "", std::string("\0\xff", 2)}))},
      {"empty_floats", ref_feature(kFloatListField, "")},
      {"no_kind", ""},
  });
  const Example example = garden::data::parse_example(bytes);
  EXPECT_EQ(example.at("ints_packed"), FeatureValue::of_ints({7, -1, 300}));
  EXPECT_EQ(example.at("ints_unpacked"), FeatureValue::of_ints({-5, 0, int64_t{1} << 40}));
  EXPECT_EQ(example.at("floats_packed"), FeatureValue::of_floats({0.5f, -2.25f}));
  EXPECT_EQ(example.at("floats_unpacked"), FeatureValue::of_floats({1.0f, 3.5f}));
  EXPECT_EQ(example.at("mixed"), FeatureValue::of_ints({1, 2, 3}));
  EXPECT_EQ(example.at("text"), FeatureValue::of_bytes({"a", "", std::string("\0\xff", 2)}));
  EXPECT_EQ(example.at("empty_floats"), FeatureValue::of_floats({}));
  EXPECT_EQ(example.count("no_kind"), 0u);
  EXPECT_EQ(example.size(), 7u);
}

TEST(ExampleTest, InvalidBytesThrowDataError) {
  EXPECT_THROW(garden::data::parse_example(std::string("\x0a\x05\x0a", 3)), DataError);
  EXPECT_TRUE(garden::data::parse_example("").empty());
}

// Decodes Example -> {name: Feature message} with the hand decoder.
std::vector<std::pair<std::string, Message>> decode_features(const std::string& bytes) {
  std::vector<std::pair<std::string, Message>> out;
  const Message example = decode(bytes);
  const Message features = decode(only(example, 1, kLengthDelimited).bytes);
  for (const Field* entry : all(features, 1)) {
    const Message kv = decode(entry->bytes);
    out.emplace_back(only(kv, 1, kLengthDelimited).bytes,
                     decode(only(kv, 2, kLengthDelimited).bytes));
  }
  return out;
}

TEST(ExampleTest, SerializedBytesDecodeByHandAsPackedTensorFlowEncoding) {
  Example example;
  example["label"] = FeatureValue::of_ints({3, -2});
  example["image/encoded"] = FeatureValue::of_bytes({"\x89PNG", "b"});
  example["bbox"] = FeatureValue::of_floats({0.25f, 1.5f});
  const std::string bytes = garden::data::serialize_example(example);
  EXPECT_EQ(garden::data::serialize_example(example), bytes);  // deterministic

  const auto features = decode_features(bytes);
  ASSERT_EQ(features.size(), 3u);
  EXPECT_EQ(features[0].first, "bbox");  // name order
  EXPECT_EQ(features[1].first, "image/encoded");
  EXPECT_EQ(features[2].first, "label");

  const Message floats = decode(only(features[0].second, kFloatListField, kLengthDelimited).bytes);
  const std::string packed_floats = only(floats, 1, kLengthDelimited).bytes;  // packed
  ASSERT_EQ(packed_floats.size(), 8u);
  EXPECT_EQ(read_le(packed_floats, 0, 4), float_bits(0.25f));
  EXPECT_EQ(read_le(packed_floats, 4, 4), float_bits(1.5f));

  const Message strings = decode(only(features[1].second, kBytesListField, kLengthDelimited).bytes);
  ASSERT_EQ(all(strings, 1).size(), 2u);
  EXPECT_EQ(all(strings, 1)[0]->bytes, "\x89PNG");
  EXPECT_EQ(all(strings, 1)[1]->bytes, "b");

  const Message ints = decode(only(features[2].second, kInt64ListField, kLengthDelimited).bytes);
  const std::string packed_ints = only(ints, 1, kLengthDelimited).bytes;
  size_t pos = 0;
  EXPECT_EQ(decode_varint(packed_ints, pos), 3u);
  EXPECT_EQ(static_cast<int64_t>(decode_varint(packed_ints, pos)), -2);
  EXPECT_EQ(pos, packed_ints.size());

  EXPECT_EQ(garden::data::parse_example(bytes), example);
}

TEST(ExampleTest, JsonInfersKindsAndHonoursForcedKinds) {
  const auto json = nlohmann::json::parse(
      R"({"i": [1, -2], "f": [1, 2.5], "s": ["x", "y"], "whole": {"float": [1, 2]},
          "none": {"int64": []}, "b": {"base64": ["AP8="]}, "n": {"float": ["nan", "-inf"]}})");
  const Example example = garden::data::example_from_json(json);
  EXPECT_EQ(example.at("i"), FeatureValue::of_ints({1, -2}));
  EXPECT_EQ(example.at("f"), FeatureValue::of_floats({1.0f, 2.5f}));
  EXPECT_EQ(example.at("s"), FeatureValue::of_bytes({"x", "y"}));
  EXPECT_EQ(example.at("whole"), FeatureValue::of_floats({1.0f, 2.0f}));
  EXPECT_EQ(example.at("none"), FeatureValue::of_ints({}));
  EXPECT_EQ(example.at("b"), FeatureValue::of_bytes({std::string("\0\xff", 2)}));
  EXPECT_TRUE(std::isnan(example.at("n").floats[0]));
  EXPECT_EQ(example.at("n").floats[1], -std::numeric_limits<float>::infinity());

  const nlohmann::json back = garden::data::example_to_json(example);
  EXPECT_EQ(back["i"], nlohmann::json::parse("[1, -2]"));
  EXPECT_EQ(back["whole"].dump(), "[1.0,2.0]");  // whole floats stay floats
  EXPECT_EQ(back["none"], nlohmann::json::parse(R"({"int64": []})"));
  EXPECT_EQ(back["b"], nlohmann::json::parse(R"({"base64": ["AP8="]})"));
  EXPECT_EQ(garden::data::example_from_json(nlohmann::json::parse(back.dump())), example);

  // Shortest form of a float: 0.1f prints as 0.1.
  const Example tenth{{"t", FeatureValue::of_floats({0.1f})}};
  EXPECT_EQ(garden::data::example_to_json(tenth).dump(), R"({"t":[0.1]})");
}

TEST(ExampleTest, BadJsonNamesTheFeature) {
  for (const char* text :
       {R"({"bad": [1, "x"]})", R"({"bad": []})", R"({"bad": {"int": [1]}})",
        R"({"bad": {"int64": [1.5]}})", R"({"bad": 3})", R"({"bad": {"base64": ["!!"]}})"}) {
    SCOPED_TRACE(text);
    try {
      garden::data::example_from_json(nlohmann::json::parse(text));
      ADD_FAILURE() << "accepted";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("'bad'"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(garden::data::example_from_json(nlohmann::json::parse("[1]")), DataError);
}

// ---- parse spec

Example spec_example() {
  return {{"image/shape", FeatureValue::of_ints({2, 3})},
          {"matrix", FeatureValue::of_floats({1, 2, 3, 4})},
          {"label", FeatureValue::of_ints({7})},
          {"boxes", FeatureValue::of_floats({0.5f, 0.25f, 1})},
          {"name", FeatureValue::of_bytes({"cat"})},
          {"tags", FeatureValue::of_bytes({"a", "b"})}};
}

TEST(ParseSpecTest, FixedAndVarLenFeaturesBecomeTensorsAndStrings) {
  ParseSpec spec;
  spec["matrix"] = FixedLenFeature{{2, 2}, DType::kFloat, std::nullopt};
  spec["label"] = FixedLenFeature{{}, DType::kInt64, std::nullopt};
  spec["weight"] = FixedLenFeature{{3}, DType::kFloat, FeatureValue::of_floats({0.5f})};
  spec["boxes"] = VarLenFeature{DType::kFloat};
  spec["image/shape"] = VarLenFeature{DType::kInt64};
  spec["absent"] = VarLenFeature{DType::kInt64};
  spec["name"] = FixedLenFeature{{1}, DType::kString, std::nullopt};
  spec["tags"] = VarLenFeature{DType::kString};
  const auto parsed = garden::data::parse(spec_example(), spec, RecordLocation{"f.tfrecord", 0});

  const at::Tensor matrix = parsed.tensors.at("matrix");
  EXPECT_EQ(matrix.sizes(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(matrix.scalar_type(), torch::kFloat);
  EXPECT_TRUE(matrix.equal(torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}).reshape({2, 2})));
  const at::Tensor label = parsed.tensors.at("label");
  EXPECT_EQ(label.dim(), 0);
  EXPECT_EQ(label.scalar_type(), torch::kLong);
  EXPECT_EQ(label.item<int64_t>(), 7);
  EXPECT_TRUE(parsed.tensors.at("weight").equal(torch::tensor({0.5f, 0.5f, 0.5f})));
  EXPECT_TRUE(parsed.tensors.at("boxes").equal(torch::tensor({0.5f, 0.25f, 1.0f})));
  EXPECT_TRUE(parsed.tensors.at("image/shape").equal(torch::tensor({int64_t{2}, int64_t{3}})));
  EXPECT_EQ(parsed.tensors.at("absent").sizes(), (std::vector<int64_t>{0}));
  EXPECT_EQ(parsed.tensors.at("absent").scalar_type(), torch::kLong);
  EXPECT_EQ(parsed.strings.at("name"), std::vector<std::string>{"cat"});
  EXPECT_EQ(parsed.strings.at("tags"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(parsed.tensors.size(), 6u);
  EXPECT_EQ(parsed.strings.size(), 2u);
}

void expect_parse_error(const ParseSpec& spec, const std::string& feature,
                        const std::string& reason) {
  try {
    garden::data::parse(spec_example(), spec, RecordLocation{"/data/train-00001.tfrecord", 42});
    ADD_FAILURE() << "no error for " << feature;
  } catch (const DataError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("/data/train-00001.tfrecord"), std::string::npos) << message;
    EXPECT_NE(message.find("record 42"), std::string::npos) << message;
    EXPECT_NE(message.find("feature '" + feature + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(reason), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(ParseSpecTest, ErrorsNameFileRecordAndFeature) {
  expect_parse_error({{"missing", FixedLenFeature{{1}, DType::kInt64, std::nullopt}}}, "missing",
                     "missing");
  expect_parse_error({{"label", FixedLenFeature{{}, DType::kFloat, std::nullopt}}}, "label",
                     "int64_list");
  expect_parse_error({{"name", VarLenFeature{DType::kInt64}}}, "name", "bytes_list");
  expect_parse_error({{"matrix", FixedLenFeature{{3}, DType::kFloat, std::nullopt}}}, "matrix",
                     "has 4 values, but the spec wants 3");
  expect_parse_error(
      {{"other", FixedLenFeature{{2}, DType::kFloat, FeatureValue::of_ints({1, 2})}}}, "other",
      "default");
  expect_parse_error(
      {{"other", FixedLenFeature{{2}, DType::kFloat, FeatureValue::of_floats({1, 2, 3})}}}, "other",
      "default");
}

}  // namespace
