// actorflow-serve's gRPC front end (apps/lib/serve_grpc.hpp): TensorProto
// to tensor and back as TensorFlow converts them, every hostile number of a
// request refused with a status that names it, and TensorFlow Serving's
// services answered over a real channel as TF Serving answers them: by a
// C++ client of the generated stubs, and (suite tf_serving_client) by TF
// Serving's own Python client, PyPI's tensorflow-serving-api.
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <tensorflow_serving/apis/get_model_metadata.pb.h>
#include <tensorflow_serving/apis/get_model_status.pb.h>
#include <tensorflow_serving/apis/model_service.grpc.pb.h>
#include <tensorflow_serving/apis/predict.pb.h>
#include <tensorflow_serving/apis/prediction_service.grpc.pb.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "actors/serving/export.hpp"
#include "actors/serving/model_server.hpp"
#include "actors/session.hpp"
#include "apps/lib/serve_grpc.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/reduce.hpp"
#include "ops/softmax.hpp"
#include "ops/state.hpp"
#include "ops/train.hpp"
#include "test_util.hpp"
#include "tests/support/child_process.hpp"

using namespace actorflow;
using actorflow::apps::grpc_front_end;
using actorflow::apps::grpc_options;
using actorflow::apps::tensor_from_proto;
using actorflow::apps::tensor_to_proto;
using actorflow::testing::code_of_failure;
using actorflow::testing::contains;
using actorflow::testing::error_of;
using actorflow::testing::skip_check;
using actorflow::testing::temp_dir;
using tensorflow::TensorProto;
namespace tfs = tensorflow::serving;

namespace {

constexpr dtype every_dtype[] = {dtype::float32, dtype::float64, dtype::int32,   dtype::int64,
                                 dtype::uint8,   dtype::boolean, dtype::bfloat16};

// A tensor of `type` whose bytes differ element to element (bools 0 or 1).
tensor sample(dtype type, shape dims) {
  tensor t(type, std::move(dims));
  auto* bytes = static_cast<unsigned char*>(t.raw_mutable_data());
  for (size_t i = 0; i < t.size_bytes(); ++i)
    bytes[i] = type == dtype::boolean ? (i % 3 == 0) : static_cast<unsigned char>(i * 37 + 11);
  return t;
}

bool same_tensor(const tensor& a, const tensor& b) {
  return a.type() == b.type() && a.dims() == b.dims() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.size_bytes()) == 0;
}

TensorProto proto_of(const tensor& t) {
  TensorProto p;
  tensor_to_proto(t, p);
  return p;
}

// A proto of `wire` dtype and `dims`, without values.
TensorProto bare_proto(tensorflow::DataType wire, const std::vector<int64_t>& dims) {
  TensorProto p;
  p.set_dtype(wire);
  for (int64_t d : dims) p.mutable_tensor_shape()->add_dim()->set_size(d);
  return p;
}

// The message tensor_from_proto throws, after checking its code.
std::string refusal(const TensorProto& p, int64_t max_bytes = int64_t{1} << 30) {
  CHECK(code_of_failure([&] { tensor_from_proto(p, "input 'x'", max_bytes); }) ==
        error_code::invalid_argument);
  return error_of([&] { tensor_from_proto(p, "input 'x'", max_bytes); });
}

}  // namespace

TEST_CASE("every dtype goes to a TensorProto with tensor_content and comes back bit for bit") {
  for (dtype type : every_dtype) {
    CAPTURE(dtype_name(type));
    for (const shape& dims : {shape{2, 3}, shape{}, shape{0, 3}, shape{1, 1, 5}}) {
      CAPTURE(dims.to_string());
      tensor t = sample(type, dims);
      TensorProto p = proto_of(t);
      CHECK(p.tensor_shape().dim_size() == dims.rank());
      CHECK(p.tensor_content().size() == t.size_bytes());
      CHECK(same_tensor(tensor_from_proto(p, "x"), t));
    }
  }
  CHECK(proto_of(sample(dtype::float32, {1})).dtype() == tensorflow::DT_FLOAT);
  CHECK(proto_of(sample(dtype::float64, {1})).dtype() == tensorflow::DT_DOUBLE);
  CHECK(proto_of(sample(dtype::int32, {1})).dtype() == tensorflow::DT_INT32);
  CHECK(proto_of(sample(dtype::int64, {1})).dtype() == tensorflow::DT_INT64);
  CHECK(proto_of(sample(dtype::uint8, {1})).dtype() == tensorflow::DT_UINT8);
  CHECK(proto_of(sample(dtype::boolean, {1})).dtype() == tensorflow::DT_BOOL);
  CHECK(proto_of(sample(dtype::bfloat16, {1})).dtype() == tensorflow::DT_BFLOAT16);
}

