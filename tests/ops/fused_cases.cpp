// Cases for the ops the graph optimizer makes (fused_matmul, fused_conv2d,
// fused_elementwise):
// hand-computed values and errors, then the guarantee the optimizer relies on:
// on random operands of sizes that take the parallel, library and chunked
// paths, a fused op gives the same bits as its ops run one by one.
#include <cmath>
#include <cstring>
#include <random>

#include "ops/op_cases.hpp"

namespace actorflow::testing {
namespace {

tensor random_floats(shape dims, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  tensor t(dtype::float32, std::move(dims));
  for (int64_t i = 0; i < t.num_elements(); ++i) t.mutable_data<float>()[i] = d(rng);
  return t;
}

// Infinities, NaN, signed zeros, denormals and exp's range ends every 97 elements.
tensor with_specials(tensor t) {
  const float specials[] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1e-40f, -1e-40f, 88.7f, -104.f};
  float* p = t.mutable_data<float>();
  for (int64_t i = 0, k = 0; i < t.num_elements(); i += 97, ++k) p[i] = specials[k % 9];
  return t;
}

// The same bits in every element, NaN aside: a NaN's sign is whichever
// operand the compiler put first in a commutative product, in each loop its own.
void check_same_bits(const tensor& fused, const tensor& unfused) {
  REQUIRE(fused.dims() == unfused.dims());
  const float *f = fused.data<float>(), *u = unfused.data<float>();
  int64_t differing = 0;
  for (int64_t i = 0; i < fused.num_elements(); ++i)
    if (std::memcmp(f + i, u + i, sizeof(float)) != 0 && !(std::isnan(f[i]) && std::isnan(u[i])))
      if (differing++ == 0) MESSAGE("element " << i << ": " << f[i] << " against " << u[i]);
  CHECK(differing == 0);
}

// `op`'s product (matmul or conv2d) of x and w, then bias_add, then the activation.
tensor one_by_one(const std::string& op, const tensor& x, const tensor& w, const tensor& bias,
                  attr_map attrs, const std::string& act) {
  attrs.erase("activation");
  auto y = run_kernel(op, {x, w}, attrs)[0];
  y = run_kernel("bias_add", {y, bias})[0];
  return act == "relu" ? run_kernel("relu", {y})[0] : y;
}

op_case matches_one_by_one(const std::string& fused, const std::string& op, tensor x, tensor w,
                           tensor bias, attr_map attrs, const std::string& label) {
  const std::string act = get_attr<std::string>(attrs, "activation", fused);
  return {.op = fused,
          .label = label + " " + act + ": the bits of " + op + ", bias_add, " + act,
          .inputs = {x, w, bias},
          .attrs = attrs,
          .check = [=](const std::vector<tensor>& out) {
            check_same_bits(out.at(0), one_by_one(op, x, w, bias, attrs, act));
          }};
}

attr_map product_attrs(bool ta, bool tb, const std::string& act) {
  return {{"transpose_a", ta}, {"transpose_b", tb}, {"activation", act}};
}

attr_map conv_attrs(std::vector<int64_t> strides, const std::string& padding,
                    const std::string& act) {
  return {{"strides", std::move(strides)}, {"padding", padding}, {"activation", act}};
}

attr_map chain_attrs(const std::string& ops, std::vector<int64_t> operands) {
  return {{"ops", ops}, {"operands", std::move(operands)}};
}

const tensor a23 = make<float>({2, 3}, {1, 2, 3, 4, 5, 6});
const tensor b32 = make<float>({3, 2}, {7, 8, 9, 10, 11, 12});  // a23 x b32 = {58 64; 139 154}
const tensor bias2 = make<float>({2}, {-100, 1});

const op_case_registrar fixed_cases({
    {.op = "fused_matmul",
     .label = "(2,3)x(3,2) + bias, relu",
     .inputs = {a23, b32, bias2},
     .attrs = product_attrs(false, false, "relu"),
     .expected = {make<float>({2, 2}, {0, 65, 39, 155})}},
    {.op = "fused_matmul",
     .label = "(2,3)x(3,2) + bias, no activation",
     .inputs = {a23, b32, bias2},
     .attrs = product_attrs(false, false, "none"),
     .expected = {make<float>({2, 2}, {-42, 65, 39, 155})}},
    {.op = "fused_matmul",
     .label = "transpose_a and transpose_b",
     .inputs = {make<float>({3, 2}, {1, 4, 2, 5, 3, 6}), make<float>({2, 3}, {7, 9, 11, 8, 10, 12}),
                bias2},
     .attrs = product_attrs(true, true, "relu"),
     .expected = {make<float>({2, 2}, {0, 65, 39, 155})}},
    {.op = "fused_matmul",
     .label = "float64",
     .inputs = {make<double>({1, 2}, {1, -2}), make<double>({2, 2}, {1, 2, 3, 4}),
                make<double>({2}, {0.5, 0.5})},
     .attrs = product_attrs(false, false, "relu"),
     .expected = {make<double>({1, 2}, {0, 0})}},
    {.op = "fused_matmul",
     .label = "bias length differs",
     .inputs = {a23, b32, make<float>({3}, {1, 2, 3})},
     .attrs = product_attrs(false, false, "relu"),
     .expect_error = "bias float32(3) does not match the product float32(2,2)"},
    {.op = "fused_matmul",
     .label = "unknown activation",
     .inputs = {a23, b32, bias2},
     .attrs = product_attrs(false, false, "gelu"),
     .expect_error = "unknown activation 'gelu' (expected none or relu)"},
    {.op = "fused_matmul",
     .label = "integer operands",
     .inputs = {make<int32_t>({1, 1}, {1}), make<int32_t>({1, 1}, {1}), make<int32_t>({1}, {1})},
     .attrs = product_attrs(false, false, "relu"),
     .expect_error = "expects float operands, got int32(1,1)"},
    {.op = "fused_matmul",
     .label = "batched operands",
     .inputs = {tensor(dtype::float32, {2, 2, 3}), tensor(dtype::float32, {2, 3, 2}), bias2},
     .attrs = product_attrs(false, false, "relu"),
     .expect_error = "expects matrices"},
    {.op = "fused_conv2d",
     .label = "1x2x2x1 * 1x1x1x2 + bias, relu",
     .inputs = {make<float>({1, 2, 2, 1}, {1, -2, 3, -4}), make<float>({1, 1, 1, 2}, {1, -1}),
                make<float>({2}, {0.5f, 0})},
     .attrs = conv_attrs({1, 1}, "VALID", "relu"),
     .expected = {make<float>({1, 2, 2, 2}, {1.5f, 0, 0, 2, 3.5f, 0, 0, 4})}},
    {.op = "fused_elementwise",
     .label = "relu(x + z)",
     .inputs = {make<float>({3}, {1, -2, 3}), make<float>({3}, {0.5f, 0.5f, 0.5f})},
     .attrs = chain_attrs("add,relu", {0, 1, 2, -1}),
     .expected = {make<float>({3}, {1.5f, 0, 3.5f})}},
    {.op = "fused_elementwise",
     .label = "an input read by two steps, a step read twice: (x * x) / x",
     .inputs = {make<float>({2}, {2, -4})},
     .attrs = chain_attrs("mul,div", {0, 0, 1, 0}),
     .expected = {make<float>({2}, {2, -4})}},
    {.op = "fused_elementwise",
     .label = "a step that is not element-wise",
     .inputs = {make<float>({2}, {1, 2})},
     .attrs = chain_attrs("matmul", {0, 0}),
     .expect_error = "step 'matmul' is not a fusable element-wise op"},
    {.op = "fused_elementwise",
     .label = "a step reading a later one",
     .inputs = {make<float>({2}, {1, 2})},
     .attrs = chain_attrs("neg,neg", {2, -1, 0, -1}),
     .expect_error = "step 0 names an operand it cannot read"},
    {.op = "fused_elementwise",
     .label = "operands missing",
     .inputs = {make<float>({2}, {1, 2})},
     .attrs = chain_attrs("neg,neg", {0, -1}),
     .expect_error = "expects two operands per step"},
    {.op = "fused_elementwise",
     .label = "inputs of two shapes",
     .inputs = {make<float>({2}, {1, 2}), make<float>({3}, {1, 2, 3})},
     .attrs = chain_attrs("add", {0, 1}),
     .expect_error = "expects float32 inputs of one shape"},
    {.op = "fused_conv2d",
     .label = "bias of another channel count",
     .inputs = {make<float>({1, 2, 2, 1}, {1, -2, 3, -4}), make<float>({1, 1, 1, 2}, {1, -1}),
                make<float>({3}, {0, 0, 0})},
     .attrs = conv_attrs({1, 1}, "VALID", "relu"),
     .expect_error = "does not match"},
});

// Random operands: built on first use, off the static initializers.
std::vector<op_case> random_cases() {
  std::vector<op_case> cases;
  uint64_t seed = 1;
  auto product = [&](int64_t m, int64_t n, int64_t k, bool ta, bool tb, const std::string& act) {
    auto a = random_floats(ta ? shape{k, m} : shape{m, k}, seed++);
    auto b = random_floats(tb ? shape{n, k} : shape{k, n}, seed++);
    cases.push_back(matches_one_by_one(
        "fused_matmul", "matmul", a, b, random_floats({n}, seed++), product_attrs(ta, tb, act),
        "(" + std::to_string(m) + "," + std::to_string(k) + ")x(" + std::to_string(k) + "," +
            std::to_string(n) + ")" + (ta ? " transpose_a" : "") + (tb ? " transpose_b" : "")));
  };
  product(5, 7, 3, false, false, "relu");       // one small call
  product(64, 512, 784, false, false, "relu");  // the MLP's first layer, split over threads
  product(300, 70, 513, true, false, "none");   // taller than wide: row blocks
  product(96, 130, 200, false, true, "relu");
  auto conv = [&](shape x, shape w, std::vector<int64_t> strides, const std::string& padding,
                  const std::string& act) {
    const int64_t channels = w[3];
    // One statement each: the seeds in a fixed order.
    auto input = random_floats(x, seed++);
    auto filter = random_floats(w, seed++);
    auto bias = random_floats({channels}, seed++);
    cases.push_back(matches_one_by_one("fused_conv2d", "conv2d", input, filter, bias,
                                       conv_attrs(strides, padding, act),
                                       x.to_string() + " * " + w.to_string() + " " + padding));
  };
  conv({8, 28, 28, 1}, {5, 5, 1, 32}, {1, 1}, "SAME", "relu");       // the CNN's first layer
  conv({4, 14, 14, 32}, {5, 5, 32, 64}, {1, 1}, "SAME", "relu");     // its second
  conv({2, 9, 9, 16}, {1, 1, 16, 24}, {1, 1}, "VALID", "none");      // pointwise: no patches
  conv({16, 4, 4, 512}, {1, 1, 512, 1024}, {1, 1}, "SAME", "relu");  // pointwise, over threads
  conv({8, 7, 7, 512}, {1, 1, 512, 640}, {2, 2}, "SAME", "relu");    // 1x1 at stride 2, whole
  conv({2, 16, 16, 128}, {3, 3, 128, 256}, {2, 2}, "SAME", "relu");  // a filter over 1 MB
  // 3x3 at unit strides: Winograd, the epilogue over its result.
  conv({2, 6, 6, 512}, {3, 3, 512, 520}, {1, 1}, "SAME", "relu");
  conv({3, 7, 5, 32}, {3, 3, 32, 48}, {1, 1}, "VALID", "relu");
  // exp(-x) * tanh(x + z) on 100003 elements (threads' chunks, blocks and a
  // tail), special values among them, against the ops one by one.
  auto x = with_specials(random_floats({100003}, seed++));
  auto z = random_floats({100003}, seed++);
  cases.push_back({.op = "fused_elementwise",
                   .label = "exp(-x) * tanh(x + z): the bits of the ops one by one",
                   .inputs = {x, z},
                   .attrs = chain_attrs("neg,exp,add,tanh,mul", {0, -1, 2, -1, 0, 1, 4, -1, 3, 5}),
                   .check = [=](const std::vector<tensor>& out) {
                     auto e = run_kernel("exp", {run_kernel("neg", {x})[0]})[0];
                     auto t = run_kernel("tanh", {run_kernel("add", {x, z})[0]})[0];
                     check_same_bits(out.at(0), run_kernel("mul", {e, t})[0]);
                   }});
  return cases;
}
const op_case_registrar random_product_cases(random_cases);

}  // namespace
}  // namespace actorflow::testing
