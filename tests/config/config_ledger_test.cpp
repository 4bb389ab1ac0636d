// Every accepted value means something. docs/config.md is the ledger of every
// config key of every registered experiment: what the key does ("effect"),
// or that a value is refused at start ("refused"), or that it is accepted
// only for Model Garden compatibility and warned about ("compatibility").
// These tests hold the code to the ledger, and walk every numeric key with a
// value that no key may accept.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "garden/config/registry.h"
#include "garden/config/yaml_io.h"
#include "test_util.h"

namespace fs = std::filesystem;
namespace gc = garden::config;

namespace {

struct Leaf {
  std::string path;
  std::string type;  // Field::type_name(): "float", "int or null", "list of float", ...
};

// Every leaf key, with the optional sections (differential privacy, EMA)
// created so that their keys are walked too.
class LeafWalker : public gc::Visitor {
 public:
  LeafWalker(std::vector<Leaf>& out, std::string prefix) : out_(out), prefix_(std::move(prefix)) {}

 protected:
  void on_field(const char* name, gc::Field& field, const char*) override {
    const std::string path = prefix_.empty() ? name : prefix_ + "." + name;
    if (!field.config() && field.type_name() == "mapping or null")
      field.from_yaml(YAML::Load("{}"), path);
    if (gc::Config* sub = field.config()) {
      LeafWalker nested(out_, path);
      sub->visit(nested);
      return;
    }
    out_.push_back({path, field.type_name()});
  }

 private:
  std::vector<Leaf>& out_;
  std::string prefix_;
};

std::vector<Leaf> leaves_of(gc::Config& config) {
  std::vector<Leaf> out;
  LeafWalker walker(out, "");
  config.visit(walker);
  return out;
}

std::vector<std::string> experiment_names() {
  std::vector<std::string> names;
  for (const auto& name : gc::experiment_registry().names())
    // Other test files register experiments of their own under test/.
    if (name.rfind("test/", 0) != 0) names.push_back(name);
  return names;
}

// A registered experiment, made valid where its defaults leave something to
// the user (the data path of the generic CSV experiment).
std::shared_ptr<gc::ExperimentConfig> valid_experiment(const std::string& name) {
  auto config = gc::get_experiment_config(name);
  if (name == "tabular/classification")
    gc::apply_override(*config, "task.train_data.input_path=train.csv");
  if (name == "vision/mnist" || name == "vision/flowers")
    gc::apply_override(*config, "task.train_data.input_path=train.tfrecord");
  return config;
}

using garden_test::error_of;

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

// ---- the ledger ---------------------------------------------------------------

struct Row {
  std::string key;    // may hold `*`, matching within one segment
  std::string kind;   // effect, refused, compatibility
  std::string value;  // refused / compatibility: a value that shows it
  int line = 0;
  std::regex pattern;
};

struct Section {
  std::string heading;
  std::vector<Row> rows;
};

std::regex key_pattern(const std::string& key) {
  std::string regex;
  for (char c : key) {
    if (c == '*')
      regex += "[^.]*";
    else if (std::isalnum(static_cast<unsigned char>(c)) || c == '_')
      regex += c;
    else
      regex += std::string("\\") + c;
  }
  return std::regex(regex);
}

// `| `key` | kind | effect |` rows under `## ` headings. The kind cell is
// `effect`, `refused: `value`` or `compatibility: `value``.
std::vector<Section> read_ledger() {
  const std::string path = std::string(GARDEN_SOURCE_DIR) + "/docs/config.md";
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::vector<Section> sections;
  const std::regex row_re(
      R"(^\|\s*`([^`]+)`\s*\|\s*(effect|refused|compatibility)(?::\s*`([^`]*)`)?\s*\|)");
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (starts_with(line, "## ")) {
      sections.push_back({line, {}});
      continue;
    }
    std::smatch m;
    if (!starts_with(line, "| `")) continue;
    EXPECT_TRUE(std::regex_search(line, m, row_re))
        << "docs/config.md line " << line_number << " is not `| `key` | kind | effect |`: " << line;
    if (m.empty()) continue;
    EXPECT_FALSE(sections.empty()) << "docs/config.md line " << line_number << " is in no section";
    if (sections.empty()) continue;
    Row row{m[1], m[2], m[3], line_number, key_pattern(m[1])};
    EXPECT_TRUE(row.kind == "effect" || m[3].matched)
        << "docs/config.md line " << line_number << ": a " << row.kind
        << " row needs a value that shows it, as `" << row.kind << ": `value``";
    sections.back().rows.push_back(std::move(row));
  }
  return sections;
}