TEST_CASE("the typed fields, as TensorFlow's clients fill them, one value filling a shape") {
  auto p = bare_proto(tensorflow::DT_FLOAT, {2, 2});
  for (float v : {1.5f, -2.f, 0.25f, 8.f}) p.add_float_val(v);
  CHECK(tensor_from_proto(p, "x").to_vector<float>() == std::vector<float>{1.5f, -2.f, 0.25f, 8.f});

  p = bare_proto(tensorflow::DT_DOUBLE, {3});
  p.add_double_val(0.5);  // one value fills the shape
  CHECK(tensor_from_proto(p, "x").to_vector<double>() == std::vector<double>{0.5, 0.5, 0.5});

  p = bare_proto(tensorflow::DT_INT32, {2});
  p.add_int_val(-7);
  p.add_int_val(1 << 30);
  CHECK(tensor_from_proto(p, "x").to_vector<int32_t>() == std::vector<int32_t>{-7, 1 << 30});

  p = bare_proto(tensorflow::DT_UINT8, {3});
  for (int v : {0, 200, 255}) p.add_int_val(v);
  CHECK(tensor_from_proto(p, "x").to_vector<uint8_t>() == std::vector<uint8_t>{0, 200, 255});

  p = bare_proto(tensorflow::DT_INT64, {2});
  p.add_int64_val(int64_t{1} << 40);
  p.add_int64_val(-1);
  CHECK(tensor_from_proto(p, "x").to_vector<int64_t>() ==
        std::vector<int64_t>{int64_t{1} << 40, -1});

  p = bare_proto(tensorflow::DT_BOOL, {3});
  for (bool v : {true, false, true}) p.add_bool_val(v);
  CHECK(tensor_from_proto(p, "x").to_vector<bool>() == std::vector<bool>{true, false, true});

  p = bare_proto(tensorflow::DT_BFLOAT16, {2});
  p.add_half_val(0x3fc0);  // 1.5
  p.add_half_val(0xbf80);  // -1
  auto b = tensor_from_proto(p, "x");
  CHECK(b.data<bfloat16>()[0].bits == 0x3fc0);
  CHECK(b.data<bfloat16>()[1].bits == 0xbf80);

  p = bare_proto(tensorflow::DT_FLOAT, {});  // a scalar
  p.add_float_val(3.f);
  CHECK(tensor_from_proto(p, "x").item<float>() == 3.f);

  // tensor_content wins over the typed fields, as in TensorFlow.
  p = proto_of(tensor::from_vector<float>({4.f, 5.f}));
  p.add_float_val(9.f);
  CHECK(tensor_from_proto(p, "x").to_vector<float>() == std::vector<float>{4.f, 5.f});

  // A bool byte other than 0 or 1 reads as true.
  p = bare_proto(tensorflow::DT_BOOL, {2});
  p.set_tensor_content(std::string("\x00\x07", 2));
  CHECK(tensor_from_proto(p, "x").to_vector<bool>() == std::vector<bool>{false, true});
}

