// The serving request parser (`garden serve`'s :predict body) on arbitrary
// bytes, then the instances it yields predicted by an iris export made at
// start (a few training steps): every wrong request is an InputError (HTTP
// 400), never a crash or another error (HTTP 500), and a request that is
// answered has one prediction per instance.
#include <filesystem>

#include "fuzz_util.h"
#include "garden/base/logging.h"
#include "garden/cli/builtins.h"
#include "garden/config/registry.h"
#include "garden/config/yaml_io.h"
#include "garden/core/runtime.h"
#include "garden/core/train_lib.h"
#include "garden/serving/export.h"
#include "garden/serving/predictor.h"
#include "garden/serving/server.h"

namespace {

std::unique_ptr<garden::serving::Predictor> iris_predictor() {
  garden::register_builtins();
  garden::set_quiet(true);
  auto params = garden::config::get_experiment_config("tabular/iris");
  garden::config::apply_override(*params,
                                 "trainer.train_steps=4,trainer.steps_per_loop=4,"
                                 "trainer.checkpoint_interval=4,trainer.summary_interval=4,"
                                 "trainer.validation_interval=4,runtime.seed=1");
  garden::finalize_config(*params);
  garden::RunOptions run;
  run.mode = "train";
  run.model_dir = garden_fuzz::scratch("iris");
  garden::run_experiment(params, run);
  garden::serving::ExportOptions options;
  options.experiment = "tabular/iris";
  options.model_dir = run.model_dir;
  options.export_dir = garden_fuzz::scratch("iris_export");
  return std::make_unique<garden::serving::Predictor>(
      garden::serving::export_model(options).directory);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto predictor = iris_predictor();
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& input : predictor->signature().inputs) out.push_back(input.first);
    return out;
  }();
  const std::string body(garden_fuzz::as_view(data, size));
  // A model of one input takes a bare list of its values too.
  try {
    garden::serving::parse_predict_request(body, {"sentence"});
  } catch (const garden::InputError&) {
  }
  garden::serving::PredictRequest request;
  try {
    request = garden::serving::parse_predict_request(body, names);
  } catch (const garden::InputError&) {
    return 0;
  }
  GARDEN_FUZZ_CHECK(!request.instances.empty());
  try {
    const auto rows = predictor->predict(request.instances);
    GARDEN_FUZZ_CHECK(rows.size() == request.instances.size());
    for (const auto& row : rows) row.dump();  // the answer is JSON text
  } catch (const garden::InputError&) {
  }
  return 0;
}
