// The graph optimizer (actors/compile/graph_optimizer.hpp): what each pass removes,
// what it must leave alone, and that the training graphs it rewrites compute
// what they computed before.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "actors/compile/graph_optimizer.hpp"
#include "actors/run/executable.hpp"
#include "actors/run/runtime.hpp"
#include "actors/session.hpp"
#include "apps/lib/fmnist_models.hpp"
#include "ops/array.hpp"
#include "ops/conv.hpp"
#include "ops/linalg.hpp"
#include "ops/math.hpp"
#include "ops/normalization.hpp"
#include "ops/op_util.hpp"
#include "ops/pool.hpp"
#include "ops/random.hpp"
#include "ops/reduce.hpp"
#include "ops/state.hpp"
#include "ops/train.hpp"
#include "test_util.hpp"

using namespace actorflow;
using actorflow::testing::error_of;

namespace {

tensor floats(shape dims, std::vector<float> values) {
  return tensor::from_vector<float>(values, std::move(dims));
}

run_signature fetching(const std::vector<output>& fetches,
                       const std::vector<operation>& targets = {},
                       const std::vector<output>& feeds = {}) {
  run_signature sig;
  for (auto& f : feeds) sig.feeds.push_back(f.ref());
  for (auto& f : fetches) sig.fetches.push_back(f.ref());
  for (auto& t : targets) sig.targets.push_back(t.id());
  return sig;
}

size_t count_op(const optimized_graph& o, const std::string& op) {
  auto needed = needed_nodes(*o.g, o.sig, false);
  size_t n = 0;
  for (auto& node : o.g->nodes()) n += needed[static_cast<size_t>(node.id)] && node.op == op;
  return n;
}

const node& fetched_node(const optimized_graph& o, size_t i) {
  return o.g->at(o.sig.fetches.at(i).node);
}

bool same_bits(const tensor& a, const tensor& b) {
  return a.type() == b.type() && a.dims() == b.dims() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.size_bytes()) == 0;
}

}  // namespace

TEST_CASE("constant subgraphs fold into one constant, computed by the CPU kernels") {
  graph g;
  auto x = placeholder(g, dtype::float32, {2}, "x");
  auto c = exp(constant(g, floats({2}, {0, 1})) + constant(g, floats({2}, {1, 1})), "folded");
  auto y = x * c;
  auto o = optimize_graph(g, fetching({y}, {}, {x}));
  CHECK(o.report.folded == 2);  // the add, then the exp of it
  CHECK(count_op(o, "exp") == 0);
  auto& folded = o.g->at(fetched_node(o, 0).inputs[1].node);
  REQUIRE(folded.op == "constant");
  CHECK(folded.name == "folded");
  auto value = std::get<tensor>(folded.attrs.at("value"));
  CHECK(same_bits(value, run_kernel("exp", {floats({2}, {1, 2})})[0]));
  session s(g);
  auto out = s.run({{x, floats({2}, {1, 2})}}, {y})[0];
  CHECK(out.data<float>()[1] == doctest::Approx(2 * std::exp(2.0)));
}

TEST_CASE("a value read only for its shape folds, as the gradient of a mean's seed") {
  graph g;
  auto x = placeholder(g, dtype::float32, {4, 3}, "x");
  auto ones = ones_like(reduce_mean(x, {}, false));
  auto o = optimize_graph(g, fetching({ones * x}, {}, {x}));
  CHECK(o.report.folded == 1);
  CHECK(count_op(o, "ones_like") == 0);
  CHECK(count_op(o, "reduce_mean") == 0);  // nothing reads the mean's value any more
}

TEST_CASE("folding leaves stateful ops, failing kernels and large values to the step") {
  graph g;
  auto draw = random_uniform(g, {3}, dtype::float32, 0, 1, 7);
  auto big = fill(g, {2048, 2048}, 1.0, dtype::float32);  // 16 MiB, over the 10 MiB limit
  auto bad = gather(constant(g, floats({2}, {1, 2})),
                    constant(g, tensor::from_vector<int32_t>({5}, {1})), 0, "bad_gather");
  auto o = optimize_graph(g, fetching({draw, big}));
  CHECK(o.report.folded == 0);
  CHECK(count_op(o, "random_uniform") == 1);
  CHECK(count_op(o, "fill") == 1);
  auto failing = optimize_graph(g, fetching({bad}));
  CHECK(failing.report.folded == 0);
  session s(g);
  CHECK(error_of([&] { s.run({}, {bad}); }).find("bad_gather") != std::string::npos);
  auto first = s.run({}, {draw})[0], second = s.run({}, {draw})[0];
  CHECK(!same_bits(first, second));  // still drawn anew each step
}