TEST_CASE("hostile TensorProtos are refused with invalid_argument naming what is wrong") {
  CHECK(contains(refusal(bare_proto(tensorflow::DT_STRING, {1})),
                 "[grpc] input 'x': dtype DT_STRING is not supported"));
  CHECK(contains(refusal(bare_proto(tensorflow::DT_HALF, {1})), "DT_HALF is not supported"));
  CHECK(contains(refusal(bare_proto(static_cast<tensorflow::DataType>(977), {1})),
                 "dtype DataType 977 is not supported"));

  auto unknown_rank = bare_proto(tensorflow::DT_FLOAT, {});
  unknown_rank.mutable_tensor_shape()->set_unknown_rank(true);
  CHECK(contains(refusal(unknown_rank), "unknown_rank"));
  CHECK(contains(refusal(bare_proto(tensorflow::DT_FLOAT, {2, -1})), "dim 1 is -1"));
  CHECK(contains(refusal(bare_proto(tensorflow::DT_FLOAT, std::vector<int64_t>(33, 1))),
                 "rank 33 is over the limit of 32"));

  // A product that overflows int64, one over the limit, one just under it.
  int64_t big = int64_t{1} << 40;
  auto overflow = bare_proto(tensorflow::DT_FLOAT, {big, big, big});
  overflow.add_float_val(1.f);
  CHECK(contains(refusal(overflow), "over the limit of 1073741824 bytes"));
  auto over = bare_proto(tensorflow::DT_FLOAT, {(int64_t{1} << 28) + 1});
  over.add_float_val(1.f);
  CHECK(contains(refusal(over), "shape (268435457) of float32 is over the limit"));
  auto fits = bare_proto(tensorflow::DT_UINT8, {1024});
  fits.add_int_val(1);
  CHECK(tensor_from_proto(fits, "x", 1024).num_elements() == 1024);
  CHECK(contains(refusal(fits, 1023), "over the limit of 1023 bytes"));
  // Zero elements, the other dims within the limit; or not.
  CHECK(tensor_from_proto(bare_proto(tensorflow::DT_FLOAT, {1000, 0, 1000}), "x").num_elements() ==
        0);
  CHECK(contains(refusal(bare_proto(tensorflow::DT_FLOAT, {int64_t{1} << 62, 4, 0})),
                 "shape (4611686018427387904,4,0) of float32 is over the limit"));

  auto short_content = bare_proto(tensorflow::DT_FLOAT, {2, 2});
  short_content.set_tensor_content(std::string(15, '\0'));
  CHECK(contains(refusal(short_content),
                 "tensor_content holds 15 bytes; shape (2,2) of float32 "
                 "needs 16"));
  auto long_content = bare_proto(tensorflow::DT_INT64, {2});
  long_content.set_tensor_content(std::string(24, '\0'));
  CHECK(contains(refusal(long_content), "holds 24 bytes"));
  auto content_for_nothing = bare_proto(tensorflow::DT_INT32, {0});
  content_for_nothing.set_tensor_content("abcd");
  CHECK(contains(refusal(content_for_nothing), "needs 0"));

  auto two_for_three = bare_proto(tensorflow::DT_INT32, {3});
  two_for_three.add_int_val(1);
  two_for_three.add_int_val(2);
  CHECK(contains(refusal(two_for_three), "int_val holds 2 values"));
  CHECK(contains(refusal(two_for_three), "the shape holds 3"));
  auto four_for_three = bare_proto(tensorflow::DT_BOOL, {3});
  for (int i = 0; i < 4; ++i) four_for_three.add_bool_val(true);
  CHECK(contains(refusal(four_for_three), "bool_val holds 4 values"));
  auto none = bare_proto(tensorflow::DT_DOUBLE, {2});
  CHECK(contains(refusal(none), "double_val holds 0 values"));
  auto wrong_field = bare_proto(tensorflow::DT_FLOAT, {1});
  wrong_field.add_double_val(1.0);  // DT_FLOAT's values are float_val
  CHECK(contains(refusal(wrong_field), "float_val holds 0 values"));

  auto byte_range = bare_proto(tensorflow::DT_UINT8, {2});
  byte_range.add_int_val(3);
  byte_range.add_int_val(256);
  CHECK(contains(refusal(byte_range), "int_val[1] is 256, out of range [0, 255]"));
  auto negative_byte = bare_proto(tensorflow::DT_UINT8, {4});
  negative_byte.add_int_val(-1);  // one value filling the shape: checked as well
  CHECK(contains(refusal(negative_byte), "int_val[0] is -1"));
  auto half_range = bare_proto(tensorflow::DT_BFLOAT16, {1});
  half_range.add_half_val(0x10000);
  CHECK(contains(refusal(half_range), "half_val[0] is 65536, out of range [0, 65535]"));
}

namespace {

// A softmax classifier of 4 features into 3 classes, trained a few steps, and
// an "echo" signature: one input of each dtype, answered unchanged.
struct served_models {
  graph g;
  output features, probabilities, classes;
  std::vector<std::pair<std::string, output>> echo_inputs, echo_outputs;
  std::unique_ptr<session> s;

