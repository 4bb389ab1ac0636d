#include "garden/config/yaml_io.h"

#include "garden/config/validation.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>

#include "garden/base/crc32c.h"
#include "garden/base/file_io.h"

namespace garden::config {
namespace {

std::string join_path(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Collects the fields of one config level, by name.
class FieldNames : public Visitor {
 public:
  std::vector<std::string> names;

 protected:
  void on_field(const char* name, Field&, const char*) override { names.emplace_back(name); }
};

class Reader : public Visitor {
 public:
  Reader(const YAML::Node& node, std::string path) : node_(node), path_(std::move(path)) {}

 protected:
  void on_field(const char* name, Field& field, const char*) override {
    const YAML::Node value = node_[name];
    if (value.IsDefined()) field.from_yaml(value, join_path(path_, name));
  }

 private:
  const YAML::Node& node_;
  std::string path_;
};

class Writer : public Visitor {
 public:
  YAML::Node node{YAML::NodeType::Map};

 protected:
  void on_field(const char* name, Field& field, const char*) override {
    node[name] = field.to_yaml();
  }
};

class Validator : public Visitor {
 public:
  explicit Validator(std::string path) : path_(std::move(path)) {}

 protected:
  void on_field(const char* name, Field& field, const char*) override {
    if (Config* sub = field.config()) validate_at(*sub, join_path(path_, name));
  }

 public:
  static void validate_at(Config& config, const std::string& path) {
    Validator nested(path);
    config.visit(nested);
    detail::KeyPrefix prefix(path);
    try {
      config.validate();
    } catch (const ConfigError& e) {
      // Errors from key_path()/refuse() already name the full key; others
      // get the config's path.
      const std::string message = e.what();
      if (path.empty() || message.rfind(path + ".", 0) == 0 || message.rfind(path + ":", 0) == 0)
        throw;
      throw ConfigError(path + ": " + message);
    }
  }

 private:
  std::string path_;
};

// Collects the ignored keys set in a config and every config nested in it.
class IgnoredKeyCollector : public Visitor {
 public:
  IgnoredKeyCollector(std::vector<IgnoredKey>& out, std::string path)
      : out_(out), path_(std::move(path)) {}

  static void collect(Config& config, const std::string& path, std::vector<IgnoredKey>& out) {
    for (auto& ignored : config.ignored_keys())
      out.push_back({join_path(path, ignored.key), ignored.reason});
    IgnoredKeyCollector nested(out, path);
    config.visit(nested);
  }

 protected:
  void on_field(const char* name, Field& field, const char*) override {
    if (Config* sub = field.config()) collect(*sub, join_path(path_, name), out_);
  }

 private:
  std::vector<IgnoredKey>& out_;
  std::string path_;
};

class PathCollector : public Visitor {
 public:
  PathCollector(std::vector<std::string>& out, std::string prefix)
      : out_(out), prefix_(std::move(prefix)) {}

 protected:
  void on_field(const char* name, Field& field, const char*) override {
    const std::string path = join_path(prefix_, name);
    if (Config* sub = field.config()) {
      PathCollector nested(out_, path);
      sub->visit(nested);
    } else {
      out_.push_back(path);
    }
  }

 private:
  std::vector<std::string>& out_;
  std::string prefix_;
};

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

bool is_null_scalar(const YAML::Node& node) { return !node.IsDefined() || node.IsNull(); }

}  // namespace

std::string describe_node(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "null";
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsSequence()) return "a list";
  return "a mapping";
}

void throw_type_error(const std::string& path, const YAML::Node& node,
                      const std::string& expected) {
  throw ConfigError("config key '" + path + "': expected " + expected + ", got " +
                    describe_node(node));
}

bool decode_bool(const YAML::Node& node, const std::string& path) {
  if (node.IsScalar()) {
    std::string s = node.Scalar();
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    if (s == "true") return true;
    if (s == "false") return false;
  }
  throw_type_error(path, node, "bool (true or false)");
}

int64_t decode_int(const YAML::Node& node, const std::string& path) {
  if (node.IsScalar() && !node.Scalar().empty()) {
    const std::string& s = node.Scalar();
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (errno == 0 && end == s.c_str() + s.size()) return static_cast<int64_t>(v);
    // Accept integral floats written like 1e6 or 100.0, as YAML writers do.
    const double d = std::strtod(s.c_str(), &end);
    if (end == s.c_str() + s.size() && std::isfinite(d) && std::floor(d) == d &&
        std::fabs(d) < 9.0e18)
      return static_cast<int64_t>(d);
  }
  throw_type_error(path, node, "int");
}

double decode_float(const YAML::Node& node, const std::string& path) {
  if (node.IsScalar() && !node.Scalar().empty()) {
    std::string s = node.Scalar();
    std::string lower = s;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    if (lower == ".inf" || lower == "+.inf" || lower == "inf")
      return std::numeric_limits<double>::infinity();
    if (lower == "-.inf" || lower == "-inf") return -std::numeric_limits<double>::infinity();
    if (lower == ".nan" || lower == "nan") return std::numeric_limits<double>::quiet_NaN();
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(s.c_str(), &end);
    // Underflow (ERANGE with a subnormal or zero) is still a number; overflow
    // (ERANGE with HUGE_VAL) is not the number written.
    if (end == s.c_str() + s.size() && !(errno == ERANGE && std::isinf(v))) return v;
    if (end == s.c_str() + s.size())
      throw ConfigError("config key '" + path + "': " + s +
                        " is beyond the largest float (about 1.8e308)");
  }
  throw_type_error(path, node, "float");
}

std::string decode_string(const YAML::Node& node, const std::string& path) {
  if (is_null_scalar(node)) return "";
  if (!node.IsScalar()) throw_type_error(path, node, "string");
  return node.Scalar();
}

YAML::Node encode_float(double v) {
  if (std::isnan(v)) return YAML::Node(".nan");
  if (std::isinf(v)) return YAML::Node(v > 0 ? ".inf" : "-.inf");
  // Shortest text that reads back to the same double, and always looks like a
  // float (so a reader of params.yaml sees the type).
  std::string text = number_text(v);
  if (text.find_first_of(".eE") == std::string::npos) text += ".0";
  return YAML::Node(text);
}

std::string nearest(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  for (const auto& c : candidates) {
    const std::size_t d = edit_distance(name, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  // Only suggest names that are plausibly what was meant.
  if (best.empty() || best_distance > std::max<std::size_t>(2, name.size() / 2)) return "";
  return best;
}

void read_config(Config& config, const YAML::Node& node, const std::string& path) {
  if (config.locked())
    throw ConfigError("config" + (path.empty() ? std::string() : " '" + path + "'") +
                      " is locked; overrides must come before validation");
  if (is_null_scalar(node)) return;
  if (!node.IsMap()) throw_type_error(path.empty() ? "<root>" : path, node, "a mapping");
  FieldNames fields;
  config.visit(fields);
  // YAML keeps the first of two equal keys and a dotted override the last:
  // neither is what every user expects, so a key given twice is an error.
  std::map<std::string, YAML::Mark> seen;
  for (const auto& item : node) {
    const YAML::Mark mark = item.first.Mark();
    // YAML allows a mapping or a list as a key ("{ {a: 1}: 2 }"); a config
    // key is a name.
    if (!item.first.IsScalar())
      throw ConfigError("a config key " + std::string(path.empty() ? "" : "under '" + path + "' ") +
                        (mark.line >= 0 ? "at line " + std::to_string(mark.line + 1) + " " : "") +
                        "is a " + (item.first.IsMap() ? "mapping" : "list") + ", not a name");
    const std::string key = item.first.as<std::string>();
    const auto [first, inserted] = seen.emplace(key, mark);
    if (!inserted)
      throw ConfigError("duplicate config key '" + join_path(path, key) + "'" +
                        (mark.line >= 0 ? " at line " + std::to_string(mark.line + 1) : "") +
                        (first->second.line >= 0
                             ? " (first at line " + std::to_string(first->second.line + 1) + ")"
                             : ""));
    if (std::find(fields.names.begin(), fields.names.end(), key) != fields.names.end()) continue;
    std::string message = "unknown config key '" + join_path(path, key) + "'";
    const std::string suggestion = nearest(key, fields.names);
    if (!suggestion.empty())
      message += "; did you mean '" + join_path(path, suggestion) + "'?";
    else
      message += "; valid keys here: " + [&] {
        std::string all;
        for (const auto& n : fields.names) all += (all.empty() ? "" : ", ") + n;
        return all;
      }();
    throw ConfigError(message);
  }
  Reader reader(node, path);
  config.visit(reader);
}

YAML::Node write_config(Config& config) {
  Writer writer;
  config.visit(writer);
  return writer.node;
}

std::string to_yaml_string(Config& config) {
  YAML::Emitter out;
  out << write_config(config);
  return std::string(out.c_str()) + "\n";
}

namespace {

constexpr const char* kChecksumLine = "# garden params: ";

std::string hex32(uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", value);
  return text;
}

// The first line "# garden params: N bytes, crc32c XXXXXXXX ..." must
// describe the rest of the file.
void check_params_checksum(const std::string& text, const std::string& file) {
  if (text.rfind(kChecksumLine, 0) != 0) return;
  const auto end = text.find('\n');
  const std::string line = text.substr(0, end);
  const std::string body = end == std::string::npos ? "" : text.substr(end + 1);
  unsigned long long bytes = 0;
  char crc[9] = {0};
  if (std::sscanf(line.c_str() + std::strlen(kChecksumLine), "%llu bytes, crc32c %8[0-9a-f]",
                  &bytes, crc) != 2)
    throw ConfigError("config file '" + file + "' has a damaged first line (garden's checksum)");
  if (bytes != body.size())
    throw ConfigError("config file '" + file + "' is damaged: " + std::to_string(body.size()) +
                      " bytes follow its checksum line, which says " + std::to_string(bytes) +
                      " were written (cut short?); if you edited it on purpose, delete that "
                      "first line");
  if (hex32(crc32c(body.data(), body.size())) != crc)
    throw ConfigError("config file '" + file +
                      "' is damaged: its content does not match the CRC-32C written with it; if "
                      "you edited it on purpose, delete its first line");
}

}  // namespace

namespace {
constexpr const char* kExperimentLine = "# experiment: ";
}  // namespace

std::string params_file_text(Config& config, const std::string& experiment) {
  const std::string yaml =
      (experiment.empty() ? std::string() : kExperimentLine + experiment + "\n") +
      to_yaml_string(config);
  return std::string(kChecksumLine) + std::to_string(yaml.size()) + " bytes, crc32c " +
         hex32(crc32c(yaml.data(), yaml.size())) +
         " (checked when read back; delete this line after editing)\n" + yaml;
}

std::string params_file_experiment(const std::string& text) {
  // The first line, or the second behind the checksum line.
  std::size_t begin = 0;
  if (text.rfind(kChecksumLine, 0) == 0) begin = std::min(text.find('\n'), text.size() - 1) + 1;
  const std::size_t end = std::min(text.find('\n', begin), text.size());
  const std::string line = text.substr(begin, end - begin);
  if (line.rfind(kExperimentLine, 0) != 0) return "";
  std::string name = line.substr(std::strlen(kExperimentLine));
  while (!name.empty() && (name.back() == ' ' || name.back() == '\r')) name.pop_back();
  return name;
}

void note_set_keys(const YAML::Node& node, const std::string& prefix, const std::string& source,
                   SetKeys& keys) {
  if (node.IsMap()) {
    for (const auto& item : node) {
      const std::string key = item.first.as<std::string>();
      note_set_keys(item.second, prefix.empty() ? key : prefix + "." + key, source, keys);
    }
    return;
  }
  if (!prefix.empty()) keys[prefix] = source;
}

void apply_file(Config& config, const std::string& file, SetKeys* set) {
  // A directory opens as a stream and fails inside the YAML reader without
  // a path: checked first, the error names the file and what is wrong.
  try {
    check_input_file(file, "config file");
  } catch (const Error& e) {
    throw ConfigError(std::string("cannot read config file: ") + e.what());
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ConfigError("config file '" + file + "' cannot be read");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  check_params_checksum(text, file);
  YAML::Node node;
  try {
    node = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError("config file '" + file + "' is not valid YAML: " + e.what());
  }
  try {
    read_config(config, node);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string(e.what()) + " (in " + file + ")");
  }
  if (set) note_set_keys(node, "", "--config_file " + file, *set);
}

namespace {

// Splits `a=1,b=[1,2],c='x,y'` at top-level commas.
std::vector<std::string> split_assignments(std::string_view text) {
  std::vector<std::string> parts;
  std::string current;
  int depth = 0;
  char quote = 0;
  for (char c : text) {
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if (c == ']' || c == '}') {
      --depth;
    } else if (c == ',' && depth == 0) {
      parts.push_back(current);
      current.clear();
      continue;
    }
    current += c;
  }
  if (quote || depth != 0)
    throw ConfigError("params_override: unbalanced quotes or brackets in '" + std::string(text) +
                      "'");
  parts.push_back(current);
  return parts;
}

std::string trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\n");
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(" \t\n");
  return s.substr(begin, end - begin + 1);
}

bool looks_like_assignments(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  if (i == text.size() || !(std::isalpha(static_cast<unsigned char>(text[i])) || text[i] == '_'))
    return false;
  while (i < text.size() &&
         (std::isalnum(static_cast<unsigned char>(text[i])) || text[i] == '_' || text[i] == '.'))
    ++i;
  while (i < text.size() && text[i] == ' ') ++i;
  return i < text.size() && text[i] == '=';
}

}  // namespace

YAML::Node parse_override(std::string_view text) {
  YAML::Node root(YAML::NodeType::Map);
  if (trim(std::string(text)).empty()) return root;
  if (!looks_like_assignments(text)) {
    try {
      YAML::Node node = YAML::Load(std::string(text));
      if (!node.IsMap())
        throw ConfigError("params_override: expected `a.b=value,...` or a YAML mapping, got '" +
                          std::string(text) + "'");
      return node;
    } catch (const YAML::Exception& e) {
      throw ConfigError("params_override is neither `a.b=value,...` nor valid YAML: " +
                        std::string(e.what()));
    }
  }
  std::vector<std::string> assigned;
  for (const std::string& part : split_assignments(text)) {
    const std::string item = trim(part);
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      throw ConfigError("params_override: '" + item + "' is not of the form key=value");
    const std::string key = trim(item.substr(0, eq));
    if (key.empty()) throw ConfigError("params_override: '" + item + "' has no key before '='");
    const std::string value_text = trim(item.substr(eq + 1));
    YAML::Node value;
    try {
      value = YAML::Load(value_text);
    } catch (const YAML::Exception& e) {
      throw ConfigError("params_override: cannot parse the value of '" + key + "': " + e.what());
    }
    // A key set twice, or set whole and within (a=..., a.b=...), would
    // silently keep one of the values.
    for (const std::string& earlier : assigned) {
      const bool same = earlier == key;
      const bool nested = earlier.rfind(key + ".", 0) == 0 || key.rfind(earlier + ".", 0) == 0;
      if (same || nested)
        throw ConfigError("params_override: '" + key + "' is set twice" +
                          (same ? "" : " (also by '" + earlier + "')"));
    }
    assigned.push_back(key);
    // Walk/create the nested mapping for a.b.c.
    std::vector<std::string> segments;
    std::stringstream ss(key);
    for (std::string seg; std::getline(ss, seg, '.');) {
      if (seg.empty()) throw ConfigError("params_override: empty segment in key '" + key + "'");
      segments.push_back(seg);
    }
    std::vector<YAML::Node> chain{root};
    for (std::size_t i = 0; i + 1 < segments.size(); ++i) {
      YAML::Node next = chain.back()[segments[i]];
      if (!next.IsDefined() || !next.IsMap()) {
        chain.back()[segments[i]] = YAML::Node(YAML::NodeType::Map);
        next = chain.back()[segments[i]];
      }
      chain.push_back(next);
    }
    chain.back()[segments.back()] = value;
  }
  return root;
}

void apply_override(Config& config, std::string_view text, SetKeys* set) {
  const YAML::Node node = parse_override(text);
  try {
    read_config(config, node);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string(e.what()) + " (in --params_override)");
  }
  if (set) note_set_keys(node, "", "--params_override", *set);
}

void validate_config(Config& config) { Validator::validate_at(config, ""); }

std::vector<std::string> compatibility_warnings(Config& config) {
  std::vector<IgnoredKey> ignored;
  IgnoredKeyCollector::collect(config, "", ignored);
  if (ignored.empty()) return {};
  std::string line = "accepted for Model Garden compatibility, without effect in Garden: ";
  for (std::size_t i = 0; i < ignored.size(); ++i)
    line += (i ? ", " : "") + ignored[i].key + " (" + ignored[i].reason + ")";
  return {line};
}

std::vector<std::string> field_paths(Config& config) {
  std::vector<std::string> out;
  PathCollector collector(out, "");
  config.visit(collector);
  return out;
}

// ---- OneOfConfig ------------------------------------------------------------

namespace {
class SubsectionFinder : public Visitor {
 public:
  explicit SubsectionFinder(const std::string* wanted) : wanted_(wanted) {}
  Config* found = nullptr;
  std::vector<std::string> names;

