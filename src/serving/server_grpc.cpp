// TF Serving's gRPC API (PredictionService/Predict and GetModelMetadata,
// ModelService/GetModelStatus) beside the REST routes, a front end over the
// same units: the same serving version, batching queue, metrics and
// shutdown. Compiled where the build found gRPC (GARDEN_WITH_GRPC);
// proto/tensorflow_serving/README.md says which methods are served.
#include "server_state.h"

#include "garden/base/error.h"

#ifdef GARDEN_WITH_GRPC

#include <c10/util/Exception.h>

#include <google/protobuf/util/json_util.h>
#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "garden/base/encoding.h"
#include "tensorflow_serving/apis/model_service.grpc.pb.h"
#include "tensorflow_serving/apis/prediction_service.grpc.pb.h"

namespace garden::serving {

namespace {

namespace tfs = tensorflow::serving;
using tensorflow::DataType;
using tensorflow::TensorProto;

// A failed call: its gRPC status code and message.
struct GrpcError : std::runtime_error {
  GrpcError(grpc::StatusCode code, const std::string& message)
      : std::runtime_error(message), code(code) {}
  grpc::StatusCode code;
};

DataType data_type(const std::string& name) {
  DataType type = tensorflow::DT_INVALID;
  if (!tensorflow::DataType_Parse(name, &type))
    throw Error("the signature names an unknown dtype '" + name + "'");
  return type;
}

// The model, version and signature a request names, checked as TF Serving
// checks them.
std::shared_ptr<const Predictor> requested_model(ModelServer::State& s,
                                                 const tfs::ModelSpec& spec) {
  if (spec.name() != s.options.model_name)
    throw GrpcError(grpc::StatusCode::NOT_FOUND,
                    "Servable not found for request: Latest(" + spec.name() + ")");
  std::shared_ptr<const Predictor> model;
  try {
    model = s.versions.available();
  } catch (const HttpError& e) {
    throw GrpcError(grpc::StatusCode::UNAVAILABLE, e.what());
  }
  if (spec.has_version() && spec.version().value() != model->version())
    throw GrpcError(grpc::StatusCode::NOT_FOUND,
                    "Servable not found for request: Specific(" + spec.name() + ", " +
                        std::to_string(spec.version().value()) + "); serving version " +
                        std::to_string(model->version()));
  if (spec.version_choice_case() == tfs::ModelSpec::kVersionLabel)
    throw GrpcError(grpc::StatusCode::NOT_FOUND, "no version labelled '" + spec.version_label() +
                                                     "': this server has no labels");
  if (!spec.signature_name().empty() && spec.signature_name() != "serving_default")
    throw GrpcError(grpc::StatusCode::INVALID_ARGUMENT,
                    "Serving signature name: \"" + spec.signature_name() +
                        "\" not found in signature def; this model has serving_default");
  return model;
}

void fill_spec(const Predictor& model, const std::string& name, tfs::ModelSpec* spec) {
  spec->set_name(name);
  spec->mutable_version()->set_value(model.version());
  spec->set_signature_name("serving_default");
}

// ---- TensorProto -> one JSON value per instance

std::string where(const std::string& input) { return "input '" + input + "'"; }

// Fixed-width values from tensor_content's little-endian bytes.
template <class T>
std::vector<json> content_values(const std::string& bytes, const std::string& input) {
  if (bytes.size() % sizeof(T) != 0)
    throw InputError(where(input) + ": tensor_content holds " + std::to_string(bytes.size()) +
                     " bytes, not a whole number of " + std::to_string(sizeof(T)) + "-byte values");
  std::vector<json> values(bytes.size() / sizeof(T));
  for (std::size_t i = 0; i < values.size(); ++i) {
    T value;
    std::memcpy(&value, bytes.data() + i * sizeof(T), sizeof(T));
    values[i] = value;
  }
  return values;
}

template <class List>
std::vector<json> list_values(const List& list) {
  return std::vector<json>(list.begin(), list.end());
}

// A DT_STRING value as JSON: the text, or TF Serving's {"b64": ...} for bytes
// that are not UTF-8 (a serialized tf.Example).
json string_value(const std::string& bytes) {
  if (unicode::invalid_utf8_offset(bytes) == std::string_view::npos) return bytes;
  return json{{"b64", base64_encode(bytes)}};
}

std::vector<json> flat_values(const TensorProto& t, const std::string& input) {
  const bool content = !t.tensor_content().empty();
  switch (t.dtype()) {
    case tensorflow::DT_FLOAT:
      return content ? content_values<float>(t.tensor_content(), input)
                     : list_values(t.float_val());
    case tensorflow::DT_DOUBLE:
      return content ? content_values<double>(t.tensor_content(), input)
                     : list_values(t.double_val());
    case tensorflow::DT_INT32:
      return content ? content_values<int32_t>(t.tensor_content(), input)
                     : list_values(t.int_val());
    case tensorflow::DT_INT16:
      return content ? content_values<int16_t>(t.tensor_content(), input)
                     : list_values(t.int_val());
    case tensorflow::DT_INT8:
      return content ? content_values<int8_t>(t.tensor_content(), input) : list_values(t.int_val());
    case tensorflow::DT_UINT8:
      return content ? content_values<uint8_t>(t.tensor_content(), input)
                     : list_values(t.int_val());
    case tensorflow::DT_INT64:
      return content ? content_values<int64_t>(t.tensor_content(), input)
                     : list_values(t.int64_val());
    case tensorflow::DT_UINT32:
      return content ? content_values<uint32_t>(t.tensor_content(), input)
                     : list_values(t.uint32_val());
    case tensorflow::DT_UINT64:
      return content ? content_values<uint64_t>(t.tensor_content(), input)
                     : list_values(t.uint64_val());
    case tensorflow::DT_BOOL: {
      if (!content) return list_values(t.bool_val());
      std::vector<json> values;
      for (char byte : t.tensor_content()) values.push_back(byte != 0);
      return values;
    }
    case tensorflow::DT_STRING: {
      std::vector<json> values;
      for (const auto& bytes : t.string_val()) values.push_back(string_value(bytes));
      return values;
    }
    default:
      throw InputError(where(input) + ": dtype " + tensorflow::DataType_Name(t.dtype()) +
                       " is not supported (float, double, integer, bool and string tensors are)");
  }
}

// Values [offset, offset + product(dims)) nested as dims say.
json nest(const std::vector<json>& flat, std::size_t& offset, const std::vector<int64_t>& dims,
          std::size_t depth) {
  if (depth == dims.size()) return flat[offset++];
  json list = json::array();
  for (int64_t i = 0; i < dims[depth]; ++i) list.push_back(nest(flat, offset, dims, depth + 1));
  return list;
}

// Each instance's value of one input: the tensor's first dimension is the
// batch (a scalar tensor is one instance).
std::vector<json> instance_values(const TensorProto& t, const std::string& input) {
  std::vector<int64_t> dims;
  for (const auto& dim : t.tensor_shape().dim()) {
    if (dim.size() < 0)
      throw InputError(where(input) + ": dimension " + std::to_string(dims.size()) + " is " +
                       std::to_string(dim.size()) + "; a request's tensors have known sizes");
    dims.push_back(dim.size());
  }
  if (t.tensor_shape().unknown_rank())
    throw InputError(where(input) + ": the tensor's shape has an unknown rank");
  std::size_t count = 1;
  for (int64_t d : dims) {
    if (d > 0 && count > std::numeric_limits<std::size_t>::max() / static_cast<std::size_t>(d))
      throw InputError(where(input) + ": the shape is too large");
    count *= static_cast<std::size_t>(d);
  }
  std::vector<json> flat = flat_values(t, input);
  // A single value fills the shape (TensorProto's rule for the typed lists).
  if (flat.size() == 1 && count > 1 && t.tensor_content().empty())
    flat.assign(count, json(flat[0]));
  if (flat.size() != count)
    throw InputError(where(input) + ": the shape holds " + std::to_string(count) +
                     " values but the tensor has " + std::to_string(flat.size()));
  if (dims.empty()) return {flat[0]};
  const std::vector<int64_t> inner(dims.begin() + 1, dims.end());
  std::vector<json> instances;
  std::size_t offset = 0;
  for (int64_t i = 0; i < dims[0]; ++i) instances.push_back(nest(flat, offset, inner, 0));
  return instances;
}

// ---- one JSON value per instance -> TensorProto

// The dimensions of a nested JSON value, each the longest seen (ragged lists
// are padded).
void measure(const json& value, std::size_t depth, std::vector<int64_t>& dims) {
  if (!value.is_array()) return;
  if (dims.size() <= depth) dims.resize(depth + 1, 0);
  dims[depth] = std::max<int64_t>(dims[depth], static_cast<int64_t>(value.size()));
  for (const auto& item : value) measure(item, depth + 1, dims);
}

// Appends `value` padded to `dims` (zeros, or empty strings) in row-major order.
void flatten(const json& value, std::size_t depth, const std::vector<int64_t>& dims,
             std::vector<const json*>& out) {
  static const json kMissing;
  if (depth == dims.size()) {
    out.push_back(&value);
    return;
  }
  const std::size_t present = value.is_array() ? value.size() : 0;
  for (int64_t i = 0; i < dims[depth]; ++i)
    flatten(static_cast<std::size_t>(i) < present ? value[static_cast<std::size_t>(i)] : kMissing,
            depth + 1, dims, out);
}

void append_value(const json& value, DataType type, TensorProto& t) {
  switch (type) {
    case tensorflow::DT_FLOAT:
      t.add_float_val(value.is_number() ? value.get<float>() : 0.0f);
      break;
    case tensorflow::DT_DOUBLE:
      t.add_double_val(value.is_number() ? value.get<double>() : 0.0);
      break;
    case tensorflow::DT_INT32:
      t.add_int_val(value.is_number() ? value.get<int32_t>() : 0);
      break;
    case tensorflow::DT_INT64:
      t.add_int64_val(value.is_number() ? value.get<int64_t>() : 0);
      break;
    case tensorflow::DT_BOOL:
      t.add_bool_val(value.is_boolean() && value.get<bool>());
      break;
    case tensorflow::DT_STRING:
      t.add_string_val(value.is_string() ? value.get<std::string>()
                       : value.is_null() ? std::string()
                                         : value.dump());
      break;
    default:
      throw Error("the signature's output dtype " + tensorflow::DataType_Name(type) +
                  " cannot be answered over gRPC");
  }
}

TensorProto output_tensor(const std::vector<json>& rows, const std::string& name,
                          const TensorSpec& spec) {
  TensorProto t;
  const DataType type = data_type(spec.dtype);
  t.set_dtype(type);
  std::vector<int64_t> dims;
  for (const auto& row : rows) measure(row.at(name), 0, dims);
  auto* shape = t.mutable_tensor_shape();
  shape->add_dim()->set_size(static_cast<int64_t>(rows.size()));
  for (int64_t d : dims) shape->add_dim()->set_size(d);
  std::vector<const json*> flat;
  for (const auto& row : rows) flatten(row.at(name), 0, dims, flat);
  for (const json* value : flat) append_value(*value, type, t);
  return t;
}

// ---- the services

class Calls {
 public:
  explicit Calls(ModelServer::State& state) : s_(state) {}