  served_models() {
    features = placeholder(g, dtype::float32, {-1, 4}, "features");
    auto labels = placeholder(g, dtype::int32, {-1}, "labels");
    auto w =
        make_variable(constant(g, tensor::from_vector<float>({0.1f, -0.2f, 0.3f, 0.0f, 0.5f, -0.1f,
                                                              0.2f, 0.2f, -0.3f, 0.4f, 0.1f, -0.5f},
                                                             {4, 3})),
                      "w");
    auto b = make_variable(constant(g, tensor::from_vector<float>({0.f, 0.1f, -0.1f}, {3})), "b");
    auto logits = add(matmul(features, w), b, "logits");
    probabilities = softmax(logits, "probabilities");
    classes = argmax(logits, 1, "classes");
    auto loss = reduce_mean(sparse_softmax_cross_entropy_with_logits(logits, labels).loss);
    auto train = sgd(0.5).minimize(loss);
    for (dtype type : every_dtype) {
      std::string name = std::string("in_") + dtype_name(type);
      auto in = placeholder(g, type, {-1, 2}, name);
      echo_inputs.push_back({name, in});
      echo_outputs.push_back({std::string("out_") + dtype_name(type), identity(in)});
    }
    s = std::make_unique<session>(g);
    s->run({global_variables_initializer(g)});
    auto labels_batch = tensor::from_vector<int32_t>({0, 1, 2}, {3});
    for (int i = 0; i < 5; ++i) s->run({{features, batch()}, {labels, labels_batch}}, {}, {train});
  }

  static tensor batch() {
    return tensor::from_vector<float>({1, 0, 0, 1, 0, 1, 1, 0, 0.5f, 0.5f, 0, 1}, {3, 4});
  }

  void export_to(const std::string& dir) {
    export_model(*s, dir,
                 {{.inputs = {{"features", features}},
                   .outputs = {{"probabilities", probabilities}, {"classes", classes}}},
                  {.key = "echo", .inputs = echo_inputs, .outputs = echo_outputs}});
  }
};

constexpr auto rpc_deadline = std::chrono::seconds(30);

// A client context whose call cannot outlive the test's patience.
std::unique_ptr<grpc::ClientContext> bounded() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + rpc_deadline);
  return ctx;
}

// An exported model served by a model_server and a grpc_front_end on
// 127.0.0.1, with clients of both services.
struct grpc_fixture {
  temp_dir base{"serve_grpc"};
  served_models models;
  std::unique_ptr<model_server> server;
  std::unique_ptr<grpc_front_end> front;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<tfs::PredictionService::Stub> predictions;
  std::unique_ptr<tfs::ModelService::Stub> models_stub;

  explicit grpc_fixture(grpc_options options = {}, batching_options batching = {}) {
    models.export_to(base / "1");
    server = std::make_unique<model_server>(model_server_options{
        .name = "clf", .base_path = base.path.string(), .batching = batching, .poll_interval = {}});
    REQUIRE(server->poll());
    options.host = "127.0.0.1";
    options.port = 0;
    front = std::make_unique<grpc_front_end>(*server, options);
    REQUIRE(front->port() > 0);
    channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(front->port()),
                                  grpc::InsecureChannelCredentials());
    predictions = tfs::PredictionService::NewStub(channel);
    models_stub = tfs::ModelService::NewStub(channel);
  }

  tfs::PredictRequest request(const std::string& signature = "") const {
    tfs::PredictRequest r;
    r.mutable_model_spec()->set_name("clf");
    r.mutable_model_spec()->set_signature_name(signature);
    return r;
  }
  grpc::Status predict(const tfs::PredictRequest& r, tfs::PredictResponse& out) const {
    return predictions->Predict(bounded().get(), r, &out);
  }
  grpc::Status predict(const tfs::PredictRequest& r) const {
    tfs::PredictResponse out;
    return predict(r, out);
  }
};

// The request that predict_batch() answers: the classifier's batch.
tfs::PredictRequest batch_request(const grpc_fixture& f) {
  auto r = f.request();
  tensor_to_proto(served_models::batch(), (*r.mutable_inputs())["features"]);
  return r;
}