TEST_CASE("common subexpressions become one node; different attributes or effects do not") {
  graph g;
  auto x = placeholder(g, dtype::float32, {2, 2}, "x");
  auto a = exp(x, "first_exp"), b = exp(x, "second_exp");
  auto p = matmul(x, x), q = matmul(x, x, false, true);  // other attributes
  auto r1 = random_uniform(g, {2}, dtype::float32, 0, 1, 3);
  auto r2 = random_uniform(g, {2}, dtype::float32, 0, 1, 3);
  auto o = optimize_graph(g, fetching({a, b, p, q, r1, r2}, {}, {x}));
  CHECK(o.report.deduplicated == 1);
  CHECK(o.sig.fetches[0] == o.sig.fetches[1]);
  CHECK(fetched_node(o, 0).name == "first_exp");
  CHECK(!(o.sig.fetches[2] == o.sig.fetches[3]));
  CHECK(!(o.sig.fetches[4] == o.sig.fetches[5]));
  session s(g);
  auto out = s.run({{x, floats({2, 2}, {0, 1, 2, 3})}}, {a, b});
  CHECK(same_bits(out[0], out[1]));
}

TEST_CASE("pass-throughs are removed unless fetched, waited on, or reading a variable") {
  graph g;
  auto x = placeholder(g, dtype::float32, {2, 3}, "x");
  auto passed = neg(identity(stop_gradient(reshape(x, {2, 3}))));
  auto fetched = identity(x, "fetched_identity");
  auto v = make_variable(constant(g, floats({2}, {1, 2})), "v");
  auto read = identity(v.value(), "read");
  operation waited_on;
  auto waited = identity(x * 3.0, "waited_on");
  {
    auto deps = g.control_dependencies({operation(&g, waited.ref().node)});
    waited_on = operation(&g, neg(x).ref().node);
  }
  auto o = optimize_graph(g, fetching({passed, fetched, read * 2.0}, {waited_on}, {x}));
  CHECK(o.report.bypassed == 3);  // reshape to the same shape, stop_gradient, identity
  CHECK(fetched_node(o, 0).inputs[0] == o.sig.feeds[0]);
  CHECK(fetched_node(o, 1).name == "fetched_identity");
  CHECK(o.g->find("read") != nullptr);
  CHECK(o.g->find("waited_on") != nullptr);
}

TEST_CASE("matmul or conv2d + bias_add + relu fuse where nothing else reads the steps between") {
  graph g;
  auto x = placeholder(g, dtype::float32, {4, 3}, "x");
  auto w = constant(g, floats({3, 2}, {1, -2, 3, -4, 5, -6}));
  auto bias = constant(g, floats({2}, {0.5f, -0.5f}));
  auto layer = relu(bias_add(matmul(x, w), bias), "layer");
  auto o = optimize_graph(g, fetching({layer}, {}, {x}));
  CHECK(o.report.fused == 1);
  CHECK(fetched_node(o, 0).op == "fused_matmul");
  CHECK(fetched_node(o, 0).name == "layer");
  CHECK(std::get<std::string>(fetched_node(o, 0).attrs.at("activation")) == "relu");

  // The sum before the relu is fetched too: only the product and the bias fuse.
  auto pre = bias_add(matmul(x, w), bias, "pre");
  auto both = optimize_graph(g, fetching({relu(pre), pre}, {}, {x}));
  CHECK(both.report.fused == 1);
  CHECK(fetched_node(both, 1).op == "fused_matmul");
  CHECK(std::get<std::string>(fetched_node(both, 1).attrs.at("activation")) == "none");
  // The product has a second reader: nothing fuses.
  auto product = matmul(x, w);
  auto shared = optimize_graph(g, fetching({relu(bias_add(product, bias)), product}, {}, {x}));
  CHECK(shared.report.fused == 0);

  auto image = placeholder(g, dtype::float32, {1, 4, 4, 2}, "image");
  auto filter = constant(g, tensor(dtype::float32, {3, 3, 2, 5}));
  auto conv = relu(
      bias_add(conv2d(image, filter, {1, 1}, "SAME"), constant(g, tensor(dtype::float32, {5}))));
  auto c = optimize_graph(g, fetching({conv}, {}, {image}));
  CHECK(c.report.fused == 1);
  CHECK(fetched_node(c, 0).op == "fused_conv2d");
  CHECK(!optimize_graph(g, fetching({conv}, {}, {image}), {.fuse = false}).report.fused);
}