  // Runs `body` as one call: counted in flight (shutdown waits for it),
  // its outcome mapped to a status and recorded.
  template <class F>
  grpc::Status run(const char* method, F&& body) {
    const auto start = Clock::now();
    const InFlight call(s_.gate);
    grpc::Status status = grpc::Status::OK;
    try {
      if (s_.gate.draining())
        throw GrpcError(grpc::StatusCode::UNAVAILABLE, "the server is shutting down");
      body();
    } catch (const GrpcError& e) {
      status = grpc::Status(e.code, e.what());
    } catch (const HttpError& e) {
      const auto code = e.status == 503   ? grpc::StatusCode::UNAVAILABLE
                        : e.status == 499 ? grpc::StatusCode::CANCELLED
                        : e.status == 404 ? grpc::StatusCode::NOT_FOUND
                                          : grpc::StatusCode::INVALID_ARGUMENT;
      status = grpc::Status(code, e.what());
    } catch (const InputError& e) {
      status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, e.what());
    } catch (const c10::Error& e) {
      // LibTorch's message without its C++ stack trace.
      status = grpc::Status(grpc::StatusCode::INTERNAL, e.what_without_backtrace());
    } catch (const std::exception& e) {
      status = grpc::Status(grpc::StatusCode::INTERNAL, e.what());
    }
    s_.metrics.record_grpc(method, status.error_code(), start);
    return status;
  }