// The sections that apply to an experiment: the common one, and the one
// whose heading names the experiment in backticks.
std::vector<const Section*> sections_for(const std::vector<Section>& ledger,
                                         const std::string& experiment) {
  std::vector<const Section*> out;
  for (const auto& section : ledger)
    if (section.heading.find("every experiment") != std::string::npos ||
        section.heading.find("`" + experiment + "`") != std::string::npos)
      out.push_back(&section);
  return out;
}

// The rows whose key matches `path` in the experiment's sections.
std::vector<const Row*> rows_for(const std::vector<const Section*>& sections,
                                 const std::string& path) {
  std::vector<const Row*> out;
  for (const Section* section : sections)
    for (const Row& row : section->rows)
      if (std::regex_match(path, row.pattern)) out.push_back(&row);
  return out;
}

TEST(ConfigLedgerTest, EveryKeyOfEveryExperimentHasOneRowAndEveryRowAKey) {
  const auto ledger = read_ledger();
  std::map<const Row*, int> matches;
  std::string missing;
  const auto names = experiment_names();
  ASSERT_GE(names.size(), 6u);
  for (const auto& name : names) {
    const auto sections = sections_for(ledger, name);
    EXPECT_GE(sections.size(), 2u) << name << " has no section in docs/config.md";
    auto config = gc::get_experiment_config(name);
    for (const auto& leaf : leaves_of(*config)) {
      const auto rows = rows_for(sections, leaf.path);
      if (rows.empty()) missing += "\n  " + name + ": " + leaf.path;
      EXPECT_LE(rows.size(), 1u) << name << ": " << leaf.path << " matches several rows";
      for (const Row* row : rows) ++matches[row];
    }
  }
  EXPECT_TRUE(missing.empty()) << "keys with no row in docs/config.md:" << missing;
  for (const auto& section : ledger)
    for (const auto& row : section.rows)
      EXPECT_TRUE(matches.count(&row)) << "docs/config.md line " << row.line << ": `" << row.key
                                       << "` is no key of " << section.heading;
}

TEST(ConfigLedgerTest, CompatibilityKeysWarnAndRefusedKeysAreRefused) {
  const auto ledger = read_ledger();
  int compatibility = 0, refused = 0;
  for (const auto& name : experiment_names()) {
    const auto sections = sections_for(ledger, name);
    auto defaults = valid_experiment(name);
    ASSERT_EQ(error_of([&] { gc::validate_config(*defaults); }), "(no error)") << name;
    EXPECT_TRUE(gc::compatibility_warnings(*defaults).empty())
        << name << "'s defaults warn: " << gc::compatibility_warnings(*defaults).front();
    for (const auto& leaf : leaves_of(*gc::get_experiment_config(name))) {
      for (const Row* row : rows_for(sections, leaf.path)) {
        if (row->kind == "effect") continue;
        auto config = valid_experiment(name);
        const std::string assignment = leaf.path + "=" + row->value;
        gc::apply_override(*config, assignment);
        const std::string error = error_of([&] { gc::validate_config(*config); });
        if (row->kind == "compatibility") {
          ++compatibility;
          EXPECT_EQ(error, "(no error)") << name << ": " << assignment;
          const auto warnings = gc::compatibility_warnings(*config);
          ASSERT_EQ(warnings.size(), 1u) << name << ": " << assignment << " gives no warning";
          EXPECT_NE(warnings[0].find(" " + leaf.path + " ("), std::string::npos)
              << name << ": " << assignment << " warns: " << warnings[0];
        } else {
          ++refused;
          EXPECT_TRUE(starts_with(error, leaf.path + ": "))
              << name << ": " << assignment << " gives: " << error;
        }
      }
    }
  }
  EXPECT_GT(compatibility, 0);
  EXPECT_GT(refused, 0);
}

// ---- effect keys are read ----------------------------------------------------

// The source with comments and string and character literals blanked out.
std::string code_only(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i < text.size() && text[i] != '\n') ++i;
      out += '\n';
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      i = text.find("*/", i + 2);
      if (i == std::string::npos) break;
      ++i;
      out += ' ';
    } else if (c == '"' || c == '\'') {
      // Raw strings do not occur in src/ (checked below).
      for (++i; i < text.size() && text[i] != c; ++i)
        if (text[i] == '\\') ++i;
      out += "\"\"";
    } else {
      out += c;
    }
  }
  return out;
}

