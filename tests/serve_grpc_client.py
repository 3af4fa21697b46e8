"""TensorFlow Serving's own Python client against actorflow-serve's gRPC front end.

Run by test_serve_grpc (suite tf_serving_client), which serves as MODEL an
export with two signatures, a classifier ("serving_default": features ->
probabilities, classes) and "echo" (in_<dtype> -> out_<dtype> for each dtype),
and passes the classifier's answer to its batch as load_model gave it:

    serve_grpc_client.py HOST:PORT MODEL PROBABILITIES_HEX CLASSES_HEX

The calls are a TF Serving user's: the stubs and messages of PyPI's
tensorflow-serving-api, tensors made with tf.make_tensor_proto and read with
tf.make_ndarray. Prints "tf serving client check: ok" when every check holds;
fails with the first that does not.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import grpc  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow_serving.apis import (  # noqa: E402
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

TIMEOUT = 30.0  # seconds, every call
FEATURES = np.array(
    [[1, 0, 0, 1], [0, 1, 1, 0], [0.5, 0.5, 0, 1]], dtype=np.float32
)  # served_models::batch() of the test


def check(cond, what):
    if not cond:
        raise SystemExit("tf serving client check failed: " + what)


def expect_error(call, code, part, what):
    try:
        call()
    except grpc.RpcError as e:
        check(e.code() == code, f"{what}: {e.code()} ({e.details()}), expected {code}")
        check(part in (e.details() or ""), f"{what}: '{e.details()}' does not name '{part}'")
        return
    raise SystemExit(f"tf serving client check failed: {what} succeeded")


def predict_request(model, signature, inputs):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = signature
    for alias, value in inputs.items():
        request.inputs[alias].CopyFrom(value)
    return request


def check_status(models, model):
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = model
    response = models.GetModelStatus(request, timeout=TIMEOUT)
    states = [(v.version, v.state) for v in response.model_version_status]
    available = get_model_status_pb2.ModelVersionStatus.AVAILABLE
    check(states == [(1, available)], f"GetModelStatus: {states}")


def check_metadata(predictions, model):
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = model
    request.metadata_field.append("signature_def")
    response = predictions.GetModelMetadata(request, timeout=TIMEOUT)
    check(response.model_spec.version.value == 1, "GetModelMetadata: version")
    signatures = get_model_metadata_pb2.SignatureDefMap()
    check(response.metadata["signature_def"].Unpack(signatures), "signature_def is no SignatureDefMap")
    sig = signatures.signature_def["serving_default"]
    features = sig.inputs["features"]
    check(features.dtype == tf.float32.as_datatype_enum, "features' dtype")
    check([d.size for d in features.tensor_shape.dim] == [-1, 4], "features' shape")
    check(sig.outputs["classes"].dtype == tf.int64.as_datatype_enum, "classes' dtype")
    check(sig.method_name == "tensorflow/serving/predict", "method_name")
    check("echo" in signatures.signature_def, "the echo signature")


def check_predict(predictions, model, probabilities_hex, classes_hex):
    request = predict_request(model, "serving_default", {"features": tf.make_tensor_proto(FEATURES)})
    response = predictions.Predict(request, timeout=TIMEOUT)
    check(response.model_spec.name == model, "Predict: model_spec.name")
    check(response.model_spec.version.value == 1, "Predict: model_spec.version")
    check(response.model_spec.signature_name == "serving_default", "Predict: signature_name")
    probabilities = tf.make_ndarray(response.outputs["probabilities"])
    classes = tf.make_ndarray(response.outputs["classes"])
    check(probabilities.dtype == np.float32 and probabilities.shape == (3, 3), "probabilities")
    check(classes.dtype == np.int64 and classes.shape == (3,), "classes")
    check(probabilities.tobytes().hex() == probabilities_hex, "probabilities differ from load_model's")
    check(classes.tobytes().hex() == classes_hex, "classes differ from load_model's")
    check(np.array_equal(classes, np.argmax(probabilities, axis=1)), "classes are the argmax")

    # The same request with the values in float_val, as older clients send them.
    typed = tf.make_tensor_proto(FEATURES)
    typed.ClearField("tensor_content")
    typed.float_val.extend(FEATURES.flatten().tolist())
    request = predict_request(model, "", {"features": typed})
    request.output_filter.append("classes")
    response = predictions.Predict(request, timeout=TIMEOUT)
    check(list(response.outputs.keys()) == ["classes"], "output_filter")
    check(tf.make_ndarray(response.outputs["classes"]).tobytes().hex() == classes_hex, "typed classes")


def echo_values():
    rng = np.random.default_rng(7)
    values = {
        "float32": rng.standard_normal((3, 2)).astype(np.float32),
        "float64": rng.standard_normal((3, 2)),
        "int32": rng.integers(-(2**31), 2**31 - 1, (3, 2), dtype=np.int32),
        "int64": rng.integers(-(2**62), 2**62, (3, 2), dtype=np.int64),
        "uint8": rng.integers(0, 255, (3, 2), dtype=np.uint8),
        "bool": rng.integers(0, 2, (3, 2)).astype(bool),
        "bfloat16": rng.standard_normal((3, 2)).astype(tf.bfloat16.as_numpy_dtype),
    }
    return values


def check_every_dtype(predictions, model):
    values = echo_values()
    inputs = {"in_" + name: tf.make_tensor_proto(v) for name, v in values.items()}
    response = predictions.Predict(predict_request(model, "echo", inputs), timeout=TIMEOUT)
    for name, sent in values.items():
        back = tf.make_ndarray(response.outputs["out_" + name])
        check(back.dtype == sent.dtype, f"echo {name}: dtype {back.dtype}")
        check(back.tobytes() == sent.tobytes(), f"echo {name}: values differ")
    # One value filling a shape, as tf.make_tensor_proto writes a broadcast,
    # and bfloat16 in half_val, each value's 16-bit pattern.
    filled = tf.make_tensor_proto(2.5, dtype=tf.float64, shape=[3, 2])
    halves = tf.make_tensor_proto(values["bfloat16"])
    halves.ClearField("tensor_content")
    halves.half_val.extend(values["bfloat16"].view(np.uint16).flatten().tolist())
    typed = {**inputs, "in_float64": filled, "in_bfloat16": halves}
    response = predictions.Predict(predict_request(model, "echo", typed), timeout=TIMEOUT)
    back = tf.make_ndarray(response.outputs["out_float64"])
    check(np.array_equal(back, np.full((3, 2), 2.5)), "a filled float64")
    back = tf.make_ndarray(response.outputs["out_bfloat16"])
    check(back.tobytes() == values["bfloat16"].tobytes(), "bfloat16 from half_val")


def check_errors(predictions, model):
    features = {"features": tf.make_tensor_proto(FEATURES)}
    expect_error(
        lambda: predictions.Predict(predict_request("nope", "", features), timeout=TIMEOUT),
        grpc.StatusCode.NOT_FOUND,
        "'nope' is not served",
        "another model",
    )
    strings = {"features": tf.make_tensor_proto(np.array([[b"a", b"b", b"c", b"d"]]))}
    expect_error(
        lambda: predictions.Predict(predict_request(model, "", strings), timeout=TIMEOUT),
        grpc.StatusCode.INVALID_ARGUMENT,
        "DT_STRING is not supported",
        "a string tensor",
    )
    wrong = {"features": tf.make_tensor_proto(FEATURES.astype(np.float64))}
    expect_error(
        lambda: predictions.Predict(predict_request(model, "", wrong), timeout=TIMEOUT),
        grpc.StatusCode.INVALID_ARGUMENT,
        "features",
        "a float64 for a float32",
    )
    expect_error(
        lambda: predictions.Predict(predict_request(model, "nope", features), timeout=TIMEOUT),
        grpc.StatusCode.NOT_FOUND,
        "nope",
        "an unknown signature",
    )
    classify = classification_pb2.ClassificationRequest()
    classify.model_spec.name = model
    expect_error(
        lambda: predictions.Classify(classify, timeout=TIMEOUT),
        grpc.StatusCode.UNIMPLEMENTED,
        "",
        "Classify",
    )


def main():
    address, model, probabilities_hex, classes_hex = sys.argv[1:5]
    with grpc.insecure_channel(address) as channel:
        predictions = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        models = model_service_pb2_grpc.ModelServiceStub(channel)
        check_status(models, model)
        check_metadata(predictions, model)
        check_predict(predictions, model, probabilities_hex, classes_hex)
        check_every_dtype(predictions, model)
        check_errors(predictions, model)
    print("tf serving client check: ok")


if __name__ == "__main__":
    main()