 protected:
  ModelServer::State& s_;
};

class PredictionService final : public tfs::PredictionService::Service, Calls {
 public:
  using Calls::Calls;

  grpc::Status Predict(grpc::ServerContext* context, const tfs::PredictRequest* request,
                       tfs::PredictResponse* response) override {
    return run("Predict", [&] {
      const auto model = requested_model(s_, request->model_spec());
      const ServingSignature& signature = model->signature();
      std::size_t count = 0;
      bool first = true;
      std::vector<json> instances;
      for (const auto& [name, tensor] : request->inputs()) {
        const bool known = std::any_of(signature.inputs.begin(), signature.inputs.end(),
                                       [&](const auto& input) { return input.first == name; });
        if (!known) {
          std::string names;
          for (const auto& input : signature.inputs)
            names += (names.empty() ? "" : ", ") + input.first;
          throw InputError("unknown input '" + name + "'; the signature's inputs are " + names);
        }
        std::vector<json> values = instance_values(tensor, name);
        if (!first && values.size() != count)
          throw InputError(
              "the inputs differ in their first (batch) dimension: " + std::to_string(count) +
              " and " + std::to_string(values.size()) + " for '" + name + "'");
        if (first) instances.assign(values.size(), json::object());
        count = values.size();
        first = false;
        for (std::size_t i = 0; i < count; ++i) instances[i][name] = std::move(values[i]);
      }
      if (instances.empty()) throw InputError("the request holds no instance");
      std::vector<std::pair<std::string, TensorSpec>> outputs;
      for (const auto& wanted : request->output_filter()) {
        const auto it = std::find_if(signature.outputs.begin(), signature.outputs.end(),
                                     [&](const auto& output) { return output.first == wanted; });
        if (it == signature.outputs.end())
          throw InputError("output_filter names '" + wanted + "', which is not an output");
        outputs.push_back(*it);
      }
      if (outputs.empty()) outputs = signature.outputs;
      for (std::size_t i = 0; i < instances.size(); ++i)
        instances[i] = model->normalize_instance(instances[i], i);
      if (context->IsCancelled()) {
        s_.metrics.add_abandoned();
        throw GrpcError(grpc::StatusCode::CANCELLED, "the client cancelled the call");
      }
      const std::vector<json> rows = s_.batching.predict(*model, std::move(instances), -1);
      auto& out = *response->mutable_outputs();
      for (const auto& [name, spec] : outputs) out[name] = output_tensor(rows, name, spec);
      fill_spec(*model, s_.options.model_name, response->mutable_model_spec());
    });
  }

