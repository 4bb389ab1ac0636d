// Tests of the `garden` command line as a user meets it: the real binary
// (GARDEN_CLI_PATH) run through the shell, its stdout and stderr captured in
// files, its exit status and the files it leaves behind checked.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/cli_fixture.h"
#include "garden/kernels/gemm.h"
#include "garden/kernels/linear.h"
#include "garden/core/runtime.h"
#include "garden/platform/blas.h"
#include "garden/platform/threads.h"

namespace {

namespace fs = std::filesystem;

// ---- helpers -------------------------------------------------------------------

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Setup: throws when the file cannot be written, which ends the test.
void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// A fresh directory under ::testing::TempDir(), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("garden_cli_") + (info ? info->name() : "test") + "_XXXXXX";
    std::string pattern = (fs::path(::testing::TempDir()) / name).string();
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (!::mkdtemp(buffer.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = buffer.data();
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

struct Result {
  int status = -1;  // the exit status; 128 + signal when killed
  std::string out;
  std::string err;
  std::string command;
};

std::ostream& operator<<(std::ostream& os, const Result& r) {
  return os << "command: " << r.command << "\nstatus: " << r.status << "\n--- stdout ---\n"
            << r.out << "--- stderr ---\n"
            << r.err << "---";
}

// Runs `garden args...` with stdout and stderr in files under `scratch`.
Result run_garden(const std::vector<std::string>& args, const fs::path& scratch) {
  static int counter = 0;
  const std::string id = std::to_string(++counter);
  const fs::path out = scratch / ("stdout." + id);
  const fs::path err = scratch / ("stderr." + id);
  std::string command = shell_quote(GARDEN_CLI_PATH);
  for (const auto& arg : args) command += " " + shell_quote(arg);
  Result result;
  result.command = command;
  // A hung run fails the test instead of stalling the suite.
  const std::string prefix = fs::exists("/usr/bin/timeout") ? "/usr/bin/timeout 120 " : "";
  const int raw = std::system((prefix + command + " </dev/null >" + shell_quote(out.string()) +
                               " 2>" + shell_quote(err.string()))
                                  .c_str());
  if (raw != -1 && WIFEXITED(raw))
    result.status = WEXITSTATUS(raw);
  else if (raw != -1 && WIFSIGNALED(raw))
    result.status = 128 + WTERMSIG(raw);
  result.out = read_file(out);
  result.err = read_file(err);
  std::error_code ec;
  fs::remove(out, ec);
  fs::remove(err, ec);
  return result;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

using garden_test::lines_of;

// Every file under `root` with its contents (directories as "<dir>").
std::map<std::string, std::string> snapshot(const fs::path& root) {
  std::map<std::string, std::string> files;
  if (!fs::exists(root)) return files;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    const std::string name = fs::relative(entry.path(), root).string();
    files[name] = entry.is_directory() ? "<dir>" : read_file(entry.path());
  }
  return files;
}

// The files added, removed or changed between two snapshots; "" when none.
std::string changes(const std::map<std::string, std::string>& before,
                    const std::map<std::string, std::string>& after) {
  std::string out;
  for (const auto& [name, content] : before) {
    const auto it = after.find(name);
    if (it == after.end())
      out += "  removed " + name + "\n";
    else if (it->second != content)
      out += "  changed " + name + "\n";
  }
  for (const auto& [name, content] : after)
    if (!before.count(name)) out += "  added " + name + "\n";
  return out;
}

// The error contract: a non-zero status (exactly `status` when given), no
// stdout, and one stderr line "garden: error: ..." holding each of `parts`
// and nothing that looks like a stack trace.
void expect_one_line_error(const Result& r, std::initializer_list<std::string> parts,
                           int status = -1) {
  if (status >= 0)
    EXPECT_EQ(r.status, status) << r;
  else
    EXPECT_NE(r.status, 0) << r;
  EXPECT_LT(r.status, 124) << "killed or timed out\n" << r;
  EXPECT_EQ(r.out, "") << "an error printed on stdout\n" << r;
  if (r.err.empty()) {
    ADD_FAILURE() << "nothing on stderr\n" << r;
    return;
  }
  EXPECT_EQ(r.err.back(), '\n') << r;
  const auto lines = lines_of(r.err);
  EXPECT_EQ(lines.size(), 1u) << "stderr is not exactly one line\n" << r;
  EXPECT_EQ(r.err.rfind("garden: error: ", 0), 0u) << r;
  for (const auto& part : parts) EXPECT_TRUE(contains(r.err, part)) << "no '" << part << "'\n" << r;
  for (const char* trace : {"Exception raised from", "frame #", "terminate called",
                            "what():", "Aborted", "Segmentation fault", "Traceback"})
    EXPECT_FALSE(contains(r.err, trace)) << "looks like a stack trace\n" << r;
}

// Runs a failing `garden train` twice: into a model_dir that does not exist
// (it must not be created), and into one that holds files (they must stay
// as they were). `args` must not name --model_dir.
void expect_train_fails_cleanly(const std::vector<std::string>& args,
                                std::initializer_list<std::string> parts, int status = -1) {
  TempDir dir;
  {
    SCOPED_TRACE("model_dir that does not exist");
    const fs::path model_dir = dir / "model";
    std::vector<std::string> full = args;
    full.push_back("--model_dir=" + model_dir.string());
    const Result r = run_garden(full, dir.path());
    expect_one_line_error(r, parts, status);
    EXPECT_FALSE(fs::exists(model_dir)) << "the failed run created model_dir\n" << r;
  }
  {
    SCOPED_TRACE("model_dir that holds files");
    const fs::path model_dir = dir / "existing";
    fs::create_directories(model_dir / "sub");
    write_file(model_dir / "marker.txt", "keep me\n");
    write_file(model_dir / "sub" / "params.yaml", "trainer: {train_steps: 3}\n");
    const auto before = snapshot(model_dir);
    std::vector<std::string> full = args;
    full.push_back("--model_dir=" + model_dir.string());
    const Result r = run_garden(full, dir.path());
    expect_one_line_error(r, parts, status);
    EXPECT_EQ(changes(before, snapshot(model_dir)), "") << "the failed run changed model_dir\n"
                                                        << r;
  }
}

std::vector<std::string> glob_prefix(const fs::path& dir, const std::string& prefix) {
  std::vector<std::string> names;
  if (!fs::is_directory(dir)) return names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  return names;
}

// Small, quick overrides for training tabular/iris.
const std::string kQuickIris = "trainer.train_steps=100";

// ---- garden experiments --------------------------------------------------------

TEST(CliExperiments, ListsBuiltinsWithDescriptions) {
  TempDir dir;
  const Result r = run_garden({"experiments"}, dir.path());
  ASSERT_EQ(r.status, 0) << r;
  std::map<std::string, std::string> described;
  for (const auto& line : lines_of(r.out)) {
    const auto space = line.find(' ');
    if (space == std::string::npos) continue;
    const auto text = line.find_first_not_of(' ', space);
    described[line.substr(0, space)] = text == std::string::npos ? "" : line.substr(text);
  }
  for (const char* name : {"tabular/iris", "tabular/classification"}) {
    ASSERT_TRUE(described.count(name)) << name << " is not listed\n" << r;
    EXPECT_GE(described[name].size(), 10u) << name << " has no description\n" << r;
  }
  EXPECT_TRUE(contains(described["tabular/iris"], "iris")) << r;
}

// ---- garden config ---------------------------------------------------------------

TEST(CliConfig, PrintsParseableYaml) {
  TempDir dir;
  const Result r = run_garden({"config", "--experiment=tabular/iris"}, dir.path());
  ASSERT_EQ(r.status, 0) << r;
  YAML::Node node;
  ASSERT_NO_THROW(node = YAML::Load(r.out)) << r;
  ASSERT_TRUE(node.IsMap()) << r;
  EXPECT_EQ(node["task"]["train_data"]["global_batch_size"].as<int64_t>(), 16) << r;
  EXPECT_EQ(node["trainer"]["train_steps"].as<int64_t>(), 400) << r;
  EXPECT_EQ(node["trainer"]["optimizer_config"]["optimizer"]["type"].as<std::string>(), "adam");
  EXPECT_TRUE(node["runtime"].IsMap()) << r;
}

TEST(CliConfig, ParamsOverrideApplies) {
  TempDir dir;
  const Result r =
      run_garden({"config", "--experiment=tabular/iris", "--params_override=trainer.train_steps=7"},
                 dir.path());
  ASSERT_EQ(r.status, 0) << r;
  const YAML::Node node = YAML::Load(r.out);
  EXPECT_EQ(node["trainer"]["train_steps"].as<int64_t>(), 7) << r;
  EXPECT_EQ(node["task"]["train_data"]["global_batch_size"].as<int64_t>(), 16) << r;
}

TEST(CliLr, PrintsTheScheduleWithWarmupAtEachStep) {
  TempDir dir;
  const Result r = run_garden(
      {"lr", "--experiment=tabular/iris", "--steps=0:40:10",
       "--params_override=trainer.optimizer_config.learning_rate={type: polynomial, polynomial: "
       "{initial_learning_rate: 1.0, decay_steps: 40, end_learning_rate: 0.0}},"
       "trainer.optimizer_config.warmup={type: linear, linear: {warmup_steps: 20}}"},
      dir.path());
  ASSERT_EQ(r.status, 0) << r;
  // Warmup rises linearly to the base schedule's value at step 20 (0.5);
  // then the polynomial decay is read at the raw step.
  EXPECT_EQ(r.out, "0\t0\n10\t0.25\n20\t0.5\n30\t0.25\n40\t0\n") << r;
  const Result bad = run_garden({"lr", "--experiment=tabular/iris", "--steps=9:3"}, dir.path());
  EXPECT_NE(bad.status, 0);
  EXPECT_EQ(bad.err,
            "garden: error: --steps must be START:STOP[:STEP] with 0 <= START <= STOP, got "
            "'9:3'\n");
}

TEST(CliConfig, ConfigFilesInOrderThenParamsOverrideLast) {
  TempDir dir;
  const fs::path first = dir / "first.yaml";
  const fs::path second = dir / "second.yaml";
  write_file(first,
             "trainer:\n  train_steps: 11\n  max_to_keep: 9\n"
             "task:\n  train_data:\n    global_batch_size: 8\n");
  write_file(second, "trainer:\n  train_steps: 22\n");
  {
    SCOPED_TRACE("the later config file wins; keys it does not set survive");
    const Result r =
        run_garden({"config", "--experiment=tabular/iris", "--config_file=" + first.string(),
                    "--config_file=" + second.string()},
                   dir.path());
    ASSERT_EQ(r.status, 0) << r;
    const YAML::Node node = YAML::Load(r.out);
    EXPECT_EQ(node["trainer"]["train_steps"].as<int64_t>(), 22) << r;
    EXPECT_EQ(node["trainer"]["max_to_keep"].as<int64_t>(), 9) << r;
    EXPECT_EQ(node["task"]["train_data"]["global_batch_size"].as<int64_t>(), 8) << r;
  }
  {
    SCOPED_TRACE("file order is the command line's");
    const Result r =
        run_garden({"config", "--experiment=tabular/iris", "--config_file=" + second.string(),
                    "--config_file=" + first.string()},
                   dir.path());
    ASSERT_EQ(r.status, 0) << r;
    EXPECT_EQ(YAML::Load(r.out)["trainer"]["train_steps"].as<int64_t>(), 11) << r;
  }
  {
    SCOPED_TRACE("params_override comes last, wherever it is on the command line");
    const Result r = run_garden(
        {"config", "--experiment=tabular/iris", "--params_override=trainer.train_steps=7",
         "--config_file=" + first.string(), "--config_file=" + second.string()},
        dir.path());
    ASSERT_EQ(r.status, 0) << r;
    const YAML::Node node = YAML::Load(r.out);
    EXPECT_EQ(node["trainer"]["train_steps"].as<int64_t>(), 7) << r;
    EXPECT_EQ(node["trainer"]["max_to_keep"].as<int64_t>(), 9) << r;
  }
}

// ---- errors ----------------------------------------------------------------------

TEST(CliErrors, UnknownExperimentListsRegisteredOnes) {
  expect_train_fails_cleanly({"train", "--experiment=tabular/no_such_thing"},
                             {"tabular/no_such_thing", "tabular/iris", "tabular/classification"});
  TempDir dir;
  expect_one_line_error(run_garden({"config", "--experiment=nope"}, dir.path()),
                        {"'nope'", "tabular/iris"});
}

TEST(CliErrors, UnknownKeyNamesFullPathAndNearestKey) {
  expect_train_fails_cleanly(
      {"train", "--experiment=tabular/iris",
       "--params_override=task.train_data.global_batch_sise=8"},
      {"task.train_data.global_batch_sise", "did you mean", "task.train_data.global_batch_size"});
}

TEST(CliErrors, WrongTypeNamesKeyValueAndType) {
  expect_train_fails_cleanly(
      {"train", "--experiment=tabular/iris", "--params_override=trainer.train_steps=lots"},
      {"trainer.train_steps", "lots", "int"});
}

TEST(CliErrors, MissingConfigFile) {
  TempDir dir;
  const std::string missing = (dir / "no_such_file.yaml").string();
  expect_train_fails_cleanly({"train", "--experiment=tabular/iris", "--config_file=" + missing},
                             {missing});
}

TEST(CliErrors, InvalidYamlInConfigFile) {
  TempDir dir;
  const fs::path bad = dir / "bad.yaml";
  write_file(bad, "trainer:\n  train_steps: [1, 2\n  max_to_keep: {\n");
  expect_train_fails_cleanly(
      {"train", "--experiment=tabular/iris", "--config_file=" + bad.string()},
      {bad.string(), "YAML"});
}

TEST(CliErrors, FailedValidation) {
  expect_train_fails_cleanly(
      {"train", "--experiment=tabular/iris", "--params_override=trainer.steps_per_loop=0"},
      {"steps_per_loop", ">= 1"});
}

TEST(CliErrors, UnknownMode) {
  expect_train_fails_cleanly({"train", "--experiment=tabular/iris", "--mode=trian"},
                             {"trian", "train_and_eval"});
}

TEST(CliErrors, MissingCsvInputPath) {
  TempDir dir;
  const std::string missing = (dir / "missing.csv").string();
  expect_train_fails_cleanly({"train", "--experiment=tabular/iris",
                              "--params_override=task.train_data.input_path=" + missing},
                             {missing});
}

TEST(CliErrors, MissingRequiredFlagIsUsageError) {
  TempDir dir;
  {
    SCOPED_TRACE("no --model_dir");
    expect_one_line_error(run_garden({"train", "--experiment=tabular/iris"}, dir.path()),
                          {"--model_dir"}, 2);
  }
  {
    SCOPED_TRACE("no --experiment");
    const fs::path model_dir = dir / "model";
    expect_one_line_error(run_garden({"train", "--model_dir=" + model_dir.string()}, dir.path()),
                          {"--experiment"}, 2);
    EXPECT_FALSE(fs::exists(model_dir));
  }
  {
    SCOPED_TRACE("config without --experiment");
    expect_one_line_error(run_garden({"config"}, dir.path()), {"--experiment"}, 2);
  }
  {
    SCOPED_TRACE("no subcommand");
    expect_one_line_error(run_garden({}, dir.path()), {}, 2);
  }
}

// ---- garden train ----------------------------------------------------------------

TEST(CliTrain, TrainAndEvalWritesModelDir) {
  TempDir dir;
  const fs::path model_dir = dir / "model";
  const Result r =
      run_garden({"train", "--experiment=tabular/iris", "--mode=train_and_eval",
                  "--params_override=" + kQuickIris, "--model_dir=" + model_dir.string()},
                 dir.path());
  ASSERT_EQ(r.status, 0) << r;
  const std::string absolute = fs::absolute(model_dir).string();
  bool saw_model_dir = false, saw_params = false, saw_summaries = false, saw_evaluation = false;
  for (const auto& line : lines_of(r.out)) {
    if (line.rfind("model_dir:", 0) == 0) saw_model_dir = contains(line, absolute);
    if (line.rfind("params.yaml:", 0) == 0)
      saw_params = contains(line, (fs::path(absolute) / "params.yaml").string());
    if (line.rfind("summaries:", 0) == 0)
      saw_summaries = contains(line, "tensorboard --logdir " + absolute);
    if (line.rfind("evaluation:", 0) == 0)
      saw_evaluation = contains(line, "accuracy") && contains(line, "validation_loss");
  }
  EXPECT_TRUE(saw_model_dir) << r;
  EXPECT_TRUE(saw_params) << r;
  EXPECT_TRUE(saw_summaries) << r;
  EXPECT_TRUE(saw_evaluation) << r;

  for (const char* name : {"params.yaml", "train.log", "ckpt-100", "checkpoint"})
    EXPECT_TRUE(fs::is_regular_file(model_dir / name)) << name << " is missing\n" << r;
  EXPECT_FALSE(glob_prefix(model_dir / "train", "events.out.tfevents.").empty()) << r;
  EXPECT_FALSE(glob_prefix(model_dir / "validation", "events.out.tfevents.").empty()) << r;
  EXPECT_TRUE(contains(read_file(model_dir / "checkpoint"), "ckpt-100"));

  // params.yaml is the resolved config, overrides included.
  const YAML::Node params = YAML::LoadFile((model_dir / "params.yaml").string());
  EXPECT_EQ(params["trainer"]["train_steps"].as<int64_t>(), 100);
  EXPECT_FALSE(read_file(model_dir / "train.log").empty());
}

TEST(CliTrain, StartsWithPassiveOpenMpAndAKeptHeapUnlessTheUserChose) {
  // garden train restarts itself with OMP_WAIT_POLICY=PASSIVE (libgomp reads
  // it only at load) and OPENBLAS_THREAD_TIMEOUT=14 (OpenBLAS reads it at
  // load), sets malloc to keep freed memory, and logs what it runs with; what
  // the user set is kept.
  const std::vector<std::string> names = {
      "OMP_WAIT_POLICY",  "GOMP_SPINCOUNT",          "GARDEN_SET_GOMP_SPINCOUNT",
      "GARDEN_GEMM",      "OPENBLAS_THREAD_TIMEOUT", "GOTO_THREAD_TIMEOUT",
      "MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_",  "OPENBLAS_CORETYPE"};
  std::map<std::string, std::optional<std::string>> saved;
  for (const auto& name : names) {
    const char* value = std::getenv(name.c_str());
    saved[name] = value ? std::optional<std::string>(value) : std::nullopt;
    unsetenv(name.c_str());
  }
  struct Case {
    std::vector<std::pair<std::string, std::string>> environment;
    std::vector<std::string> expected;
    std::string threads = "1";  // runtime.intra_op_parallelism_threads
  };
  // Under AddressSanitizer (scripts/sanitize.sh) malloc is the sanitizer's,
  // which glibc's settings do not reach: garden then logs glibc's default.
#if defined(__SANITIZE_ADDRESS__)
  constexpr bool kSanitizedMalloc = true;
#elif defined(__has_feature)
  constexpr bool kSanitizedMalloc = __has_feature(address_sanitizer);
#else
  constexpr bool kSanitizedMalloc = false;
#endif
  // OPENBLAS_THREAD_TIMEOUT is set only where the BLAS is OpenBLAS, and
  // GOMP_SPINCOUNT only where Garden's products run on oneDNN (libgomp's
  // threads) and the user chose no wait policy.
  const bool openblas = garden::loaded_blas_library().find("openblas") != std::string::npos;
  const bool onednn = garden::gemm_library().rfind("oneDNN", 0) == 0;
  const std::string timeout = std::string("OPENBLAS_THREAD_TIMEOUT=") + (openblas ? "14" : "unset");
  std::vector<Case> cases = {
      {{},
       {"threads: 1 LibTorch intra-op (Garden's kernels on 1), OMP_WAIT_POLICY=PASSIVE, " +
            std::string(onednn ? "GOMP_SPINCOUNT=100000 (set by garden: Garden's products run on "
                                 "oneDNN), "
                               : "") +
            timeout + ", ",
        kSanitizedMalloc ? "malloc: glibc's default" : "malloc: heap only, freed memory kept"}},
      // The user's count is kept; passive waits chosen by the user, or
      // products on the BLAS, get none.
      {{{"GOMP_SPINCOUNT", "5000"}}, {"OMP_WAIT_POLICY=PASSIVE, GOMP_SPINCOUNT=5000, " + timeout}},
      {{{"OMP_WAIT_POLICY", "PASSIVE"}}, {"OMP_WAIT_POLICY=PASSIVE, " + timeout}},
      {{{"GARDEN_GEMM", "blas"}}, {"OMP_WAIT_POLICY=PASSIVE, " + timeout}},
      {{{"OMP_WAIT_POLICY", "ACTIVE"},
        {"OPENBLAS_THREAD_TIMEOUT", "20"},
        {"MALLOC_MMAP_MAX_", "65536"}},
       {"OMP_WAIT_POLICY=ACTIVE, OPENBLAS_THREAD_TIMEOUT=20, ",
        "malloc: as the user set (MALLOC_MMAP_MAX_=65536)"}},
      // OpenBLAS's older name for it is the user's choice too.
      {{{"GOTO_THREAD_TIMEOUT", "20"}}, {"OPENBLAS_THREAD_TIMEOUT=unset, "}},
  };
  // 0 is every core, but one thread where libgomp's threads spin.
  if (garden::usable_cores() > 1)
    cases.push_back(
        {{{"OMP_WAIT_POLICY", "ACTIVE"}},
         {"threads: 1 LibTorch intra-op (Garden's kernels on 1) "
          "(runtime.intra_op_parallelism_threads "
          "0 is every core only with OMP_WAIT_POLICY=PASSIVE, which garden's commands set), "
          "OMP_WAIT_POLICY=ACTIVE"},
         "0"});
  // OpenBLAS's generic kernels run on every x86-64 CPU: chosen by the user,
  // they are kept and named (which kernels garden picks is CliEnv's test).
  if (openblas) {
    cases.push_back({{{"OPENBLAS_CORETYPE", "Prescott"}},
                     {"OpenBLAS: Prescott kernels (OPENBLAS_CORETYPE=Prescott as the user set)"}});
    cases.front().expected.push_back(", OpenBLAS: ");
  }
  TempDir dir;
  int index = 0;
  for (const Case& c : cases) {
    for (const auto& [name, value] : c.environment) setenv(name.c_str(), value.c_str(), 1);
    const fs::path model_dir = dir / ("model" + std::to_string(index++));
    const Result r = run_garden(
        {"train", "--experiment=tabular/iris", "--mode=train",
         "--params_override=trainer.train_steps=10,runtime.intra_op_parallelism_threads=" +
             c.threads,
         "--model_dir=" + model_dir.string()},
        dir.path());
    for (const auto& setting : c.environment) unsetenv(setting.first.c_str());
    ASSERT_EQ(r.status, 0) << r;
    const std::string log = read_file(model_dir / "train.log");
    for (const auto& part : c.expected) EXPECT_TRUE(contains(log, part)) << part << "\n" << r;
  }
  for (const auto& [name, value] : saved)
    if (value) setenv(name.c_str(), value->c_str(), 1);
}

TEST(CliEnv, OpenBlasGetsTheWidestKernelsTheCpuRunsOnlyWhereItChoseOlderOnes) {
  // `garden env` starts as the computing commands do and reports what is in
  // effect. The kernels OpenBLAS chooses on its own are this test process's,
  // when the user set no OPENBLAS_CORETYPE for it either.
  if (garden::loaded_blas_library().find("openblas") == std::string::npos)
    GTEST_SKIP() << "the BLAS is not OpenBLAS: " << garden::loaded_blas_library();
  const char* preset = std::getenv("OPENBLAS_CORETYPE");
  const std::optional<std::string> saved =
      preset ? std::optional<std::string>(preset) : std::nullopt;
  TempDir dir;
  if (!saved) {
    const std::string own = garden::openblas_kernels();
    const std::string forced =
        garden::openblas_kernels_to_force(own, garden::best_openblas_kernels_for_cpu());
    const Result r = run_garden({"env"}, dir.path());
    ASSERT_EQ(r.status, 0) << r;
    if (forced.empty()) {
      EXPECT_FALSE(contains(r.out, "OPENBLAS_CORETYPE")) << r;
      EXPECT_TRUE(contains(r.out, "# OpenBLAS: " + own + " kernels\n")) << r;
    } else {
      // OpenBLAS honoured the kernels garden set: the products ran with them.
      EXPECT_TRUE(contains(r.out, "export OPENBLAS_CORETYPE=" + forced + "\n")) << r;
      EXPECT_TRUE(contains(r.out, "# OpenBLAS: " + forced +
                                      " kernels (OPENBLAS_CORETYPE set by garden: OpenBLAS chose " +
                                      own + " for this CPU)\n"))
          << r;
    }
  }
  setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  const Result user = run_garden({"env"}, dir.path());
  if (saved)
    setenv("OPENBLAS_CORETYPE", saved->c_str(), 1);
  else
    unsetenv("OPENBLAS_CORETYPE");
  ASSERT_EQ(user.status, 0) << user;
  EXPECT_TRUE(contains(user.out, "export OPENBLAS_CORETYPE=Prescott\n")) << user;
  EXPECT_TRUE(contains(
      user.out, "# OpenBLAS: Prescott kernels (OPENBLAS_CORETYPE=Prescott as the user set)\n"))
      << user;
}

// `garden env` names the library of Garden's own float32 products;
// GARDEN_GEMM=blas keeps LibTorch's BLAS, and another value is one line.
TEST(CliEnv, NamesTheLibraryOfGardensProductsAndRefusesAnUnknownOne) {
  TempDir dir;
  const Result r = run_garden({"env"}, dir.path());
  ASSERT_EQ(r.status, 0) << r;
  EXPECT_TRUE(contains(r.out, "# matrix products of Garden's layers: " + garden::gemm_library() +
                                  " (GARDEN_GEMM=onednn|blas)\n"))
      << r;
  setenv("GARDEN_GEMM", "blas", 1);
  const Result blas = run_garden({"env"}, dir.path());
  setenv("GARDEN_GEMM", "mkl", 1);
  const Result bad = run_garden({"env"}, dir.path());
  const Result bad_train = run_garden({"train", "--experiment=tabular/iris", "--mode=train",
                                       "--model_dir=" + (dir / "model").string()},
                                      dir.path());
  unsetenv("GARDEN_GEMM");
  ASSERT_EQ(blas.status, 0) << blas;
  EXPECT_TRUE(contains(blas.out, "# matrix products of Garden's layers: BLAS (")) << blas;
  for (const Result* failed : {&bad, &bad_train}) {
    EXPECT_NE(failed->status, 0) << *failed;
    EXPECT_TRUE(contains(failed->err, "GARDEN_GEMM=mkl: must be onednn or blas")) << *failed;
  }
}

TEST(CliTrain, RerunFromParamsYamlIsBitIdentical) {
  TempDir dir;
  const fs::path first = dir / "first";
  const fs::path second = dir / "second";
  const Result a = run_garden({"train", "--experiment=tabular/iris", "--mode=train_and_eval",
                               "--params_override=" + kQuickIris, "--model_dir=" + first.string()},
                              dir.path());
  ASSERT_EQ(a.status, 0) << a;
  ASSERT_TRUE(fs::is_regular_file(first / "ckpt-100")) << a;
  const Result b = run_garden(
      {"train", "--experiment=tabular/iris", "--mode=train_and_eval",
       "--config_file=" + (first / "params.yaml").string(), "--model_dir=" + second.string()},
      dir.path());
  ASSERT_EQ(b.status, 0) << b;
  ASSERT_TRUE(fs::is_regular_file(second / "ckpt-100")) << b;
  const std::string bytes_a = read_file(first / "ckpt-100");
  const std::string bytes_b = read_file(second / "ckpt-100");
  EXPECT_EQ(bytes_a.size(), bytes_b.size());
  EXPECT_TRUE(bytes_a == bytes_b) << "ckpt-100 differs between the run and its rerun from "
                                     "params.yaml";
  EXPECT_EQ(read_file(first / "params.yaml"), read_file(second / "params.yaml"));
}

// Resuming with a config whose model does not fit the checkpoint fails; the
// run it would have resumed must be left as it was (its params.yaml still
// describes its checkpoints).
// DISABLED: run_experiment (src/core/train_lib.cpp) writes params.yaml and
// opens train.log before restoring the checkpoint, so today the failed resume
// overwrites params.yaml with the incompatible config. Enable once fixed.
TEST(CliTrain, IncompatibleResumeLeavesModelDirUnchanged) {
  TempDir dir;
  const fs::path model_dir = dir / "model";
  const Result t =
      run_garden({"train", "--experiment=tabular/iris", "--mode=train",
                  "--params_override=" + kQuickIris, "--model_dir=" + model_dir.string()},
                 dir.path());
  ASSERT_EQ(t.status, 0) << t;
  const auto before = snapshot(model_dir);
  const Result r =
      run_garden({"train", "--experiment=tabular/iris", "--mode=train",
                  "--params_override=trainer.train_steps=200,task.model.hidden_layer_sizes=[8]",
                  "--model_dir=" + model_dir.string()},
                 dir.path());
  expect_one_line_error(r, {"has shape"});
  EXPECT_EQ(changes(before, snapshot(model_dir)), "") << "the failed resume changed model_dir\n"
                                                      << r;
}

// A damaged newest checkpoint (cut short by a full disk, a bit flipped on
// the way) is passed over with one line naming it: the run resumes from the
// one before, and ends where an undisturbed run ends, bit for bit.
TEST(CliTrain, ResumesFromTheNewestIntactCheckpointAndSaysSo) {
  TempDir dir;
  const std::string every50 = "trainer.checkpoint_interval=50,trainer.steps_per_loop=50,";
  auto train = [&](const fs::path& model_dir, int steps) {
    return run_garden(
        {"train", "--experiment=tabular/iris", "--mode=train",
         "--params_override=" + every50 + "trainer.train_steps=" + std::to_string(steps),
         "--model_dir=" + model_dir.string()},
        dir.path());
  };
  const fs::path damaged = dir / "damaged", whole = dir / "whole";
  ASSERT_EQ(train(damaged, 100).status, 0);
  fs::resize_file(damaged / "ckpt-100", fs::file_size(damaged / "ckpt-100") / 2);
  const Result r = train(damaged, 150);
  ASSERT_EQ(r.status, 0) << r;
  EXPECT_TRUE(contains(r.err, "checkpoint '" + (damaged / "ckpt-100").string() + "' is truncated"))
      << r;
  EXPECT_TRUE(contains(r.err, "resuming from the older " + (damaged / "ckpt-50").string())) << r;
  const Result u = train(whole, 150);
  ASSERT_EQ(u.status, 0) << u;
  EXPECT_TRUE(read_file(damaged / "ckpt-150") == read_file(whole / "ckpt-150"))
      << "the resumed run ended elsewhere than an undisturbed one";
}

// ---- garden train --mode=eval --------------------------------------------------------

TEST(CliEval, NeedsACheckpointThenEvaluates) {
  TempDir dir;
  const fs::path model_dir = dir / "model";
  fs::create_directories(model_dir);
  {
    SCOPED_TRACE("empty model_dir");
    const Result r = run_garden(
        {"train", "--experiment=tabular/iris", "--mode=eval", "--model_dir=" + model_dir.string()},
        dir.path());
    expect_one_line_error(r, {"no checkpoint"});
    EXPECT_EQ(changes({}, snapshot(model_dir)), "") << "eval wrote into model_dir\n" << r;
  }
  const Result t =
      run_garden({"train", "--experiment=tabular/iris", "--mode=train",
                  "--params_override=" + kQuickIris, "--model_dir=" + model_dir.string()},
                 dir.path());
  ASSERT_EQ(t.status, 0) << t;
  {
    SCOPED_TRACE("after training");
    const Result r =
        run_garden({"train", "--experiment=tabular/iris", "--mode=eval",
                    "--params_override=" + kQuickIris, "--model_dir=" + model_dir.string()},
                   dir.path());
    ASSERT_EQ(r.status, 0) << r;
    bool evaluated = false;
    for (const auto& line : lines_of(r.out))
      if (line.rfind("evaluation:", 0) == 0)
        evaluated = contains(line, "accuracy") && contains(line, "validation_loss");
    EXPECT_TRUE(evaluated) << r;
    EXPECT_TRUE(fs::is_regular_file(model_dir / "ckpt-100")) << r;
  }
}

}  // namespace