void check_status(const grpc::Status& s, grpc::StatusCode code, const std::string& part) {
  INFO(s.error_message());
  CHECK(s.error_code() == code);
  CHECK(contains(s.error_message(), part));
}

}  // namespace

TEST_CASE("Predict over gRPC answers as the loaded model does, bit for bit") {
  grpc_fixture f;
  auto expected =
      load_model(f.base / "1")->predict("serving_default", {{"features", served_models::batch()}});
  tfs::PredictResponse response;
  auto status = f.predict(batch_request(f), response);
  REQUIRE_MESSAGE(status.ok(), status.error_message());
  CHECK(response.model_spec().name() == "clf");
  CHECK(response.model_spec().version().value() == 1);
  CHECK(response.model_spec().signature_name() == "serving_default");
  REQUIRE(response.outputs_size() == 2);
  for (const auto& [alias, t] : expected) {
    CAPTURE(alias);
    const auto& proto = response.outputs().at(alias);
    CHECK(proto.tensor_content().size() == t.size_bytes());
    CHECK(same_tensor(tensor_from_proto(proto, alias), t));
  }
  CHECK(response.outputs().at("classes").dtype() == tensorflow::DT_INT64);

  // The same features as float_val, the output filtered to one alias.
  auto typed = f.request("serving_default");
  auto& features = (*typed.mutable_inputs())["features"];
  features = bare_proto(tensorflow::DT_FLOAT, {3, 4});
  for (float v : served_models::batch().to_vector<float>()) features.add_float_val(v);
  typed.add_output_filter("classes");
  tfs::PredictResponse filtered;
  REQUIRE(f.predict(typed, filtered).ok());
  REQUIRE(filtered.outputs_size() == 1);
  CHECK(same_tensor(tensor_from_proto(filtered.outputs().at("classes"), "classes"),
                    expected.at("classes")));

  // A version asked for by number.
  auto versioned = batch_request(f);
  versioned.mutable_model_spec()->mutable_version()->set_value(1);
  CHECK(f.predict(versioned).ok());
}

TEST_CASE("every dtype travels through a served model and back unchanged") {
  grpc_fixture f;
  auto r = f.request("echo");
  std::map<std::string, tensor> sent;
  for (dtype type : every_dtype) {
    tensor t = sample(type, {3, 2});
    tensor_to_proto(t, (*r.mutable_inputs())[std::string("in_") + dtype_name(type)]);
    sent.emplace(std::string("out_") + dtype_name(type), t);
  }
  tfs::PredictResponse response;
  auto status = f.predict(r, response);
  REQUIRE_MESSAGE(status.ok(), status.error_message());
  CHECK(response.model_spec().signature_name() == "echo");
  REQUIRE(response.outputs_size() == static_cast<int>(sent.size()));
  for (const auto& [alias, t] : sent) {
    CAPTURE(alias);
    CHECK(same_tensor(tensor_from_proto(response.outputs().at(alias), alias), t));
  }
}

TEST_CASE("GetModelMetadata returns the signatures in a packed SignatureDefMap") {
  grpc_fixture f;
  tfs::GetModelMetadataRequest request;
  request.mutable_model_spec()->set_name("clf");
  request.add_metadata_field("signature_def");
  tfs::GetModelMetadataResponse response;
  auto status = f.predictions->GetModelMetadata(bounded().get(), request, &response);
  REQUIRE_MESSAGE(status.ok(), status.error_message());
  CHECK(response.model_spec().name() == "clf");
  CHECK(response.model_spec().version().value() == 1);
  const auto& any = response.metadata().at("signature_def");
  CHECK(any.type_url() == "type.googleapis.com/tensorflow.serving.SignatureDefMap");
  tfs::SignatureDefMap map;
  REQUIRE(any.UnpackTo(&map));
  REQUIRE(map.signature_def().count("serving_default") == 1);
  REQUIRE(map.signature_def().count("echo") == 1);
  const auto& sig = map.signature_def().at("serving_default");
  CHECK(sig.method_name() == "tensorflow/serving/predict");
  const auto& in = sig.inputs().at("features");
  CHECK(in.name() == "features");
  CHECK(in.dtype() == tensorflow::DT_FLOAT);
  REQUIRE(in.tensor_shape().dim_size() == 2);
  CHECK(in.tensor_shape().dim(0).size() == -1);
  CHECK(in.tensor_shape().dim(1).size() == 4);
  CHECK(sig.outputs().at("classes").dtype() == tensorflow::DT_INT64);
  CHECK(sig.outputs().at("probabilities").tensor_shape().dim(1).size() == 3);
  CHECK(map.signature_def().at("echo").inputs().at("in_bfloat16").dtype() ==
        tensorflow::DT_BFLOAT16);
}