// `code` without the bodies of visit(), validate(), validate_reading(),
// visit_task_fields() and ignored_keys(): there a key is listed or checked,
// not used.
std::string without_config_plumbing(const std::string& code) {
  static const std::regex signature(
      R"(\b(visit|visit_task_fields|validate|validate_reading|ignored_keys)\s*\([^;{)]*\)\s*(const\s*)?(override\s*)?(final\s*)?\{)");
  std::string out;
  std::size_t from = 0;
  for (std::sregex_iterator it(code.begin(), code.end(), signature), end; it != end; ++it) {
    const std::size_t open = static_cast<std::size_t>(it->position() + it->length() - 1);
    if (open < from) continue;
    std::size_t close = open;
    for (int depth = 0; close < code.size(); ++close) {
      if (code[close] == '{') ++depth;
      if (code[close] == '}' && --depth == 0) break;
    }
    out += code.substr(from, open - from);
    from = close + 1;
  }
  return out + code.substr(from);
}

bool is_identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Does `code` read `.member` or `->member` somewhere (not only assign to it)?
bool reads_member(const std::string& code, const std::string& member) {
  for (std::size_t at = code.find(member); at != std::string::npos;
       at = code.find(member, at + 1)) {
    const bool after_dot = at >= 1 && code[at - 1] == '.';
    const bool after_arrow = at >= 2 && code.compare(at - 2, 2, "->") == 0;
    const std::size_t end = at + member.size();
    if (!(after_dot || after_arrow) || (end < code.size() && is_identifier_char(code[end])))
      continue;
    const std::size_t next = code.find_first_not_of(" \t\n", end);
    const bool assigned = next != std::string::npos && code[next] == '=' &&
                          next + 1 < code.size() && code[next + 1] != '=';
    if (!assigned) return true;
  }
  return false;
}

TEST(ConfigLedgerTest, EffectKeysAreReadBySomeCode) {
  std::string corpus;
  for (const char* folder : {"src", "include"}) {
    for (const auto& entry :
         fs::recursive_directory_iterator(fs::path(GARDEN_SOURCE_DIR) / folder)) {
      const auto ext = entry.path().extension();
      if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".h")) continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      ASSERT_EQ(text.str().find("R\"("), std::string::npos)
          << entry.path() << " has a raw string literal; teach code_only() about them";
      corpus += without_config_plumbing(code_only(text.str())) + "\n";
    }
  }
  // Members read under another name than their key; each says where.
  const std::set<std::string> read_elsewhere = {};
  int effects = 0;
  for (const auto& section : read_ledger()) {
    for (const auto& row : section.rows) {
      if (row.kind != "effect") continue;
      ++effects;
      const std::string member = row.key.substr(row.key.rfind('.') + 1);
      ASSERT_EQ(member.find('*'), std::string::npos) << row.key;
      if (read_elsewhere.count(member)) continue;
      EXPECT_TRUE(reads_member(corpus, member))
          << "docs/config.md line " << row.line << ": `" << row.key
          << "` is an effect key, but no code outside visit()/validate() reads ." << member;
    }
  }
  EXPECT_GT(effects, 100);
}

// ---- walks over every numeric key --------------------------------------------

// No float key means anything by NaN: each is refused, naming the key.
TEST(ConfigLedgerTest, NanIsRefusedForEveryFloatKey) {
  int walked = 0;
  for (const auto& name : experiment_names()) {
    for (const auto& leaf : leaves_of(*gc::get_experiment_config(name))) {
      if (leaf.type.find("float") == std::string::npos) continue;
      const bool list = starts_with(leaf.type, "list of");
      auto config = valid_experiment(name);
      gc::apply_override(*config, leaf.path + "=" + (list ? "[.nan]" : ".nan"));
      const std::string error = error_of([&] { gc::validate_config(*config); });
      const std::string key = leaf.path + (list ? "[0]" : "");
      EXPECT_TRUE(starts_with(error, key + ": nan ")) << name << ": " << key << ": " << error;
      ++walked;
    }
  }
  EXPECT_GT(walked, 100);
}

// No int key (steps, sizes, intervals, seeds, indices) means anything by a
// hugely negative value: each is refused, naming the key.
TEST(ConfigLedgerTest, AHugeNegativeValueIsRefusedForEveryIntKey) {
  const std::string value = "-4611686018427387904";
  int walked = 0;
  for (const auto& name : experiment_names()) {
    for (const auto& leaf : leaves_of(*gc::get_experiment_config(name))) {
      if (leaf.type.find("int") == std::string::npos) continue;
      const bool list = starts_with(leaf.type, "list of");
      auto config = valid_experiment(name);
      gc::apply_override(*config, leaf.path + "=" + (list ? "[" + value + "]" : value));
      const std::string error = error_of([&] { gc::validate_config(*config); });
      const std::string key = leaf.path + (list ? "[0]" : "");
      EXPECT_TRUE(starts_with(error, key + ": " + value)) << name << ": " << key << ": " << error;
      ++walked;
    }
  }
  EXPECT_GT(walked, 50);
}

}  // namespace