 protected:
  void on_field(const char* name, Field& field, const char*) override {
    if (std::string(name) == "type") return;
    names.emplace_back(name);
    if (wanted_ && *wanted_ == name) found = field.config();
  }

 private:
  const std::string* wanted_;
};
}  // namespace

namespace {
struct RegisteredChoice {
  std::string name;
  ConfigFactory factory;
};
std::mutex& choices_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<std::type_index, std::vector<RegisteredChoice>>& registered_choices() {
  static std::map<std::type_index, std::vector<RegisteredChoice>> choices;
  return choices;
}
}  // namespace

void register_oneof_choice(std::type_index kind, const std::string& name, ConfigFactory factory) {
  if (name.empty() || name == "type")
    throw ConfigError("a one-of config choice needs a name other than 'type'");
  std::lock_guard<std::mutex> lock(choices_mutex());
  auto& list = registered_choices()[kind];
  for (const auto& choice : list)
    if (choice.name == name) throw ConfigError("choice '" + name + "' is already registered");
  list.push_back({name, std::move(factory)});
}

namespace {
// Deep copies of registered subsections: fresh ones with the same values.
template <class Registered>
std::vector<Registered> clone_registered(const std::vector<Registered>& from) {
  std::vector<Registered> out;
  for (const auto& choice : from) {
    std::shared_ptr<Config> copy = choice.factory();
    read_config(*copy, write_config(*choice.config), choice.name);
    out.push_back({choice.name, choice.factory, std::move(copy)});
  }
  return out;
}
}  // namespace

OneOfConfig::OneOfConfig(const OneOfConfig& other)
    : Config(other), type(other.type), registered_(clone_registered(other.registered_)) {}

OneOfConfig& OneOfConfig::operator=(const OneOfConfig& other) {
  if (this != &other) {
    auto registered = clone_registered(other.registered_);
    Config::operator=(other);
    type = other.type;
    registered_ = std::move(registered);
  }
  return *this;
}

void OneOfConfig::visit_registered_choices(Visitor& v, std::type_index kind) {
  std::vector<RegisteredChoice> choices;
  {
    std::lock_guard<std::mutex> lock(choices_mutex());
    const auto it = registered_choices().find(kind);
    if (it != registered_choices().end()) choices = it->second;
  }
  for (const auto& choice : choices) {
    const bool present = std::any_of(registered_.begin(), registered_.end(),
                                     [&](const Registered& r) { return r.name == choice.name; });
    if (!present) registered_.push_back({choice.name, choice.factory, choice.factory()});
  }
  for (auto& entry : registered_) v(entry.name.c_str(), *entry.config, "A registered choice.");
}

Config* OneOfConfig::get() {
  if (type.empty()) return nullptr;
  SubsectionFinder finder(&type);
  visit(finder);
  return finder.found;
}

std::vector<std::string> OneOfConfig::choices() {
  SubsectionFinder finder(nullptr);
  visit(finder);
  return finder.names;
}

void OneOfConfig::validate() const {
  if (type.empty()) return;
  auto choices = const_cast<OneOfConfig*>(this)->choices();
  if (std::find(choices.begin(), choices.end(), type) != choices.end()) return;
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  throw ConfigError("type '" + type + "' is not one of: " + list);
}

}  // namespace garden::config