TEST_CASE("GetModelStatus says the version is AVAILABLE") {
  grpc_fixture f;
  tfs::GetModelStatusRequest request;
  request.mutable_model_spec()->set_name("clf");
  tfs::GetModelStatusResponse response;
  auto status = f.models_stub->GetModelStatus(bounded().get(), request, &response);
  REQUIRE_MESSAGE(status.ok(), status.error_message());
  REQUIRE(response.model_version_status_size() == 1);
  const auto& v = response.model_version_status(0);
  CHECK(v.version() == 1);
  CHECK(v.state() == tfs::ModelVersionStatus::AVAILABLE);
  CHECK(v.status().error_code() == tensorflow::error::OK);
  CHECK(v.status().error_message().empty());

  request.mutable_model_spec()->mutable_version()->set_value(1);
  CHECK(f.models_stub->GetModelStatus(bounded().get(), request, &response).ok());
  request.mutable_model_spec()->mutable_version()->set_value(7);
  check_status(f.models_stub->GetModelStatus(bounded().get(), request, &response),
               grpc::StatusCode::NOT_FOUND, "version 7");
}

TEST_CASE("bad requests get the status of what is wrong, and a message naming it") {
  grpc_fixture f;
  using code = grpc::StatusCode;

  auto no_spec = batch_request(f);
  no_spec.clear_model_spec();
  check_status(f.predict(no_spec), code::INVALID_ARGUMENT,
               "Predict: the request has no model_spec");
  auto other_model = batch_request(f);
  other_model.mutable_model_spec()->set_name("mnist");
  check_status(f.predict(other_model), code::NOT_FOUND,
               "model 'mnist' is not served here (this server serves 'clf')");
  auto no_name = batch_request(f);
  no_name.mutable_model_spec()->clear_name();
  check_status(f.predict(no_name), code::INVALID_ARGUMENT, "model_spec.name is empty");
  auto no_version = batch_request(f);
  no_version.mutable_model_spec()->mutable_version()->set_value(7);
  check_status(f.predict(no_version), code::NOT_FOUND, "no version 7");
  auto label = batch_request(f);
  label.mutable_model_spec()->set_version_label("stable");
  check_status(f.predict(label), code::INVALID_ARGUMENT, "version_label 'stable'");
  auto no_signature = batch_request(f);
  no_signature.mutable_model_spec()->set_signature_name("classify");
  check_status(f.predict(no_signature), code::NOT_FOUND, "classify");

  auto strings = f.request();
  (*strings.mutable_inputs())["features"] = bare_proto(tensorflow::DT_STRING, {1});
  check_status(f.predict(strings), code::INVALID_ARGUMENT,
               "input 'features': dtype DT_STRING is not supported");
  auto negative = f.request();
  (*negative.mutable_inputs())["features"] = bare_proto(tensorflow::DT_FLOAT, {-3, 4});
  check_status(f.predict(negative), code::INVALID_ARGUMENT, "input 'features': dim 0 is -3");
  auto huge = f.request();
  auto& huge_features = (*huge.mutable_inputs())["features"];
  huge_features = bare_proto(tensorflow::DT_FLOAT, {int64_t{1} << 62, 4});
  huge_features.add_float_val(1.f);
  check_status(f.predict(huge), code::INVALID_ARGUMENT, "over the limit of 1073741824 bytes");
  auto mismatch = f.request();
  auto& short_features = (*mismatch.mutable_inputs())["features"];
  short_features = bare_proto(tensorflow::DT_FLOAT, {3, 4});
  short_features.set_tensor_content(std::string(47, '\0'));
  check_status(f.predict(mismatch), code::INVALID_ARGUMENT, "tensor_content holds 47 bytes");
  auto wrong_dtype = f.request();
  tensor_to_proto(tensor::from_vector<int32_t>({1, 2, 3, 4}, {1, 4}),
                  (*wrong_dtype.mutable_inputs())["features"]);
  check_status(f.predict(wrong_dtype), code::INVALID_ARGUMENT, "features");
  auto wrong_shape = f.request();
  tensor_to_proto(sample(dtype::float32, {2, 5}), (*wrong_shape.mutable_inputs())["features"]);
  check_status(f.predict(wrong_shape), code::INVALID_ARGUMENT, "features");
  check_status(f.predict(f.request()), code::INVALID_ARGUMENT, "features");
  auto unknown_output = batch_request(f);
  unknown_output.add_output_filter("logits");
  check_status(f.predict(unknown_output), code::INVALID_ARGUMENT, "logits");
  auto twice = batch_request(f);
  twice.add_output_filter("classes");
  twice.add_output_filter("classes");
  check_status(f.predict(twice), code::INVALID_ARGUMENT, "output_filter names 'classes' twice");

  tfs::GetModelMetadataRequest metadata;
  tfs::GetModelMetadataResponse metadata_response;
  metadata.mutable_model_spec()->set_name("clf");
  check_status(f.predictions->GetModelMetadata(bounded().get(), metadata, &metadata_response),
               code::INVALID_ARGUMENT, "metadata_field is empty");
  metadata.add_metadata_field("graph_def");
  check_status(f.predictions->GetModelMetadata(bounded().get(), metadata, &metadata_response),
               code::INVALID_ARGUMENT, "metadata_field 'graph_def' is not supported");
  metadata.set_metadata_field(0, "signature_def");
  metadata.mutable_model_spec()->mutable_version()->set_value(3);
  check_status(f.predictions->GetModelMetadata(bounded().get(), metadata, &metadata_response),
               code::NOT_FOUND, "no version 3");

  tfs::GetModelStatusRequest status;
  tfs::GetModelStatusResponse status_response;
  check_status(f.models_stub->GetModelStatus(bounded().get(), status, &status_response),
               code::INVALID_ARGUMENT, "GetModelStatus: the request has no model_spec");
  status.mutable_model_spec()->set_name("other");
  check_status(f.models_stub->GetModelStatus(bounded().get(), status, &status_response),
               code::NOT_FOUND, "model 'other' is not served here");

  // Each call was counted, the failures by their codes.
  auto metrics = f.server->metrics().prometheus_text();
  CHECK(contains(metrics, "API=\"predict\",entrypoint=\"GRPC\",status=\"invalid_argument\"}"));
  CHECK(contains(metrics, "API=\"predict\",entrypoint=\"GRPC\",status=\"not_found\"}"));
  CHECK(contains(metrics, "API=\"metadata\",entrypoint=\"GRPC\",status=\"invalid_argument\"}"));
  CHECK(contains(metrics, "API=\"status\",entrypoint=\"GRPC\",status=\"not_found\"}"));
}