// The operands of a weight gradient's product: a sine and a cosine wave.
std::pair<tensor, tensor> wave_operands(shape a_dims, shape b_dims) {
  tensor a(dtype::float32, std::move(a_dims)), b(dtype::float32, std::move(b_dims));
  for (int64_t i = 0; i < a.num_elements(); ++i)
    a.mutable_data<float>()[i] = std::sin(float(i) * 0.7f);
  for (int64_t i = 0; i < b.num_elements(); ++i)
    b.mutable_data<float>()[i] = std::cos(float(i) * 1.3f);
  return {a, b};
}

tensor random_floats(shape dims, uint32_t seed, float lo = -1, float hi = 1) {
  tensor t(dtype::float32, std::move(dims));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.mutable_data<float>()[i] = u(rng);
  return t;
}

TEST_CASE("an inference batch norm after a convolution folds into it, as an exported model's") {
  graph g;
  auto image = placeholder(g, dtype::float32, {2, 6, 6, 3}, "image");
  auto filter = constant(g, random_floats({3, 3, 3, 4}, 1));
  auto per_channel = [&](uint32_t seed, float lo, float hi) {
    return constant(g, random_floats({4}, seed, lo, hi));
  };
  auto scale = per_channel(2, 0.5f, 2), offset = per_channel(3, -1, 1);
  auto mean = per_channel(4, -1, 1), variance = per_channel(5, 0.1f, 3);
  auto conv = conv2d(image, filter, {1, 1}, "SAME");
  batch_norm_options inference;
  inference.is_training = false;
  auto y = relu(fused_batch_norm(conv, scale, offset, mean, variance, inference).y, "layer");
  auto o = optimize_graph(g, fetching({y}, {}, {image}));
  CHECK(o.report.batch_norms_folded == 1);
  CHECK(count_op(o, "fused_batch_norm") == 0);
  CHECK(fetched_node(o, 0).op == "fused_conv2d");
  CHECK(fetched_node(o, 0).name == "layer");
  CHECK(std::get<std::string>(fetched_node(o, 0).attrs.at("activation")) == "relu");
  // The folded layer computes what the three ops did.
  auto x = random_floats({2, 6, 6, 3}, 6);
  session folded(g), as_built(g, {.optimize = false});
  auto a = folded.run({{image, x}}, {y})[0].to_vector<float>();
  auto b = as_built.run({{image, x}}, {y})[0].to_vector<float>();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-5));

  // The relu's reader an element-wise chain: the fold keeps the relu, the
  // chain starts after it.
  auto shift = placeholder(g, dtype::float32, {2, 6, 6, 4}, "shift");
  auto chained =
      mul(add(relu(fused_batch_norm(conv, scale, offset, mean, variance, inference).y), shift),
          shift, "chained");
  auto with_chain = optimize_graph(g, fetching({chained}, {}, {image, shift}));
  CHECK(with_chain.report.batch_norms_folded == 1);
  CHECK(with_chain.report.fused == 1);  // add and mul
  auto s = random_floats({2, 6, 6, 4}, 7);
  auto c1 = folded.run({{image, x}, {shift, s}}, {chained})[0].to_vector<float>();
  auto c2 = as_built.run({{image, x}, {shift, s}}, {chained})[0].to_vector<float>();
  for (size_t i = 0; i < c1.size(); ++i) CHECK(c1[i] == doctest::Approx(c2[i]).epsilon(1e-5));

  // Training mode, statistics from a variable, or a statistic fetched: no fold.
  batch_norm_options training;
  auto trained = fused_batch_norm(conv, scale, offset, {}, {}, training).y;
  CHECK(optimize_graph(g, fetching({trained}, {}, {image})).report.batch_norms_folded == 0);
  auto moving = make_variable(fill(g, {4}, 1.0), "moving_variance");
  auto live = fused_batch_norm(conv, scale, offset, mean, moving.value(), inference).y;
  CHECK(optimize_graph(g, fetching({live}, {}, {image})).report.batch_norms_folded == 0);
  auto both = fused_batch_norm(conv, scale, offset, mean, variance, inference);
  CHECK(optimize_graph(g, fetching({both.y, both.saved_inv_std}, {}, {image}))
            .report.batch_norms_folded == 0);
  // A negative variance is left to fail in its step, naming its node.
  auto negative = constant(g, floats({4}, {1, -1, 1, 1}));
  auto bad = fused_batch_norm(conv, scale, offset, mean, negative, inference, "bad_bn").y;
  CHECK(optimize_graph(g, fetching({bad}, {}, {image})).report.batch_norms_folded == 0);
  CHECK_THROWS_WITH(folded.run({{image, x}}, {bad}), doctest::Contains("bad_bn"));
}