  grpc::Status GetModelMetadata(grpc::ServerContext*, const tfs::GetModelMetadataRequest* request,
                                tfs::GetModelMetadataResponse* response) override {
    return run("GetModelMetadata", [&] {
      const auto model = requested_model(s_, request->model_spec());
      if (request->metadata_field().empty())
        throw InputError("GetModelMetadataRequest must specify at least one metadata_field");
      for (const auto& field : request->metadata_field())
        if (field != "signature_def")
          throw InputError("Metadata field " + field + " is not supported");
      // The REST metadata's signature_def is SignatureDefMap in protobuf's
      // JSON form: one description of the signature serves both APIs.
      tfs::SignatureDefMap signatures;
      const auto parsed =
          google::protobuf::util::JsonStringToMessage(model->signature_def().dump(), &signatures);
      if (!parsed.ok())
        throw Error("the signature_def does not read as a SignatureDefMap: " + parsed.ToString());
      (*response->mutable_metadata())["signature_def"].PackFrom(signatures);
      fill_spec(*model, s_.options.model_name, response->mutable_model_spec());
    });
  }
};

class ModelService final : public tfs::ModelService::Service, Calls {
 public:
  using Calls::Calls;

  grpc::Status GetModelStatus(grpc::ServerContext*, const tfs::GetModelStatusRequest* request,
                              tfs::GetModelStatusResponse* response) override {
    return run("GetModelStatus", [&] {
      const tfs::ModelSpec& spec = request->model_spec();
      if (spec.name() != s_.options.model_name)
        throw GrpcError(grpc::StatusCode::NOT_FOUND,
                        "Servable not found for request: Latest(" + spec.name() + ")");
      const ModelVersions::Status current = s_.versions.status();
      const int64_t version = current.version;
      if (spec.has_version() && spec.version().value() != version)
        throw GrpcError(grpc::StatusCode::NOT_FOUND,
                        "Servable not found for request: Specific(" + spec.name() + ", " +
                            std::to_string(spec.version().value()) + ")");
      auto* status = response->add_model_version_status();
      status->set_version(version);
      using Load = ModelVersions::Load;
      status->set_state(current.load == Load::kAvailable ? tfs::ModelVersionStatus::AVAILABLE
                        : current.load == Load::kFailed  ? tfs::ModelVersionStatus::END
                                                         : tfs::ModelVersionStatus::LOADING);
      status->mutable_status()->set_error_code(current.load == Load::kFailed ? 2 : 0);
      status->mutable_status()->set_error_message(current.load == Load::kFailed ? current.error
                                                                                : "");
    });
  }
};

}  // namespace

