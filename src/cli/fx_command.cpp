#include "garden/cli/fx_command.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/logging.h"
#include "garden/cli/files.h"
#include "garden/fx/prediction.h"
#include "garden/platform/stop_signals.h"

namespace garden {

namespace {

const char* kUsage =
    "usage: garden fx train --model NAME [TensorFX arguments]\n"
    "       garden fx predict --model DIR [--input FILE] [--output FILE] [--batch-size N]\n";

// fx's "the instances line K ..." (K counted within the batch) as the
// input line it is: "--input line N ...".
std::string input_line_message(const std::string& message, int64_t first_line) {
  const std::string prefix = "the instances line ";
  if (message.rfind(prefix, 0) != 0) return message;
  std::size_t end = prefix.size();
  while (end < message.size() && std::isdigit(static_cast<unsigned char>(message[end]))) ++end;
  if (end == prefix.size()) return message;
  const int64_t within = std::stoll(message.substr(prefix.size(), end - prefix.size()));
  return "--input line " + std::to_string(first_line + within - 1) + message.substr(end);
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
      out += buffer;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// The data set's format: --data-format, or from --data-train's name
// (.tfrecord / .tfrecords: tf.Example records; anything else: CSV).
fx::DataSet::Format format_of(const std::string& flag, const std::string& train) {
  if (flag == "csv") return fx::DataSet::Format::kCsv;
  if (flag == "examples" || flag == "tfrecord") return fx::DataSet::Format::kExamples;
  if (!flag.empty())
    throw Error("argument --data-format: '" + flag + "' is not one of csv, examples");
  const auto ends = [&](const std::string& suffix) {
    return train.size() >= suffix.size() &&
           train.compare(train.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends(".tfrecord") || ends(".tfrecords") ? fx::DataSet::Format::kExamples
                                                 : fx::DataSet::Format::kCsv;
}

int train(std::vector<std::string> args) {
  std::string model, data_format;
  std::vector<std::string> rest;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const auto value = [&](const std::string& flag) -> std::string {
      if (arg.rfind(flag + "=", 0) == 0) return arg.substr(flag.size() + 1);
      if (i + 1 >= args.size()) throw Error("argument " + flag + " needs a value");
      return args[++i];
    };
    if (arg == "--model" || arg.rfind("--model=", 0) == 0)
      model = value("--model");
    else if (arg == "--data-format" || arg.rfind("--data-format=", 0) == 0)
      data_format = value("--data-format");
    else if (arg == "--help" || arg == "-h")
      model = model.empty() ? "feedforward_classification" : model, rest = {"--help"};
    else
      rest.push_back(arg);
  }
  if (model.empty()) {
    std::string list;
    for (const auto& name : fx::model_names()) list += (list.empty() ? "" : ", ") + name;
    throw Error("--model is required: one of " + list);
  }
  const fx::ModelType& type = fx::model_type(model);
  if (rest.size() == 1 && rest[0] == "--help") {
    auto defaults = type.parse({});
    std::cout << kUsage << "\nArguments of " << model << ":\n"
              << defaults->build_parser().help()
              << "  --data-format csv|examples     (default: from --data-train's name)\n";
    return 0;
  }
  const auto parsed = type.parse(rest);
  const auto format = format_of(data_format, parsed->data_train);
  if (parsed->data_train.empty()) throw Error("--data-train is required: the training data");
  const std::map<std::string, std::string> sources = {{"train", parsed->data_train},
                                                      {"eval", parsed->data_eval}};
  const fx::DataSet dataset =
      format == fx::DataSet::Format::kCsv
          ? fx::DataSet::csv(parsed->data_schema, parsed->data_metadata, parsed->data_features,
                             sources)
          : fx::DataSet::examples(parsed->data_schema, parsed->data_metadata, parsed->data_features,
                                  sources);
  auto builder = type.build(parsed);
  fx::ModelTrainer trainer;
  trainer.train(*builder, dataset, parsed->output);
  // In a cluster, the master reports; the workers and ps tasks wrote nothing.
  if (!trainer.config().master()) return 0;
  std::cout << "job directory: " << parsed->output << "\nmodel:         " << parsed->output
            << "/model (garden fx predict --model " << parsed->output << "/model)\n";
  return 0;
}

int predict(const std::vector<std::string>& args) {
  std::string model, input, output;
  int64_t batch_size = 10;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i], value;
    if (const auto eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (arg != "--help" && arg != "-h") {
      if (i + 1 >= args.size()) throw Error("argument " + arg + " needs a value");
      value = args[++i];
    }
    if (arg == "--model")
      model = value;
    else if (arg == "--input")
      input = value;
    else if (arg == "--output")
      output = value;
    else if (arg == "--batch-size") {
      char* end = nullptr;
      batch_size = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end || batch_size < 1)
        throw Error("argument --batch-size: '" + value + "' is not a whole number >= 1");
    } else if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else {
      throw Error("unknown argument " + arg + " (see garden fx predict --help)");
    }
  }
  if (model.empty())
    throw Error("--model is required: an exported model directory (<output>/model)");
  const auto loaded = fx::Model::load(model);
  if (!input.empty()) {
    check_input_file(input, "--input");
    refuse_same_file(input, "--input", output, "--output");
  }
  // Written whole or not at all: a bad line leaves no partial --output.
  std::unique_ptr<AtomicFile> output_file;
  if (!output.empty()) output_file = cli::create_output(output, "--output");
  cli::LineStreams streams(input, std::move(output_file), output, "instances");
  std::istream& in = streams.in();
  std::ostream& out = streams.out();
  int64_t first_line = 1;  // the input line of the batch's first instance
  const auto flush = [&](std::vector<std::string>& lines) {
    std::vector<fx::Model::Prediction> predictions;
    try {
      predictions = loaded->predict(lines);
    } catch (const Error& e) {
      throw Error(input_line_message(e.what(), first_line));
    }
    for (const auto& p : predictions) {
      out << "{\"label\": " << json_string(p.label) << ", \"scores\": [";
      for (std::size_t j = 0; j < p.scores.size(); ++j) {
        char buffer[32];
        std::snprintf(buffer, sizeof buffer, "%.5f", p.scores[j]);
        out << (j ? ", " : "") << buffer;
      }
      out << "]}\n";
    }
    if (output.empty()) out.flush();
    first_line += static_cast<int64_t>(lines.size());
    lines.clear();
  };
  std::vector<std::string> lines;
  // One instance a line; an empty line ends the input, as in TensorFX.
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) break;
    lines.push_back(line);
    if (static_cast<int64_t>(lines.size()) >= batch_size) flush(lines);
  }
  flush(lines);
  streams.finish();
  return 0;
}

}  // namespace

int run_fx(int argc, char** argv, const std::function<void()>& register_extras) {
  std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (register_extras) {
      static std::once_flag once;
      std::call_once(once, register_extras);
    }
    if (args.empty() || args[0] == "--help" || args[0] == "-h") {
      std::cout << kUsage;
      return args.empty() ? 2 : 0;
    }
    const std::string command = args[0];
    args.erase(args.begin());
    if (command == "train") return train(args);
    if (command == "predict") return predict(args);
    throw Error("unknown fx command '" + command + "'; the commands are train and predict");
  } catch (const Preempted& e) {
    // Stopped by a signal after saving: 128 + signal, as for garden train.
    std::string text = e.what();
    std::cerr << "garden fx: " << text.substr(0, text.find('\n')) << "\n";
    return 128 + e.signal();
  } catch (const std::exception& e) {
    std::string text = e.what();
    text = text.substr(0, text.find('\n'));
    if (const int signal = StopSignals::pending()) {
      std::cerr << "garden fx: received " << StopSignals::name(signal) << "; stopped (" << text
                << ")\n";
      return 128 + signal;
    }
    std::cerr << "garden fx: error: " << text << "\n";
    return 1;
  }
}

}  // namespace garden