TEST_CASE("only the fused ops every device runs are made (a GPU runtime's fused_matmul)") {
  graph g;
  auto x = placeholder(g, dtype::float32, {4, 3}, "x");
  auto w = constant(g, floats({3, 2}, {1, -2, 3, -4, 5, -6}));
  auto bias = constant(g, floats({2}, {0.5f, -0.5f}));
  auto layer = relu(bias_add(matmul(x, w), bias), "layer");
  auto chain = mul(exp(neg(layer)), tanh(layer), "chain");
  graph_optimizer_options gpu_like;
  std::vector<std::string> asked;
  gpu_like.runs_everywhere = [&](const std::string& op) {
    asked.push_back(op);
    return op == "fused_matmul";
  };
  auto o = optimize_graph(g, fetching({chain}, {}, {x}), gpu_like);
  CHECK(o.report.fused == 1);
  CHECK(o.g->find("layer")->op == "fused_matmul");
  CHECK(fetched_node(o, 0).op == "mul");  // the element-wise chain stays as built
  CHECK(std::find(asked.begin(), asked.end(), "fused_elementwise") != asked.end());
  gpu_like.runs_everywhere = [](const std::string&) { return false; };
  CHECK(optimize_graph(g, fetching({chain}, {}, {x}), gpu_like).report.fused == 0);
}

TEST_CASE("chains of element-wise ops of one shape fuse into one pass") {
  graph g;
  auto x = placeholder(g, dtype::float32, {1000}, "x");
  auto z = placeholder(g, dtype::float32, {1000}, "z");
  auto t = tanh(x + z, "t");
  auto y = mul(exp(neg(x)), t, "y");
  auto o = optimize_graph(g, fetching({y}, {}, {x, z}));
  CHECK(o.report.fused == 1);
  CHECK(o.report.nodes_before == 7);
  CHECK(o.report.nodes_after == 3);
  CHECK(fetched_node(o, 0).op == "fused_elementwise");
  CHECK(fetched_node(o, 0).name == "y");
  CHECK(std::get<std::string>(fetched_node(o, 0).attrs.at("ops")) ==
        "add,tanh,neg,exp,mul");  // graph order

  // A fetched value inside ends one chain and roots another.
  auto split = optimize_graph(g, fetching({y, t}, {}, {x, z}));
  CHECK(split.report.fused == 2);
  CHECK(fetched_node(split, 1).op == "fused_elementwise");
  // A broadcast operand stays outside: only the relu and the exp chain.
  auto b = placeholder(g, dtype::float32, {1}, "b");
  auto broadcast = exp(relu(x + b));
  auto partly = optimize_graph(g, fetching({broadcast}, {}, {x, b}));
  CHECK(count_op(partly, "add") == 1);
  CHECK(count_op(partly, "fused_elementwise") == 1);

  tensor xs(dtype::float32, {1000}), zs(dtype::float32, {1000});
  for (int i = 0; i < 1000; ++i) {
    xs.mutable_data<float>()[i] = float(i - 500) / 50.0f;
    zs.mutable_data<float>()[i] = float(i % 7) - 3.0f;
  }
  auto rt = std::make_shared<runtime>(runtime_options{.gpus = 0});
  session fused(g, rt), as_built(g, rt, {.optimize = false});
  feed_list feeds{{x, xs}, {z, zs}};
  CHECK(same_bits(fused.run(feeds, {y})[0], as_built.run(feeds, {y})[0]));
}