struct GrpcFrontEnd::Services {
  std::unique_ptr<PredictionService> prediction;
  std::unique_ptr<ModelService> models;
  std::unique_ptr<grpc::Server> server;  // stops before the services go
};

GrpcFrontEnd::GrpcFrontEnd(ModelServer::State& state) : services_(std::make_unique<Services>()) {
  // gRPC logs its own failures (a port in use) to stderr beside the one line
  // Garden prints; they are shown only when the user asks gRPC for its log.
  static std::once_flag quiet;
  std::call_once(quiet, [] {
    if (!std::getenv("GRPC_VERBOSITY") && !std::getenv("GRPC_TRACE"))
      gpr_set_log_function([](gpr_log_func_args*) {});
  });
  const ServerOptions& options = state.options;
  services_->prediction = std::make_unique<PredictionService>(state);
  services_->models = std::make_unique<ModelService>(state);
  grpc::ServerBuilder builder;
  int selected = 0;
  const std::string address = options.host + ":" + std::to_string(options.grpc_port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &selected);
  // gRPC sets SO_REUSEPORT by default: a second server on the same port
  // would start and take half the connections instead of failing.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(services_->prediction.get());
  builder.RegisterService(services_->models.get());
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<int64_t>(options.max_body_bytes, std::numeric_limits<int>::max())));
  builder.SetMaxSendMessageSize(std::numeric_limits<int>::max());
  services_->server = builder.BuildAndStart();
  if (!services_->server || selected == 0)
    throw Error("cannot listen on " + address +
                " for gRPC (in use, or not an address of this machine)");
  port_ = selected;
}

GrpcFrontEnd::~GrpcFrontEnd() = default;

void GrpcFrontEnd::stop() {
  if (services_->server) services_->server->Shutdown(std::chrono::system_clock::now());
}

bool grpc_compiled_in() { return true; }

}  // namespace garden::serving

#else

namespace garden::serving {

struct GrpcFrontEnd::Services {};

GrpcFrontEnd::GrpcFrontEnd(ModelServer::State&) {
  throw Error("--grpc_port: this garden was built without gRPC (libgrpc++-dev)");
}

GrpcFrontEnd::~GrpcFrontEnd() = default;

void GrpcFrontEnd::stop() {}

bool grpc_compiled_in() { return false; }

}  // namespace garden::serving

#endif
