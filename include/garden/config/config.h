// Typed configuration structs, in the manner of Model Garden's `hyperparams`.
//
// A config struct derives from `Config` and lists each of its fields once, in
// `visit()`:
//
//   struct MyConfig : garden::config::Config {
//     int64_t hidden_size = 64;   // the default lives with the member
//     std::string activation = "relu";
//     void visit(garden::config::Visitor& v) override {
//       v("hidden_size", hidden_size, "Width of the hidden layer.");
//       v("activation", activation, "relu, gelu or tanh.");
//     }
//   };
//
// Reading YAML, writing YAML, dotted overrides, strict unknown-key checks and
// validation all work from that one list (see yaml_io.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <typeindex>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "garden/base/error.h"

namespace garden::config {

// Every configuration error: unknown key, wrong type, failed restriction.
class ConfigError : public Error {
 public:
  using Error::Error;
};

class Visitor;

// A key kept only so that Model Garden configs load: it has no effect in
// Garden. `reason` says why, in a few words.
struct IgnoredKey {
  std::string key;  // relative to the config that reports it
  std::string reason;
};

class Config {
 public:
  virtual ~Config() = default;
  // Lists every field: v("name", member, "doc") once per field, in order.
  virtual void visit(Visitor& v) = 0;
  // Restrictions between fields; throws ConfigError. Nested configs are
  // validated by validate_config() before their parent.
  virtual void validate() const {}
  // The keys of this config (not of nested ones) that are accepted only for
  // Model Garden compatibility and are set to something other than their
  // default; compatibility_warnings() names them at start.
  virtual std::vector<IgnoredKey> ignored_keys() const { return {}; }

  // A locked config refuses further YAML reads and overrides.
  void lock() { locked_ = true; }
  bool locked() const { return locked_; }

 private:
  bool locked_ = false;
};

using ConfigFactory = std::function<std::unique_ptr<Config>()>;

// Model Garden's OneOfConfig: `type` names which subsection is in force; an
// empty type means none. Besides the subsections a derived config declares,
// it carries those registered for its kind with register_oneof_choice (a
// user's own optimizer or schedule), after the built-in ones.
class OneOfConfig : public Config {
 public:
  std::string type;
  OneOfConfig() = default;
  OneOfConfig(const OneOfConfig& other);
  OneOfConfig& operator=(const OneOfConfig& other);
  // The subsection named by `type`, or nullptr when type is empty.
  Config* get();
  const Config* get() const { return const_cast<OneOfConfig*>(this)->get(); }
  // Names of the subsections, in declaration order.
  std::vector<std::string> choices();
  void validate() const override;

 protected:
  // Visits the choices registered for `kind` (the derived config's type):
  // call it at the end of visit().
  void visit_registered_choices(Visitor& v, std::type_index kind);

 private:
  struct Registered {
    std::string name;
    ConfigFactory factory;
    std::shared_ptr<Config> config;  // owned; copies are deep (see the copy constructor)
  };
  std::vector<Registered> registered_;
};

// Adds the choice `name`, a subsection made by `factory`, to every
// OneOfConfig of type `kind` (e.g. typeid(OptimizerConfig)). Throws
// ConfigError when the kind already has that choice.
void register_oneof_choice(std::type_index kind, const std::string& name, ConfigFactory factory);

// Type-erased access to one field, handed to a Visitor.
class Field {
 public:
  virtual ~Field() = default;
  virtual YAML::Node to_yaml() const = 0;
  // Throws ConfigError naming `path`, the value and the type expected.
  virtual void from_yaml(const YAML::Node& node, const std::string& path) = 0;
  virtual std::string type_name() const = 0;
  // The nested config, when this field is one (and is present).
  virtual Config* config() { return nullptr; }
};

// Conversions between one C++ type and YAML. Specialized below.
template <class T, class Enable = void>
struct Traits;

template <class T>
class TypedField final : public Field {
 public:
  explicit TypedField(T& value) : value_(value) {}
  YAML::Node to_yaml() const override { return Traits<T>::encode(value_); }
  void from_yaml(const YAML::Node& node, const std::string& path) override {
    Traits<T>::decode(node, path, value_);
  }
  std::string type_name() const override { return Traits<T>::name(); }
  Config* config() override { return Traits<T>::config(value_); }

 private:
  T& value_;
};

class Visitor {
 public:
  virtual ~Visitor() = default;
  template <class T>
  void operator()(const char* name, T& value, const char* doc) {
    TypedField<T> field(value);
    on_field(name, field, doc);
  }