TEST_CASE("session_options::optimize = false runs the graph as built") {
  graph g;
  auto x = placeholder(g, dtype::float32, {1, 3}, "x");
  auto w = constant(g, floats({3, 2}, {1, -2, 3, -4, 5, -6}));
  auto y = relu(bias_add(matmul(x, w, false, false, "product"), constant(g, floats({2}, {1, 1}))));
  auto rt = std::make_shared<runtime>(runtime_options{.gpus = 0});
  session optimized(g, rt), as_built(g, rt, {.optimize = false});
  feed_list feeds{{x, floats({1, 3}, {1, 2, 3})}};
  CHECK(same_bits(optimized.run(feeds, {y})[0], as_built.run(feeds, {y})[0]));
  auto has = [](session& s, const std::string& name) {
    for (auto& e : s.placement_log())
      if (e.node == name) return true;
    return false;
  };
  CHECK(!has(optimized, "product"));
  CHECK(has(as_built, "product"));
}

TEST_CASE("a runtime with an accelerator fuses what the accelerator runs (the stand-in: all)") {
  graph g;
  auto x = placeholder(g, dtype::float32, {1, 3}, "x");
  auto w = constant(g, floats({3, 2}, {1, -2, 3, -4, 5, -6}));
  auto y = relu(bias_add(matmul(x, w, false, false, "product"), constant(g, floats({2}, {1, 1}))));
  auto rt = std::make_shared<runtime>(runtime_options{.gpus = 0, .stand_in_devices = 1});
  session s(g, rt);
  s.run({{x, floats({1, 3}, {1, 2, 3})}}, {y});
  bool product_runs = false;
  for (auto& e : s.placement_log()) product_runs = product_runs || e.node == "product";
  CHECK_FALSE(product_runs);  // inside the fused_matmul
}

// The Fashion-MNIST models' Adam training graphs: how many nodes a step runs
// before and after, and the same losses with the optimizer on and off.
namespace {

struct training_graph {
  graph g;
  output images, labels, loss;
  operation train;
  explicit training_graph(const std::string& model, bool plain_sgd = false) {
    images = placeholder(g, dtype::float32, {32, 28, 28, 1}, "images");
    labels = placeholder(g, dtype::int32, {32}, "labels");
    auto net = models::make_classifier(g, model, 1);
    loss = models::mean_cross_entropy(net->logits(images), labels);
    train = plain_sgd ? sgd(0.05).minimize(loss) : adam(1e-3).minimize(loss);
  }
  std::vector<float> losses(session_options options) {
    auto rt = std::make_shared<runtime>(runtime_options{.gpus = 0});
    session s(g, rt, options);
    s.run({global_variables_initializer(g)});
    tensor x(dtype::float32, {32, 28, 28, 1});
    tensor y(dtype::int32, {32});
    for (int64_t i = 0; i < x.num_elements(); ++i)
      x.mutable_data<float>()[i] = float((i * 7919) % 256) / 255.0f;
    for (int64_t i = 0; i < y.num_elements(); ++i) y.mutable_data<int32_t>()[i] = int32_t(i % 10);
    std::vector<float> out;
    for (int step = 0; step < 4; ++step)
      out.push_back(s.run({{images, x}, {labels, y}}, {loss}, {train})[0].data<float>()[0]);
    return out;
  }
};

}  // namespace

TEST_CASE("the MLP's and CNN's training steps run fewer nodes and compute the same losses") {
  struct expected {
    std::string model;
    size_t before, after, fused;
  };
  // The MLP: its two hidden layers fuse with bias and relu, and Adam takes the
  // three weight gradients' products in place. The CNN: two conv layers and
  // fc1 fuse with their bias and relu, both pools' gradients with the relu's
  // before them, and Adam takes fc1's and fc2's weight gradients.
  for (auto& e : {expected{"mlp", 44, 32, 6}, expected{"cnn", 60, 45, 8}}) {
    CAPTURE(e.model);
    training_graph t(e.model);
    run_signature sig = fetching({t.loss}, {t.train}, {t.images, t.labels});
    auto o = optimize_graph(t.g, sig);
    MESSAGE(e.model << ": " << o.report.nodes_before << " -> " << o.report.nodes_after
                    << " nodes (folded " << o.report.folded << ", deduplicated "
                    << o.report.deduplicated << ", bypassed " << o.report.bypassed << ", fused "
                    << o.report.fused << ")");
    CHECK(o.report.nodes_before == e.before);
    CHECK(o.report.nodes_after == e.after);
    CHECK(o.report.fused == e.fused);
    CHECK(count_op(o, "bias_add") == 0);
    CHECK(count_op(o, "ones_like") == 0);
    CHECK(count_op(o, "max_pool_grad") == 0);
    auto on = t.losses({}), off = t.losses({.optimize = false});
    REQUIRE(on.size() == off.size());
    // Not bit for bit: the convolutions' filter gradients add per-thread
    // partial sums in the order the threads finish, run to run.
    for (size_t i = 0; i < on.size(); ++i) CHECK(on[i] == doctest::Approx(off[i]).epsilon(1e-5));
    CHECK(on.back() < on.front());
  }
}