TEST_CASE("a request's size is bounded: the message by gRPC, its tensors by the front end") {
  grpc_fixture f({.max_receive_bytes = 1 << 20, .max_tensor_bytes = 1024});
  auto big = f.request("echo");
  tensor_to_proto(sample(dtype::uint8, {(1 << 20) + 8, 1}), (*big.mutable_inputs())["in_uint8"]);
  check_status(f.predict(big), grpc::StatusCode::RESOURCE_EXHAUSTED, "");

  // Two inputs of 800 bytes: each under the limit, not both.
  auto two = f.request("echo");
  tensor_to_proto(sample(dtype::int64, {50, 2}), (*two.mutable_inputs())["in_int64"]);
  tensor_to_proto(sample(dtype::float64, {50, 2}), (*two.mutable_inputs())["in_float64"]);
  check_status(f.predict(two), grpc::StatusCode::INVALID_ARGUMENT,
               "the request's inputs hold more than 1024 bytes together");
}

TEST_CASE("stop() ends serving; a later call fails without waiting out its deadline") {
  grpc_fixture f;
  REQUIRE(f.predict(batch_request(f)).ok());
  f.front->stop();
  f.front->stop();  // idempotent
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  tfs::PredictResponse response;
  const auto start = std::chrono::steady_clock::now();
  auto status = f.predictions->Predict(ctx.get(), batch_request(f), &response);
  CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(9));
}

