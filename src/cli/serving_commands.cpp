#include "garden/cli/serving_commands.h"

#include <signal.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "garden/base/encoding.h"
#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/logging.h"
#include "garden/cli/files.h"
#include "garden/nlp/tasks/huggingface_export.h"
#include "garden/platform/stop_signals.h"
#include "garden/serving/export.h"
#include "garden/serving/predictor.h"
#include "garden/serving/server.h"

namespace garden {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A Predictor's error about its only instance ("instance 0 has ...",
// "instance 0: input ...") as `where` names the instance ("--input line N",
// "--images file 'F'").
std::string input_line_error(std::string message, const std::string& where) {
  // TensorFX's data set names its one instance "the instances line 1"
  // (or "record 1").
  for (const char* prefix : {"instance 0", "the instances line 1", "the instances record 1"}) {
    const std::string text = prefix;
    if (message.rfind(text, 0) != 0) continue;
    const char next = message.size() > text.size() ? message[text.size()] : ' ';
    if (next != ' ' && next != ':' && next != ',') continue;  // not "line 12"
    message = message.substr(text.size());
    message = message.substr(std::min(message.find_first_not_of(":, "), message.size()));
    break;
  }
  return where + ": " + message;
}

void run_export(const serving::ExportOptions& options, const std::string& format) {
  if (format == "huggingface") {
    std::error_code ec;
    if (options.experiment.empty() &&
        !fs::exists(fs::path(options.model_dir) / "params.yaml", ec) &&
        !serving::tensorfx_model_dir(options.model_dir).empty())
      throw Error("--format=huggingface: '" + options.model_dir +
                  "' is a TensorFX model, which has no Hugging Face architecture");
    serving::LoadedRun run = serving::load_run(options);
    nlp::write_huggingface_dir(nlp::huggingface_export(*run.task, *run.model), run.assets,
                               options.export_dir);
    // What was written, as a Hugging Face user will look for it.
    std::vector<std::string> written;
    for (const auto& entry : fs::directory_iterator(options.export_dir, ec))
      written.push_back(entry.path().filename().string());
    std::sort(written.begin(), written.end());
    std::string files;
    for (const auto& name : written) files += (files.empty() ? "" : ", ") + name;
    std::cout << "export:     " << fs::absolute(options.export_dir).string()
              << " (Hugging Face: " << files << ")\n"
              << "checkpoint: " << fs::absolute(run.checkpoint).string() << " (step "
              << run.global_step << (run.ema ? ", moving averages" : "") << ")\n";
    return;
  }
  if (format != "garden")
    throw Error("--format '" + format + "' is not one of garden, huggingface");
  const auto result = serving::export_model(options);
  std::cout << "export:     " << fs::absolute(result.directory).string() << "\n"
            << "version:    " << result.version << "\n"
            << "checkpoint: " << fs::absolute(result.checkpoint).string();
  if (result.global_step >= 0)
    std::cout << " (step " << result.global_step << (result.ema ? ", moving averages" : "") << ")";
  std::cout << "\n";
}

struct PredictFlags {
  std::string export_dir;
  std::string input;
  std::string output;
  std::string device = "cpu";
  int64_t batch_size = 32;
  bool int8 = false;
  std::vector<std::string> images;  // image files, each an instance {"b64": its bytes}
};

// One input line as an instance: JSON, or for a model whose one input is a
// string, the line's text itself when it is not a JSON string or object. A
// line that starts with '{' is meant as an object: when it does not parse,
// it is refused rather than taken as text.
json parse_line(const std::string& line, bool text_input, int64_t number) {
  try {
    json value = json::parse(line);
    if (!text_input || value.is_string() || value.is_object()) return value;
  } catch (const json::exception& e) {
    const auto first = line.find_first_not_of(" \t");
    if (!text_input || (first != std::string::npos && line[first] == '{'))
      throw InputError("--input line " + std::to_string(number) + " is not JSON: " + e.what());
  }
  return json(line);
}

void run_predict(const PredictFlags& flags) {
  if (flags.batch_size < 1) throw Error("--batch_size must be >= 1");
  if (!flags.images.empty() && !flags.input.empty())
    throw Error("give --input or --images, not both");
  for (const auto& file : flags.images)
    refuse_same_file(file, "--images", flags.output, "--output");
  // Image files: one JSON line each, as TF Serving's REST API carries bytes.
  std::istringstream image_lines;
  if (!flags.images.empty()) {
    std::string text;
    for (const auto& file : flags.images)
      text += json{{"b64", base64_encode(read_file(file, "--images file"))}}.dump() + "\n";
    image_lines.str(text);
  }
  // What names instance `line` (1-based) in an error: its input line or image file.
  const auto where = [&flags](const std::string& message, int64_t line) {
    return input_line_error(
        message,
        flags.images.empty()
            ? "--input line " + std::to_string(line)
            : "--images file '" + flags.images.at(static_cast<std::size_t>(line - 1)) + "'");
  };
  if (!flags.input.empty()) {
    check_input_file(flags.input, "--input");
    refuse_same_file(flags.input, "--input", flags.output, "--output");
  }
  // Nor may the output be a file of the export (its weights, its assets).
  std::error_code ec;
  if (!flags.output.empty() && fs::is_directory(flags.export_dir, ec))
    for (auto it = fs::recursive_directory_iterator(flags.export_dir, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      if (it->is_regular_file(ec))
        refuse_same_file(it->path().string(), "--export_dir's file", flags.output, "--output");
  serving::Predictor predictor(flags.export_dir, flags.device);
  if (flags.int8) predictor.use_int8();
  predictor.apply_runtime();
  const auto& inputs = predictor.signature().inputs;
  const bool text_input = inputs.size() == 1 && inputs[0].second.dtype == "DT_STRING";
  if (!flags.images.empty() && !text_input) {
    std::string names;
    for (const auto& input : inputs) names += (names.empty() ? "" : ", ") + input.first;
    throw Error("--images: the export at '" + flags.export_dir + "' takes " + names +
                ", not an encoded image; give --input with JSON lines");
  }
  std::unique_ptr<AtomicFile> output;
  if (!flags.output.empty()) output = cli::create_output(flags.output, "--output");

  cli::LineStreams streams(flags.input, std::move(output), flags.output, "instances");
  std::istream& in = flags.images.empty() ? streams.in() : image_lines;
  std::ostream& out = streams.out();

  const auto start = std::chrono::steady_clock::now();
  int64_t lines = 0, predicted = 0;
  std::vector<json> instances;
  std::vector<int64_t> numbers;  // the line of each instance
  std::vector<bool> blank;       // per line of the window: blank lines stay blank
  auto flush = [&] {
    std::vector<json> results;
    try {
      results = predictor.predict(instances);
    } catch (const InputError&) {
      // Find the line: each instance alone.
      for (std::size_t i = 0; i < instances.size(); ++i) {
        try {
          predictor.predict({instances[i]});
        } catch (const InputError& e) {
          throw InputError(where(e.what(), numbers[i]));
        }
      }
      throw;
    }
    std::size_t next = 0;
    for (const bool is_blank : blank) {
      if (is_blank) {
        out << "\n";
      } else {
        out << results[next++].dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
      }
    }
    predicted += static_cast<int64_t>(instances.size());
    instances.clear();
    numbers.clear();
    blank.clear();
  };
  std::string line;
  while (std::getline(in, line)) {
    ++lines;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // Not UTF-8: neither JSON nor text a tokenizer can read.
    if (const std::string bad = unicode::utf8_error(line); !bad.empty())
      throw InputError(where(bad, lines));
    const bool is_blank = line.find_first_not_of(" \t") == std::string::npos;
    blank.push_back(is_blank);
    if (!is_blank) {
      // parse_line's refusal names the line itself.
      json instance = parse_line(line, text_input, lines);
      try {
        instances.push_back(predictor.normalize_instance(instance, 0));
      } catch (const InputError& e) {
        throw InputError(where(e.what(), lines));
      }
      numbers.push_back(lines);
    }
    if (static_cast<int64_t>(instances.size()) >= flags.batch_size) flush();
  }
  if (!blank.empty()) flush();
  streams.finish();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cerr << "garden: predicted " << predicted << " instances (" << lines << " lines) in "
            << std::fixed << std::setprecision(2) << seconds << " s, " << std::setprecision(1)
            << (seconds > 0 ? static_cast<double>(predicted) / seconds : 0.0)
            << " instances/s, export " << predictor.directory() << "\n";
}

void run_serve(const std::string& export_dir, const serving::ServerOptions& options) {
  // SIGTERM and SIGINT drain the server (the signal thread only marks the
  // request: the drain runs on the waiter below).
  GracefulStop graceful;
  serving::ModelServer server(export_dir, options);
  const int port = server.start();
  ::signal(SIGPIPE, SIG_IGN);
  // Announced once the model answers (a bad export is one error line).
  std::thread announcer([&server, &options, port] {
    if (!server.wait_until_loaded()) return;
    std::cerr << "garden: serving at http://" << options.host << ":" << port << "/v1/models/"
              << options.model_name;
    if (server.grpc_port() >= 0)
      std::cerr << " and gRPC " << options.host << ":" << server.grpc_port();
    std::cerr << std::endl;
  });
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    while (!done) {
      if (StopSignals::wait_for(std::chrono::milliseconds(50))) {
        std::cerr << "garden: " << StopSignals::name(StopSignals::pending())
                  << ": finishing the requests in flight, then stopping" << std::endl;
        server.shutdown();
        return;
      }
    }
  });
  auto restore = [&] {
    done = true;
    waiter.join();
    announcer.join();
  };
  try {
    server.run();
  } catch (...) {
    restore();
    throw;
  }
  restore();
  std::cerr << "garden: server stopped" << std::endl;
}

}  // namespace