TEST_CASE("relu_grad of a max_pool_grad of the same input fuses into max_pool_relu_grad") {
  graph g;
  auto x = placeholder(g, dtype::float32, {2, 4, 4, 3}, "x");
  auto y = max_pool(x, {2, 2}, {2, 2}, "VALID");
  auto dy = placeholder(g, dtype::float32, {2, 2, 2, 3}, "dy");
  auto pool_grad = max_pool_grad(x, y, dy, {2, 2}, {2, 2}, "VALID", "pool_grad");
  auto masked = relu_grad(pool_grad, x, "masked");
  auto o = optimize_graph(g, fetching({masked}, {}, {x, dy}));
  CHECK(o.report.fused == 1);
  CHECK(fetched_node(o, 0).op == "max_pool_relu_grad");
  CHECK(fetched_node(o, 0).name == "masked");
  CHECK(count_op(o, "max_pool_grad") == 0);
  CHECK(count_op(o, "relu_grad") == 0);

  // The pool's gradient is fetched too, or the relu masks another tensor:
  // nothing fuses.
  CHECK(optimize_graph(g, fetching({masked, pool_grad}, {}, {x, dy})).report.fused == 0);
  auto other = relu_grad(pool_grad, neg(x));
  CHECK(count_op(optimize_graph(g, fetching({other}, {}, {x, dy})), "max_pool_relu_grad") == 0);

  // The same values as the two ops, bit for bit (a select per element).
  tensor xv = random_floats({2, 4, 4, 3}, 11), dyv = random_floats({2, 2, 2, 3}, 12);
  session fused(g), as_built(g, {.optimize = false});
  auto a = fused.run({{x, xv}, {dy, dyv}}, {masked})[0];
  auto b = as_built.run({{x, xv}, {dy, dyv}}, {masked})[0];
  CHECK(same_bits(a, b));
}

// apply_sgd of a weight gradient (a matmul that nothing else reads) becomes
// apply_sgd_matmul: the variable takes the product in place.
TEST_CASE("plain SGD takes a weight gradient's product into the variable in place") {
  training_graph t("mlp", /*plain_sgd=*/true);
  run_signature sig = fetching({t.loss}, {t.train}, {t.images, t.labels});
  auto o = optimize_graph(t.g, sig);
  CHECK(count_op(o, "apply_sgd_matmul") == 3);  // the three layers' weights
  CHECK(count_op(o, "apply_sgd") == 3);         // their biases
  CHECK(count_op(optimize_graph(t.g, sig, {.fuse = false}), "apply_sgd_matmul") == 0);
  // Bit for bit: matmul's block products, applied by apply_sgd's loop.
  auto on = t.losses({}), off = t.losses({.optimize = false});
  CHECK(on == off);
  CHECK(on.back() < on.front());
}