// A call that waits in the batcher for a batch to fill: stop() comes while
// it is in flight.
grpc::Status predict_while_stopping(grpc_fixture& f, tfs::PredictResponse& response) {
  auto call = std::async(std::launch::async, [&] { return f.predict(batch_request(f), response); });
  const auto patience = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (f.server->metrics().queue_depth() == 0 && std::chrono::steady_clock::now() < patience)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  REQUIRE_MESSAGE(f.server->metrics().queue_depth() == 1, "the call never reached the batcher");
  const auto start = std::chrono::steady_clock::now();
  f.front->stop();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(4));
  return call.get();
}

TEST_CASE("stop() lets a call in flight finish within its grace, and cancels it past that") {
  const batching_options slow_batches{.enabled = true,
                                      .max_batch_size = 64,
                                      .batch_timeout = std::chrono::milliseconds(1000),
                                      .run_when_idle = false};
  {
    grpc_fixture f({}, slow_batches);
    tfs::PredictResponse response;
    auto status = predict_while_stopping(f, response);
    CHECK_MESSAGE(status.ok(), status.error_message());
    CHECK(response.outputs_size() == 2);
  }
  {
    grpc_fixture f({.shutdown_grace = std::chrono::milliseconds(50)}, slow_batches);
    tfs::PredictResponse response;
    auto status = predict_while_stopping(f, response);
    INFO(status.error_message());
    CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);  // gRPC's "Cancelling all calls"
  }
}

TEST_CASE("a port in use is refused with unavailable, naming the address") {
  grpc_fixture f;
  model_server& server = *f.server;
  auto taken = [&] {
    grpc_front_end second(server, {.host = "127.0.0.1", .port = f.front->port()});
  };
  CHECK(code_of_failure(taken) == error_code::unavailable);
  CHECK(contains(error_of(taken), "cannot listen on 127.0.0.1:" + std::to_string(f.front->port())));
}

namespace {

// A Python that imports tensorflow_serving: $ACTORFLOW_TF_SERVING_PYTHON,
// else the one CMake was told of (by default the virtual environment
// scripts/tf_serving_venv.sh makes in the build folder), else Debian's
// python3; "" when none does. Paths, since the client is started by execv.
std::string tf_serving_python() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("ACTORFLOW_TF_SERVING_PYTHON"); env && *env)
    candidates.push_back(env);
  candidates.push_back(ACTORFLOW_TF_SERVING_PYTHON);
  candidates.push_back("/usr/bin/python3");
  for (const auto& python : candidates)
    if (!python.empty() &&
        std::system(("timeout 120 '" + python +
                     "' -c 'import tensorflow_serving.apis.prediction_service_pb2_grpc' "
                     ">/dev/null 2>&1")
                        .c_str()) == 0)
      return python;
  return "";
}

std::string hex(const tensor& t) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  const auto* bytes = static_cast<const unsigned char*>(t.raw_data());
  for (size_t i = 0; i < t.size_bytes(); ++i) {
    out += digits[bytes[i] >> 4];
    out += digits[bytes[i] & 15];
  }
  return out;
}

}  // namespace

TEST_CASE("TensorFlow Serving's own Python client works unchanged" *
          doctest::test_suite("tf_serving_client")) {
  const std::string python = tf_serving_python();
  if (python.empty()) {
    skip_check("tf_serving_client",
               "no Python that imports tensorflow_serving ($ACTORFLOW_TF_SERVING_PYTHON, " +
                   std::string(ACTORFLOW_TF_SERVING_PYTHON) +
                   ", /usr/bin/python3); bash scripts/tf_serving_venv.sh makes one");
    return;
  }
  grpc_fixture f;
  auto expected =
      load_model(f.base / "1")->predict("serving_default", {{"features", served_models::batch()}});
  actorflow::testing::child_process client(std::vector<std::string>{
      python, ACTORFLOW_TF_SERVING_CLIENT_SCRIPT, "127.0.0.1:" + std::to_string(f.front->port()),
      "clf", hex(expected.at("probabilities")), hex(expected.at("classes"))});
  const int rc = client.wait_exit(std::chrono::seconds(300));
  const std::string out = client.output();
  INFO(out);
  CHECK(rc == 0);
  CHECK(contains(out, "tf serving client check: ok"));
}
