"""A TF Serving gRPC client, as the tensorflow-serving-api examples write one,
against a running `garden serve` of the iris export.

    /usr/bin/python3 tests/serving/grpc_client.py REST_PORT GRPC_PORT

Stubs come from grpc_tools (Debian's python3-grpc-tools) compiling the served
.proto files; the calls go through grpcio (python3-grpcio). Checks Predict
against REST's :predict on the same instances, GetModelMetadata,
GetModelStatus, the status codes of bad calls and of a method Garden does not
serve, and that the server answers after them. Prints one line per failed
check and exits 1 if any failed.
"""
import json
import os
import sys
import tempfile
import urllib.request

import grpc
from grpc_tools import protoc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTO = os.path.join(ROOT, "proto")
FILES = [
    "tensorflow/core/framework/types.proto", "tensorflow/core/framework/tensor_shape.proto",
    "tensorflow/core/framework/tensor.proto", "tensorflow/core/protobuf/meta_graph.proto",
    "tensorflow_serving/apis/model.proto", "tensorflow_serving/apis/predict.proto",
    "tensorflow_serving/apis/get_model_metadata.proto",
    "tensorflow_serving/apis/get_model_status.proto",
    "tensorflow_serving/apis/prediction_service.proto",
    "tensorflow_serving/apis/model_service.proto",
]
COLUMNS = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAILED: " + what)


def compile_stubs(out):
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    args = ["protoc", "-I" + PROTO, "-I" + include, "--python_out=" + out,
            "--grpc_python_out=" + out] + [os.path.join(PROTO, f) for f in FILES]
    if protoc.main(args) != 0:
        sys.exit("grpc_client.py: grpc_tools could not compile " + PROTO)
    for folder, _, _ in os.walk(out):
        open(os.path.join(folder, "__init__.py"), "a").close()
    sys.path.insert(0, out)


def main():
    rest_port, grpc_port = int(sys.argv[1]), int(sys.argv[2])
    compile_stubs(tempfile.mkdtemp(prefix="garden_grpc_stubs_"))
    from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
    from tensorflow_serving.apis import (get_model_metadata_pb2, get_model_status_pb2,
                                         model_service_pb2_grpc, predict_pb2,
                                         prediction_service_pb2_grpc)

    def make_tensor_proto(values, dtype):  # what tf.make_tensor_proto(values) gives
        t = tensor_pb2.TensorProto(dtype=dtype)
        t.tensor_shape.dim.add(size=len(values))
        if dtype == types_pb2.DT_FLOAT:
            t.float_val.extend(values)
        else:
            t.string_val.extend(v.encode() for v in values)
        return t

    rows = [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]]
    channel = grpc.insecure_channel("127.0.0.1:%d" % grpc_port)
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)

    request = predict_pb2.PredictRequest()
    request.model_spec.name = "iris"
    request.model_spec.signature_name = "serving_default"
    for c, column in enumerate(COLUMNS):
        request.inputs[column].CopyFrom(
            make_tensor_proto([row[c] for row in rows], types_pb2.DT_FLOAT))
    response = stub.Predict(request, 30.0)

    body = json.dumps({"instances": [dict(zip(COLUMNS, row)) for row in rows]}).encode()
    rest = json.load(urllib.request.urlopen(urllib.request.Request(
        "http://127.0.0.1:%d/v1/models/iris:predict" % rest_port, body,
        {"Content-Type": "application/json"}), timeout=30))["predictions"]
    # REST computed on the doubles, gRPC on their float32 roundings: the same
    # classes, logits within float32's rounding of the inputs.
    classes = [v.decode() for v in response.outputs["classes"].string_val]
    check(classes == [r["classes"] for r in rest], "Predict classes %s, REST %s" % (classes, rest))
    logits = response.outputs["logits"]
    check([d.size for d in logits.tensor_shape.dim] == [2, 3], "logits shape")
    for i, value in enumerate(logits.float_val):
        expected = rest[i // 3]["logits"][i % 3]
        check(abs(value - expected) < 1e-4 * max(1.0, abs(expected)),
              "logit %d: %r against REST's %r" % (i, value, expected))
    check(list(response.outputs["class_ids"].int64_val) == [r["class_ids"] for r in rest],
          "class_ids")
    check(response.model_spec.name == "iris" and response.model_spec.version.value > 0,
          "model_spec of the answer")

    meta_request = get_model_metadata_pb2.GetModelMetadataRequest()
    meta_request.model_spec.name = "iris"
    meta_request.metadata_field.append("signature_def")
    meta = stub.GetModelMetadata(meta_request, 30.0)
    signatures = get_model_metadata_pb2.SignatureDefMap()
    check(meta.metadata["signature_def"].Unpack(signatures), "metadata holds a SignatureDefMap")
    inputs = signatures.signature_def["serving_default"].inputs
    check(sorted(inputs.keys()) == sorted(COLUMNS), "signature inputs %s" % sorted(inputs.keys()))
    check(inputs["sepal_length"].dtype == types_pb2.DT_FLOAT, "sepal_length is DT_FLOAT")

    status_request = get_model_status_pb2.GetModelStatusRequest()
    status_request.model_spec.name = "iris"
    status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(status_request, 30.0)
    check(status.model_version_status[0].state == get_model_status_pb2.ModelVersionStatus.AVAILABLE,
          "GetModelStatus AVAILABLE")

    def code_of(call):
        try:
            call()
        except grpc.RpcError as e:
            return e.code()
        return grpc.StatusCode.OK

    bad = predict_pb2.PredictRequest()
    bad.CopyFrom(request)
    bad.model_spec.name = "nope"
    check(code_of(lambda: stub.Predict(bad, 30.0)) == grpc.StatusCode.NOT_FOUND, "unknown model")
    bad.CopyFrom(request)
    bad.inputs["sepal_width"].CopyFrom(make_tensor_proto(["wide", "wider"], types_pb2.DT_STRING))
    check(code_of(lambda: stub.Predict(bad, 30.0)) == grpc.StatusCode.INVALID_ARGUMENT,
          "a string for a float")
    bad.CopyFrom(request)
    del bad.inputs["petal_width"]
    check(code_of(lambda: stub.Predict(bad, 30.0)) == grpc.StatusCode.INVALID_ARGUMENT,
          "a missing input")
    classify = channel.unary_unary("/tensorflow.serving.PredictionService/Classify")
    check(code_of(lambda: classify(b"", timeout=30.0)) == grpc.StatusCode.UNIMPLEMENTED,
          "Classify is not served")
    garbage = channel.unary_unary("/tensorflow.serving.PredictionService/Predict")
    check(code_of(lambda: garbage(b"\xff\xff\xff", timeout=30.0)) != grpc.StatusCode.OK,
          "a body that is no PredictRequest")
    check(stub.Predict(request, 30.0).outputs["classes"].string_val[0].decode() == rest[0]["classes"],
          "the server answers after the bad calls")
    print("grpc_client.py: %d checks failed" % len(failures) if failures else "grpc_client.py: ok")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