void add_serving_commands(CLI::App& app) {
  auto export_options = std::make_shared<serving::ExportOptions>();
  auto* export_command = app.add_subcommand(
      "export", "Write a self-contained export (weights, config, tokenizer, signature) of a run");
  export_command->add_option(
      "--experiment", export_options->experiment,
      "The registered experiment the run was trained with (default: the one its params.yaml "
      "records; not for a garden fx train job)");
  export_command
      ->add_option("--model_dir", export_options->model_dir,
                   "model_dir of the run, or the --output of garden fx train")
      ->required();
  export_command->add_option("--checkpoint", export_options->checkpoint,
                             "Checkpoint file or directory, or `best` (default: the latest)");
  export_command
      ->add_option("--export_dir", export_options->export_dir,
                   "Base directory; the export goes to EXPORT_DIR/<version>")
      ->required();
  auto export_format = std::make_shared<std::string>("garden");
  export_command
      ->add_option("--format", *export_format,
                   "garden (a versioned export garden predict and serve read) or huggingface (a "
                   "transformers model directory, EXPORT_DIR itself, which must not exist)")
      ->capture_default_str();
  export_command->callback(
      [export_options, export_format] { run_export(*export_options, *export_format); });

  auto predict_flags = std::make_shared<PredictFlags>();
  auto* predict = app.add_subcommand(
      "predict", "Predict JSON lines (or, for translation, text lines) with an export");
  predict
      ->add_option("--export_dir", predict_flags->export_dir,
                   "An export's base directory (its highest version) or a version directory")
      ->required();
  predict->add_option("--input", predict_flags->input,
                      "Input file, one instance a line (default: stdin)");
  predict->add_option("--output", predict_flags->output,
                      "Output file, one JSON object a line (default: stdout)");
  predict->add_option("--batch_size", predict_flags->batch_size, "Instances predicted at once")
      ->capture_default_str();
  predict->add_option("--device", predict_flags->device, "cpu, cuda or cuda:N")
      ->capture_default_str();
  predict->add_flag("--int8", predict_flags->int8,
                    "int8 weights and products (dynamic quantization; CPU; translation)");
  predict->add_option("--images", predict_flags->images,
                      "Image files (JPEG, PNG) instead of --input, for an image classifier's "
                      "export: one output line each, in order");
  predict->callback([predict_flags] { run_predict(*predict_flags); });

  auto serve_dir = std::make_shared<std::string>();
  auto serve_options = std::make_shared<serving::ServerOptions>();
  auto* serve = app.add_subcommand("serve", "Serve an export over TF Serving's REST API");
  serve->add_option("--export_dir", *serve_dir, "An export's base directory (or one version)")
      ->required();
  serve->add_option("--host", serve_options->host, "Address to listen on")->capture_default_str();
  serve->add_option("--port", serve_options->port, "Port (0: any free one)")->capture_default_str();
  serve->add_option("--model_name", serve_options->model_name, "NAME in /v1/models/NAME")
      ->capture_default_str();
  // TF Serving's gRPC port, on by default where the build has gRPC.
  serve_options->grpc_port = serving::grpc_compiled_in() ? 8500 : -1;
  auto* grpc_port =
      serve
          ->add_option("--grpc_port", serve_options->grpc_port,
                       "TF Serving's gRPC API on this port (0: any free one; -1: none)")
          ->capture_default_str();
  serve->add_option("--device", serve_options->device, "cpu, cuda or cuda:N")
      ->capture_default_str();
  serve->add_flag("--int8", serve_options->int8,
                  "int8 weights and products (dynamic quantization; CPU; translation)");
  serve->add_flag("--enable_batching", serve_options->enable_batching,
                  "Merge concurrent requests into one forward pass");
  serve
      ->add_option("--max_batch_size", serve_options->max_batch_size,
                   "Most instances in a merged batch")
      ->capture_default_str();
  serve
      ->add_option("--batch_timeout_micros", serve_options->batch_timeout_micros,
                   "Longest wait for more requests after the first")
      ->capture_default_str();
  serve
      ->add_option("--max_enqueued_batches", serve_options->max_enqueued_batches,
                   "Batches that may wait with --enable_batching; past them, 503")
      ->capture_default_str();
  serve
      ->add_option("--max_body_bytes", serve_options->max_body_bytes,
                   "Larger request bodies get 413")
      ->capture_default_str();
  serve
      ->add_option("--file_system_poll_wait_seconds", serve_options->file_system_poll_wait_seconds,
                   "How often to look for a new version (0: never)")
      ->capture_default_str();
  serve->add_option("--threads", serve_options->threads, "Connections served at once")
      ->capture_default_str();
  serve->callback([serve_dir, serve_options, grpc_port] {
    if (!serving::grpc_compiled_in() && grpc_port->count() > 0 && serve_options->grpc_port >= 0)
      throw Error("--grpc_port: this garden was built without gRPC (libgrpc++-dev)");
    run_serve(*serve_dir, *serve_options);
  });
}

}  // namespace garden