// apply_adam likewise becomes apply_adam_matmul, with apply_adam's bits: its
// moments and step count as the unfused update leaves them.
TEST_CASE("Adam takes a weight gradient's product into the variable in place") {
  for (const char* model : {"mlp", "cnn"}) {
    CAPTURE(model);
    training_graph t(model);
    run_signature sig = fetching({t.loss}, {t.train}, {t.images, t.labels});
    auto o = optimize_graph(t.g, sig);
    CHECK(count_op(o, "apply_adam_matmul") == (std::string(model) == "mlp" ? 3 : 2));
    CHECK(count_op(optimize_graph(t.g, sig, {.fuse = false}), "apply_adam_matmul") == 0);
  }
  // One layer's update, fused and not, over three steps: the weights and both
  // moments bit for bit. Transposed operands and a blocked product.
  graph g;
  auto x = placeholder(g, dtype::float32, {64, 300}, "x");
  auto dy = placeholder(g, dtype::float32, {64, 130}, "dy");
  std::vector<float> start(300 * 130);
  for (size_t i = 0; i < start.size(); ++i) start[i] = float(i % 23) * 0.11f - 1.2f;
  auto w = make_variable(constant(g, floats({300, 130}, start)), "w");
  auto train = adam(0.01).apply_gradients({{matmul(x, dy, true, false), w}});
  CHECK(count_op(optimize_graph(g, fetching({}, {train}, {x, dy})), "apply_adam_matmul") == 1);
  auto [xv, dyv] = wave_operands(x.dims(), dy.dims());
  auto trained = [&](session_options options) {
    session s(g, options);
    s.run({global_variables_initializer(g)});
    for (int step = 0; step < 3; ++step) s.run({{x, xv}, {dy, dyv}}, {}, {train});
    return s.run({}, {w.value()})[0];
  };
  CHECK(same_bits(trained(session_options{}), trained({.optimize = false})));
  // With a weight decay, it stays apply_adam.
  auto decayed = adam(0.01, 0.9, 0.999, 1e-8, {.weight_decay = 0.01})
                     .apply_gradients({{matmul(x, dy, true, false), w}});
  CHECK(count_op(optimize_graph(g, fetching({}, {decayed}, {x, dy})), "apply_adam_matmul") == 0);
}

TEST_CASE("apply_sgd_matmul adds every transpose of the product, and only where it may") {
  struct dims3 {
    int64_t m, n, k;
  };
  // Small (one unblocked product, as matmul's) and blocked, short and long sums.
  for (auto d : {dims3{7, 3, 5}, dims3{300, 200, 16}, dims3{130, 70, 300}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        CAPTURE(d.m);
        CAPTURE(d.k);
        CAPTURE(ta);
        CAPTURE(tb);
        graph g;
        auto a = placeholder(g, dtype::float32, ta ? shape{d.k, d.m} : shape{d.m, d.k}, "a");
        auto b = placeholder(g, dtype::float32, tb ? shape{d.n, d.k} : shape{d.k, d.n}, "b");
        std::vector<float> start(static_cast<size_t>(d.m * d.n));
        for (size_t i = 0; i < start.size(); ++i) start[i] = float(i % 17) * 0.37f - 2.1f;
        auto w = make_variable(constant(g, floats({d.m, d.n}, start)), "w");
        auto train = sgd(0.03).apply_gradients({{matmul(a, b, ta, tb), w}});
        auto [av, bv] = wave_operands(a.dims(), b.dims());
        auto updated = [&](session_options options) {
          session s(g, options);
          s.run({global_variables_initializer(g)});
          s.run({{a, av}, {b, bv}}, {}, {train});
          return s.run({}, {w.value()})[0];
        };
        auto o = optimize_graph(g, fetching({}, {train}, {a, b}));
        CHECK(count_op(o, "apply_sgd_matmul") == 1);
        CHECK(same_bits(updated(session_options{}), updated({.optimize = false})));
      }
  // A product read twice (fetched too) stays a node; so does a scaled gradient.
  graph g;
  auto a = placeholder(g, dtype::float32, {4, 6}, "a");
  auto w = make_variable(constant(g, floats({6, 6}, std::vector<float>(36, 0.0f))), "w");
  auto grad = matmul(a, a, true, false);
  auto train = sgd(0.1).apply_gradients({{grad, w}});
  CHECK(count_op(optimize_graph(g, fetching({grad}, {train}, {a})), "apply_sgd_matmul") == 0);
  auto decayed = sgd(0.1, {.weight_decay = 0.01}).apply_gradients({{matmul(a, a, true, false), w}});
  CHECK(count_op(optimize_graph(g, fetching({}, {decayed}, {a})), "apply_sgd_matmul") == 0);
  // Built by hand, it names what does not fit.
  auto lr = scalar<float>(g, 0.1f);
  CHECK(error_of([&] {
          make_op("apply_sgd_matmul", {w.value(), a, a, lr});
        }).find("inner dimensions differ") != std::string::npos);
  CHECK(error_of([&] {
          make_op("apply_sgd_matmul", {w.value(), a, a, lr}, {{"transpose_b", true}});
        }).find("does not match variable") != std::string::npos);
}