 protected:
  virtual void on_field(const char* name, Field& field, const char* doc) = 0;
};

// For ignored_keys(): adds `key` when `value` differs from its default.
template <class T>
void note_ignored(std::vector<IgnoredKey>& out, const char* key, const T& value,
                  const T& default_value, const char* reason) {
  if (!(value == default_value)) out.push_back({key, reason});
}

// ---- conversions -----------------------------------------------------------

[[noreturn]] void throw_type_error(const std::string& path, const YAML::Node& node,
                                   const std::string& expected);
std::string describe_node(const YAML::Node& node);

bool decode_bool(const YAML::Node& node, const std::string& path);
int64_t decode_int(const YAML::Node& node, const std::string& path);
double decode_float(const YAML::Node& node, const std::string& path);
std::string decode_string(const YAML::Node& node, const std::string& path);
// Defined in yaml_io.cpp; used by nested-config fields.
void read_config(Config& config, const YAML::Node& node, const std::string& path);
YAML::Node write_config(Config& config);

template <class T>
struct ScalarTraitsBase {
  static Config* config(T&) { return nullptr; }
};

template <>
struct Traits<bool> : ScalarTraitsBase<bool> {
  static YAML::Node encode(bool v) { return YAML::Node(v); }
  static void decode(const YAML::Node& n, const std::string& p, bool& out) {
    out = decode_bool(n, p);
  }
  static std::string name() { return "bool"; }
};

template <class T>
struct Traits<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>>
    : ScalarTraitsBase<T> {
  static YAML::Node encode(T v) { return YAML::Node(static_cast<int64_t>(v)); }
  static void decode(const YAML::Node& n, const std::string& p, T& out) {
    out = static_cast<T>(decode_int(n, p));
  }
  static std::string name() { return "int"; }
};

YAML::Node encode_float(double v);

template <class T>
struct Traits<T, std::enable_if_t<std::is_floating_point_v<T>>> : ScalarTraitsBase<T> {
  static YAML::Node encode(T v) { return encode_float(static_cast<double>(v)); }
  static void decode(const YAML::Node& n, const std::string& p, T& out) {
    out = static_cast<T>(decode_float(n, p));
  }
  static std::string name() { return "float"; }
};

template <>
struct Traits<std::string> : ScalarTraitsBase<std::string> {
  static YAML::Node encode(const std::string& v) { return YAML::Node(v); }
  // A YAML null reads as the empty string (Model Garden writes `name: null`).
  static void decode(const YAML::Node& n, const std::string& p, std::string& out) {
    out = decode_string(n, p);
  }
  static std::string name() { return "string"; }
};

template <class T>
struct Traits<std::optional<T>, std::enable_if_t<!std::is_base_of_v<Config, T>>>
    : ScalarTraitsBase<std::optional<T>> {
  static YAML::Node encode(const std::optional<T>& v) {
    return v ? Traits<T>::encode(*v) : YAML::Node(YAML::NodeType::Null);
  }
  static void decode(const YAML::Node& n, const std::string& p, std::optional<T>& out) {
    if (!n.IsDefined() || n.IsNull()) {
      out.reset();
      return;
    }
    T value{};
    Traits<T>::decode(n, p, value);
    out = std::move(value);
  }
  static std::string name() { return Traits<T>::name() + " or null"; }
};

template <class T>
struct Traits<std::vector<T>, std::enable_if_t<!std::is_base_of_v<Config, T>>>
    : ScalarTraitsBase<std::vector<T>> {
  static YAML::Node encode(const std::vector<T>& v) {
    YAML::Node node(YAML::NodeType::Sequence);
    for (const auto& x : v) node.push_back(Traits<T>::encode(x));
    return node;
  }
  static void decode(const YAML::Node& n, const std::string& p, std::vector<T>& out) {
    if (n.IsNull()) {
      out.clear();
      return;
    }
    if (!n.IsSequence()) throw_type_error(p, n, name());
    std::vector<T> values;
    for (std::size_t i = 0; i < n.size(); ++i) {
      T value{};
      Traits<T>::decode(n[i], p + "[" + std::to_string(i) + "]", value);
      values.push_back(std::move(value));
    }
    out = std::move(values);
  }
  static std::string name() { return "list of " + Traits<T>::name(); }
};

// A list of names that YAML may also give as one name, as Model Garden's
// Union[str, List[str]] keys allow (init_checkpoint_modules: backbone).
struct NameList : std::vector<std::string> {
  using std::vector<std::string>::vector;
};

template <>
struct Traits<NameList> : ScalarTraitsBase<NameList> {
  static YAML::Node encode(const NameList& v) {
    return Traits<std::vector<std::string>>::encode(v);
  }
  static void decode(const YAML::Node& n, const std::string& p, NameList& out) {
    if (n.IsScalar()) {
      out = {decode_string(n, p)};
      return;
    }
    Traits<std::vector<std::string>>::decode(n, p, out);
  }
  static std::string name() { return "string or list of string"; }
};

// A mapping from strings to values (keys in YAML order are not kept: sorted).
template <class T>
struct Traits<std::map<std::string, T>> : ScalarTraitsBase<std::map<std::string, T>> {
  static YAML::Node encode(const std::map<std::string, T>& v) {
    YAML::Node node(YAML::NodeType::Map);
    for (const auto& [key, value] : v) node[key] = Traits<T>::encode(value);
    return node;
  }
  static void decode(const YAML::Node& n, const std::string& p, std::map<std::string, T>& out) {
    if (n.IsNull()) {
      out.clear();
      return;
    }
    if (!n.IsMap()) throw_type_error(p, n, name());
    std::map<std::string, T> values;
    for (const auto& item : n) {
      const std::string key = decode_string(item.first, p);
      T value{};
      Traits<T>::decode(item.second, p + "." + key, value);
      if (!values.emplace(key, std::move(value)).second)
        throw ConfigError("config key '" + p + "': '" + key + "' appears twice");
    }
    out = std::move(values);
  }
  static std::string name() { return "mapping of " + Traits<T>::name(); }
};

// A nested config, held by value.
template <class T>
struct Traits<T, std::enable_if_t<std::is_base_of_v<Config, T>>> {
  static YAML::Node encode(T& v) { return write_config(v); }
  static void decode(const YAML::Node& n, const std::string& p, T& out) { read_config(out, n, p); }
  static std::string name() { return "mapping"; }
  static Config* config(T& v) { return &v; }
};

// A list of nested configs (Model Garden's `List[ClsHeadConfig]`): each
// element read onto a default one and written whole. The list's owner
// validates the elements (a list is replaced whole by an override).
template <class T>
struct Traits<std::vector<T>, std::enable_if_t<std::is_base_of_v<Config, T>>>
    : ScalarTraitsBase<std::vector<T>> {
  static YAML::Node encode(std::vector<T>& v) {
    YAML::Node node(YAML::NodeType::Sequence);
    for (auto& x : v) node.push_back(write_config(x));
    return node;
  }
  static void decode(const YAML::Node& n, const std::string& p, std::vector<T>& out) {
    if (n.IsNull()) {
      out.clear();
      return;
    }
    if (!n.IsSequence()) throw_type_error(p, n, name());
    std::vector<T> values(n.size());
    for (std::size_t i = 0; i < n.size(); ++i)
      read_config(values[i], n[i], p + "[" + std::to_string(i) + "]");
    out = std::move(values);
  }
  static std::string name() { return "list of mapping"; }
};

// An optional nested config (Model Garden's `Optional[SomeConfig] = None`):
// null when absent; a mapping creates it with its defaults, then applies.
template <class T>
struct Traits<std::optional<T>, std::enable_if_t<std::is_base_of_v<Config, T>>> {
  static YAML::Node encode(std::optional<T>& v) {
    return v ? write_config(*v) : YAML::Node(YAML::NodeType::Null);
  }
  static void decode(const YAML::Node& n, const std::string& p, std::optional<T>& out) {
    if (n.IsNull()) {
      out.reset();
      return;
    }
    if (!out) out.emplace();
    read_config(*out, n, p);
  }
  static std::string name() { return "mapping or null"; }
  static Config* config(std::optional<T>& v) { return v ? &*v : nullptr; }
};

// A config held by pointer, so that its concrete type can be chosen by a
// factory (ExperimentConfig::task).
template <class T>
struct Traits<std::shared_ptr<T>, std::enable_if_t<std::is_base_of_v<Config, T>>> {
  static YAML::Node encode(std::shared_ptr<T>& v) {
    return v ? write_config(*v) : YAML::Node(YAML::NodeType::Null);
  }
  static void decode(const YAML::Node& n, const std::string& p, std::shared_ptr<T>& out) {
    if (!out) throw ConfigError(p + ": this config has no concrete type to read into");
    read_config(*out, n, p);
  }
  static std::string name() { return "mapping"; }
  static Config* config(std::shared_ptr<T>& v) { return v.get(); }
};

}  // namespace garden::config
