#include "garden/cli/cli.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>
#include <torch/version.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "garden/base/error.h"
#include "garden/base/file_io.h"
#include "garden/base/logging.h"
#include "garden/cli/bleu_command.h"
#include "garden/cli/builtins.h"
#include "garden/cli/finetuning_data_command.h"
#include "garden/cli/fx_command.h"
#include "garden/cli/image_records_command.h"
#include "garden/cli/import_command.h"
#include "garden/cli/launch_command.h"
#include "garden/cli/pretraining_data_command.h"
#include "garden/cli/serving_commands.h"
#include "garden/cli/spm_command.h"
#include "garden/cli/tfrecord_command.h"
#include "garden/cli/translate_command.h"
#include "garden/config/registry.h"
#include "garden/config/yaml_io.h"
#include "garden/core/actions.h"
#include "garden/core/checkpoint.h"
#include "garden/core/init_checkpoint_config.h"
#include "garden/core/runtime.h"
#include "garden/core/train_lib.h"
#include "garden/distribute/cluster.h"
#include "garden/kernels/gemm.h"
#include "garden/optim/lr_schedule.h"
#include "garden/platform/allocator.h"
#include "garden/platform/blas.h"
#include "garden/platform/cpu_share.h"
#include "garden/platform/threads.h"

namespace garden {

namespace {

// A schedule's length key: where it lives in the config and a pointer to it.
struct LengthKey {
  std::string path;
  std::optional<int64_t>* value;
};

// The length key of the learning-rate schedule `opt` runs (polynomial and
// cosine decay_steps, power_linear's total_decay_steps), if it has one.
std::optional<LengthKey> schedule_length(config::OptimizationConfig& opt) {
  auto& lr = opt.learning_rate;
  const std::string prefix = "trainer.optimizer_config.learning_rate." + lr.type;
  if (lr.type == "polynomial" && !lr.polynomial.cycle)
    return LengthKey{prefix + ".decay_steps", &lr.polynomial.decay_steps};
  if (lr.type == "cosine") return LengthKey{prefix + ".decay_steps", &lr.cosine.decay_steps};
  if (lr.type == "power_linear")
    return LengthKey{prefix + ".total_decay_steps", &lr.power_linear.total_decay_steps};
  return std::nullopt;
}

// The warmup's length, 0 without one.
int64_t warmup_length(const config::WarmupConfig& warmup) {
  const std::optional<int64_t> steps = warmup.type == "linear" ? warmup.linear.warmup_steps
                                       : warmup.type == "polynomial"
                                           ? warmup.polynomial.warmup_steps
                                           : std::nullopt;
  return steps.value_or(0);
}

// An experiment whose schedule decays over exactly its own training
// (bert/sentence_prediction_tiny: decay_steps = train_steps = 300) keeps
// doing so when the user sets trainer.train_steps past its warmup and leaves
// the length alone; otherwise 2,000 steps would run at rate 0 from step 300
// on. Returns the line to log ("" when nothing followed).
std::string follow_train_steps(config::ExperimentConfig& params, config::ExperimentConfig& defaults,
                               const config::SetKeys& set_by_user) {
  auto& opt = params.trainer.optimizer_config;
  const auto length = schedule_length(opt);
  const auto experiment_length = schedule_length(defaults.trainer.optimizer_config);
  const int64_t steps = params.trainer.train_steps;
  const int64_t own_steps = defaults.trainer.train_steps;
  const auto set = set_by_user.find("trainer.train_steps");
  if (!length || !experiment_length || set == set_by_user.end() ||
      set_by_user.count(length->path) || experiment_length->path != length->path ||
      *experiment_length->value != own_steps || *length->value != own_steps ||
      steps <= warmup_length(opt.warmup) || steps == own_steps)
    return "";
  *length->value = steps;
  return length->path + " follows trainer.train_steps " + std::to_string(steps) + " (set by " +
         set->second + "): the experiment decays over its training (" + std::to_string(own_steps) +
         " steps); set " + length->path + " to keep another length";
}

// One warning line when the schedule (warmup included) is 0 at the last
// steps of the training ("" otherwise). After the warmup a decay only
// falls, so the last step with a rate is found by bisection.
std::string zero_rate_warning(const config::ExperimentConfig& params) {
  const auto& opt = params.trainer.optimizer_config;
  const int64_t steps = params.trainer.train_steps;
  if (opt.optimizer.type.empty() || steps <= 0) return "";
  const auto schedule = optim::make_schedule(opt.learning_rate, opt.warmup);
  const int64_t last = steps - 1;  // the iteration count of the last update
  if ((*schedule)(last) != 0.0) return "";
  int64_t low = std::min(warmup_length(opt.warmup), last);
  const std::string what = "trainer.optimizer_config.learning_rate (" + opt.learning_rate.type +
                           ", with its warmup) is 0 ";
  const std::string train_steps = "trainer.train_steps " + std::to_string(steps);
  if ((*schedule)(low) == 0.0) return what + "at every one of " + train_steps;
  int64_t high = last;  // rate(low) > 0, rate(high) == 0
  while (high - low > 1) {
    const int64_t middle = low + (high - low) / 2;
    ((*schedule)(middle) > 0.0 ? low : high) = middle;
  }
  return what + "from step " + std::to_string(high + 1) + " of " + train_steps + ": the last " +
         std::to_string(steps - high) + " steps run at rate 0";
}

}  // namespace

std::shared_ptr<config::ExperimentConfig> resolve_experiment(
    const std::string& name, const std::vector<std::string>& config_files,
    const std::string& params_override, const std::string& init_checkpoint) {
  // Every file checked before the first is applied.
  for (const auto& file : config_files) check_input_file(file, "--config_file");
  auto params = config::get_experiment_config(name);
  config::SetKeys set_by_user;
  for (const auto& file : config_files) config::apply_file(*params, file, &set_by_user);
  if (!params_override.empty()) config::apply_override(*params, params_override, &set_by_user);
  if (!init_checkpoint.empty() && params->task) {
    namespace fs = std::filesystem;
    const std::string& set = params->task->init_checkpoint;
    const auto normal = [](const std::string& path) {
      return fs::absolute(path).lexically_normal().string();
    };
    if (!set.empty() && normal(set) != normal(init_checkpoint)) {
      const auto where = set_by_user.find("task.init_checkpoint");
      throw Error("task.init_checkpoint '" + set + "'" +
                  (where == set_by_user.end() ? "" : " (set by " + where->second + ")") +
                  " is not --huggingface_dir '" + init_checkpoint + "'");
    }
    params->task->init_checkpoint = init_checkpoint;
  }
  const auto adopted = adopt_from_init_checkpoint(*params, set_by_user);
  const std::string followed =
      follow_train_steps(*params, *config::get_experiment_config(name), set_by_user);
  config::validate_config(*params);
  for (const auto& line : adopted) log_info() << line;
  if (!followed.empty()) log_info() << followed;
  if (const std::string warning = zero_rate_warning(*params); !warning.empty())
    log_warning() << warning;
  return params;
}

namespace {

// Errors print as one line, whatever the library put in them.
std::string one_line(std::string text) {
  for (auto& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

// Every command and the process set-up it needs.
struct CommandSetup {
  const char* name;
  ProcessSetup setup;
};
constexpr ProcessSetup kPlain{};
constexpr ProcessSetup kComputes{true, true, false};
constexpr ProcessSetup kComputesForLong{true, true, true};
constexpr CommandSetup kCommands[] = {
    {"train", kComputesForLong},
    {"fx", kComputesForLong},
    {"serve", kComputesForLong},
    {"translate", kComputes},
    {"predict", kComputes},
    // `env` reports what the computing commands run with: it starts as they do.
    {"env", kComputesForLong},
    {"export", kPlain},
    {"experiments", kPlain},
    {"config", kPlain},
    {"lr", kPlain},
    {"launch", kPlain},
    {"tfrecord", kPlain},
    {"spm", kPlain},
    {"bleu", kPlain},
    {"create_pretraining_data", kPlain},
    {"create_finetuning_data", kPlain},
    {"create_image_records", kPlain},
    {"import", kPlain},
};

// A failure is one "garden: error:" line and exit 1, unless a stop signal
// came first: a collective then fails because the other workers stopped too,
// and the run ends as stopped (128 + signal), saying what broke off.
int report_failure(const std::string& what) {
  if (const int signal = StopSignals::pending()) {
    std::cerr << "garden: received " << StopSignals::name(signal) << "; stopped (" << what << ")\n";
    return 128 + signal;
  }
  std::cerr << "garden: error: " << what << "\n";
  return 1;
}

struct ExperimentFlags {
  std::string experiment;
  std::vector<std::string> config_files;
  std::string params_override;
};

void add_experiment_flags(CLI::App& command, ExperimentFlags& flags) {
  command.add_option("--experiment", flags.experiment, "Registered experiment name")->required();
  command.add_option("--config_file", flags.config_files,
                     "YAML file applied over the experiment's defaults (repeatable, in order)");
  command.add_option("--params_override", flags.params_override,
                     "Overrides applied last: a.b=1,c.d='x' or a YAML/JSON mapping");
}

void print_experiments() {
  const auto names = config::experiment_registry().names();
  std::size_t width = 0;
  for (const auto& n : names) width = std::max(width, n.size());
  for (const auto& n : names)
    std::cout << std::left << std::setw(static_cast<int>(width) + 2) << n
              << config::experiment_registry().get(n).description << "\n";
}

int run_train(const ExperimentFlags& flags, const std::string& mode, const std::string& model_dir) {
  std::error_code ec;
  if (std::filesystem::exists(model_dir, ec) && !std::filesystem::is_directory(model_dir, ec))
    throw Error("--model_dir '" + model_dir + "' is a file, not a directory");
  auto params = resolve_experiment(flags.experiment, flags.config_files, flags.params_override);
  // The cluster this process belongs to (TF_CONFIG, torchrun, SLURM,
  // OpenMPI, runtime.worker_hosts), joined before the seed is drawn.
  const auto cluster =
      distribute::resolve_cluster(distribute::process_environment(), params->runtime);
  // One GPU per local process: runtime.device=cuda becomes cuda:<local rank>.
  if (const auto device = distribute::process_device(cluster, params->runtime.device);
      device != params->runtime.device) {
    log_info() << "runtime.device=" << params->runtime.device << " on local rank "
               << cluster.local_rank << ": training on " << device;
    params->runtime.device = device;
  }
  RunOptions options;
  options.mode = mode;
  if (cluster.is_evaluator() && mode != "continuous_eval") {
    log_info() << "TF_CONFIG makes this process the evaluator: running continuous_eval";
    options.mode = "continuous_eval";
  }
  if (cluster.distributed()) {
    log_info() << cluster.strategy << ": " << cluster.describe() << " of " << cluster.world_size
               << " (from " << cluster.source << "), rendezvous at " << cluster.master_addr << ":"
               << cluster.master_port;
    options.process_group = distribute::ProcessGroup::connect(
        cluster, params->runtime.device,
        std::chrono::seconds(params->runtime.collective_timeout_seconds));
  }
  // runtime.seed left null: a run that resumes takes its checkpoint's seed
  // (the chief's, which owns model_dir), so the same command resumes.
  const std::optional<int64_t> resumed_seed =
      cluster.is_chief() ? checkpoint_seed(model_dir) : std::nullopt;
  finalize_config(*params, options.process_group.get(), resumed_seed);
  options.model_dir = model_dir;
  options.experiment = flags.experiment;
  options.interactive = stderr_is_terminal() && cluster.is_chief();
  const Logs logs = run_experiment(params, options);
  if (!cluster.is_chief() && !cluster.is_evaluator()) return 0;  // the chief reports
  namespace fs = std::filesystem;
  const bool trained = mode.rfind("train", 0) == 0;
  std::cout << "\nmodel_dir:   " << fs::absolute(model_dir).string() << "\n";
  if (const auto checkpoint = latest_checkpoint(model_dir))
    std::cout << "checkpoint:  " << fs::absolute(*checkpoint).string() << "\n";
  if (trained)
    std::cout << "params.yaml: " << (fs::absolute(model_dir) / "params.yaml").string() << "\n";
  std::cout << "summaries:   tensorboard --logdir " << fs::absolute(model_dir).string() << "\n";
  if (!logs.empty()) {
    std::cout << "evaluation:  ";
    bool first = true;
    for (const auto& [key, value] : logs) {
      if (!is_scalar(value)) continue;
      std::cout << (first ? "" : ", ") << key << " " << std::setprecision(4) << to_double(value);
      first = false;
    }
    std::cout << "\n";
  }
  return 0;
}

// `garden env`: the settings garden's computing commands start with (this
// command starts the way they do, so what it prints is in effect), as
// shell exports, then what they give, as comments.
void print_environment() {
  std::cout << "# what garden's computing commands (train, fx, serve, translate, predict) "
               "run with\n";
  for (const char* name :
       {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT", "OPENBLAS_CORETYPE"})
    if (const char* value = std::getenv(name))
      std::cout << "export " << name << "=" << value << "\n";
  const std::string blas = loaded_blas_library();
  std::cout << "# BLAS: " << (blas.empty() ? "none loaded" : blas) << "\n";
  if (const std::string kernels = openblas_setting(); !kernels.empty())
    std::cout << "# OpenBLAS: " << kernels << "\n";
  // What runtime.intra_op_parallelism_threads 0, the default, gives.
  config::RuntimeConfig runtime;
  runtime.intra_op_parallelism_threads = 0;
  apply_runtime(runtime);
  std::cout << "# LibTorch " << TORCH_VERSION << ", " << at::get_num_threads()
            << " LibTorch intra-op threads by default, CUDA devices: "
            << static_cast<int>(torch::cuda::device_count()) << "\n# Garden's kernels: on "
            << parallel_for_threads()
            << " of them\n# matrix products of Garden's layers: " << gemm_library()
            << " (GARDEN_GEMM=onednn|blas)\n# malloc: " << malloc_setting()
            << "\n# cpu share: " << cpu_share_setting()
            << " (fewer threads while other processes keep cores busy; GARDEN_CPU_SHARE=0 "
               "turns it off)\n";
}

// At most this many lines from `garden lr`: a range that would print more is
// a mistake (a STEP left out), refused before the experiment is resolved.
constexpr uint64_t kMaxLrLines = 1'000'000;

// One field of --steps: a whole non-negative number that fits int64.
int64_t parse_step_field(std::string_view field, const char* name, const std::string& range) {
  int64_t value = -1;
  const auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), value);
  if (field.empty() || error == std::errc::invalid_argument || end != field.data() + field.size())
    throw Error("--steps: " + std::string(name) + " '" + std::string(field) +
                "' is not a whole number (START:STOP[:STEP], got '" + range + "')");
  if (error == std::errc::result_out_of_range)
    throw Error("--steps: " + std::string(name) + " '" + std::string(field) +
                "' is out of range (at most " +
                std::to_string(std::numeric_limits<int64_t>::max()) + ")");
  if (value < 0)
    throw Error("--steps: " + std::string(name) + " " + std::to_string(value) +
                " is negative (START:STOP[:STEP], got '" + range + "')");
  return value;
}

// `garden lr`: the learning rate at each step of START:STOP:STEP (STOP
// included), so a schedule can be seen before training with it.
int print_learning_rates(const ExperimentFlags& flags, const std::string& range) {
  std::vector<std::string_view> fields;
  for (std::string_view rest(range);;) {
    const auto colon = rest.find(':');
    fields.push_back(rest.substr(0, colon));
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  if (fields.size() < 2 || fields.size() > 3)
    throw Error("--steps must be START:STOP[:STEP], got '" + range + "'");
  const int64_t start = parse_step_field(fields[0], "START", range);
  const int64_t stop = parse_step_field(fields[1], "STOP", range);
  const int64_t step = fields.size() == 3 ? parse_step_field(fields[2], "STEP", range) : 1;
  if (stop < start)
    throw Error("--steps must be START:STOP[:STEP] with 0 <= START <= STOP, got '" + range + "'");
  if (step < 1) throw Error("--steps: STEP must be >= 1, got '" + range + "'");
  // Counted without overflow: stop - start fits, both being >= 0.
  const uint64_t lines =
      static_cast<uint64_t>(stop - start) / static_cast<uint64_t>(step) + uint64_t{1};
  if (lines > kMaxLrLines)
    throw Error("--steps '" + range + "' would print " + std::to_string(lines) +
                " lines; at most " + std::to_string(kMaxLrLines) +
                " are printed (use a larger STEP)");
  auto params = resolve_experiment(flags.experiment, flags.config_files, flags.params_override);
  const auto& optimization = params->trainer.optimizer_config;
  const auto schedule = optim::make_schedule(optimization.learning_rate, optimization.warmup);
  std::cout << std::setprecision(9);
  // s = start + i * step <= stop for every i < lines: no step past STOP, so
  // nothing overflows.
  for (uint64_t i = 0; i < lines; ++i) {
    const int64_t s = start + static_cast<int64_t>(i) * step;
    std::cout << s << "\t" << (*schedule)(s) << "\n";
  }
  return 0;
}

}  // namespace

ProcessSetup process_setup_for(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  for (const auto& entry : kCommands)
    if (command == entry.name) return entry.setup;
  return kPlain;
}

int run_main(int argc, char** argv) { return run_main(argc, argv, {}); }

int run_main(int argc, char** argv, const std::function<void()>& register_extras) {
  // launch starts other garden processes and passes them the rest of the
  // command line untouched, so it is parsed on its own.
  if (argc > 1 && std::string(argv[1]) == "launch") {
    try {
      return run_launch(argc, argv);
    } catch (const std::exception& e) {
      std::cerr << "garden launch: error: " << one_line(e.what()) << "\n";
      return 1;
    }
  }
  // fx takes TensorFX's command line (--hidden-layers:1 20), parsed its own way.
  if (argc > 1 && std::string(argv[1]) == "fx") return run_fx(argc, argv, register_extras);
  try {
    register_builtins();
    if (register_extras) {
      static std::once_flag once;  // run_main may be called more than once (tests)
      std::call_once(once, register_extras);
    }
    CLI::App app{"garden: Model Garden-style training on LibTorch"};
    app.require_subcommand(1);

    ExperimentFlags train_flags;
    std::string mode = "train_and_eval";
    std::string model_dir;
    auto* train = app.add_subcommand("train", "Train and/or evaluate an experiment");
    add_experiment_flags(*train, train_flags);
    train
        ->add_option("--mode", mode,
                     "train, eval, train_and_eval, continuous_eval or train_and_post_eval")
        ->capture_default_str();
    train->add_option("--model_dir", model_dir, "Directory for checkpoints, summaries, params.yaml")
        ->required();

    app.add_subcommand("experiments", "List the registered experiments");
    app.add_subcommand("env",
                       "Print what the computing commands run with, as shell exports "
                       "(eval \"$(garden env)\" gives another program the same)");
    // Listed for --help; `garden launch ...` is handled before parsing.
    app.add_subcommand("launch",
                       "Start the processes of a multi-worker run: launch --nproc_per_node=N "
                       "-- train ... (see garden launch --help)");
    app.add_subcommand("fx",
                       "TensorFX's training API: fx train --model NAME [TensorFX arguments], "
                       "fx predict --model DIR (see garden fx --help)");

    ExperimentFlags config_flags;
    auto* config_command =
        app.add_subcommand("config", "Print an experiment's resolved config as YAML");
    add_experiment_flags(*config_command, config_flags);

    ExperimentFlags lr_flags;
    std::string lr_steps;
    auto* lr_command = app.add_subcommand(
        "lr", "Print step<TAB>learning_rate for a range of steps of the experiment's schedule");
    add_experiment_flags(*lr_command, lr_flags);
    lr_command->add_option("--steps", lr_steps, "START:STOP[:STEP], STOP included")->required();

    // Data tools: their work runs in CLI11 callbacks during parse().
    add_tfrecord_command(app);
    add_spm_command(app);
    add_bleu_command(app);
    add_translate_command(app);
    add_create_pretraining_data_command(app);
    add_create_finetuning_data_command(app);
    add_create_image_records_command(app);
    add_import_command(app);
    add_serving_commands(app);

    // A misspelt command: CLI11 would only say that a subcommand is required.
    if (argc > 1 && argv[1][0] != '-') {
      std::vector<std::string> names;
      for (const auto* command : app.get_subcommands([](CLI::App*) { return true; }))
        names.push_back(command->get_name());
      if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
        const std::string suggestion = config::nearest(argv[1], names);
        std::cerr << "garden: error: unknown command '" << argv[1] << "'"
                  << (suggestion.empty() ? "" : "; did you mean '" + suggestion + "'?")
                  << " (see garden --help)\n";
        return 2;
      }
    }
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() == 0) return app.exit(e);  // --help
      std::cerr << "garden: error: " << e.what() << " (see garden --help)\n";
      return 2;
    }

    if (train->parsed()) return run_train(train_flags, mode, model_dir);
    if (app.got_subcommand("experiments")) {
      print_experiments();
      return 0;
    }
    if (app.got_subcommand("env")) {
      print_environment();
      return 0;
    }
    if (lr_command->parsed()) return print_learning_rates(lr_flags, lr_steps);
    if (config_command->parsed()) {
      auto params = resolve_experiment(config_flags.experiment, config_flags.config_files,
                                       config_flags.params_override);
      std::cout << config::to_yaml_string(*params);
      return 0;
    }
    return 0;
  } catch (const Preempted& e) {
    // Not a failure of the run, but it did not finish: 128 + signal, as a
    // shell reports a process ended by that signal.
    std::cerr << "garden: " << one_line(e.what()) << "\n";
    return 128 + e.signal();
  } catch (const c10::Error& e) {
    return report_failure(one_line(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return report_failure(one_line(e.what()));
  }
}

}  // namespace garden
