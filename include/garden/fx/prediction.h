// tensorfx.prediction.Model: loads what ModelTrainer exported to
// <output>/model and predicts.
//
//   auto model = fx::Model::load("out/model");
//   for (const auto& p : model->predict({"5.1,3.5,1.4,0.2"}))
//     std::cout << p.label << "\n";
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "garden/fx/models.h"

namespace garden::fx {

class Model {
 public:
  struct Prediction {
    std::string label;
    std::vector<double> scores;  // in the order of labels()
  };
  // Throws one line naming what is missing from the directory.
  static std::shared_ptr<Model> load(const std::string& path);
  // Instances as the data set takes them: CSV lines (with or without the
  // target column) or serialized tf.Example records.
  std::vector<Prediction> predict(const std::vector<std::string>& instances) const;
  const std::vector<std::string>& labels() const { return labels_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<DataSet> dataset_;
  std::unique_ptr<ModelBuilder> builder_;
  PredictionGraph graph_;
  std::vector<std::string> labels_;
};

// Writes `builder`'s model for prediction into `path` (replacing it whole):
// weights, the schema / metadata / features, and model.yaml (type, format,
// arguments).
void export_model(ModelBuilder& builder, const std::string& path);

}  // namespace garden::fx
