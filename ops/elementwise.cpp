#include "ops/elementwise.hpp"

#include <algorithm>
#include <map>
#include <vector>

#include "devices/cpu/parallel.hpp"
#include "ops/op_util.hpp"

namespace actorflow {

namespace {

std::map<std::string, float_unary_fn>& unaries() {
  static std::map<std::string, float_unary_fn> fns;
  return fns;
}

// The binary ops' float32 loops: the same IEEE operation per element as
// their kernels' loops on equal shapes.
template <class F>
float_binary_fn binary_loop(F f) {
  return [f](const float* __restrict a, const float* __restrict b, float* __restrict y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
  };
}

const std::map<std::string, float_binary_fn>& binaries() {
  static const std::map<std::string, float_binary_fn> fns{
      {"add", binary_loop([](float x, float y) { return x + y; })},
      {"sub", binary_loop([](float x, float y) { return x - y; })},
      {"mul", binary_loop([](float x, float y) { return x * y; })},
      {"div", binary_loop([](float x, float y) { return x / y; })},
  };
  return fns;
}

// One step of a program: its function and where its operands come from.
struct step {
  const float_unary_fn* unary = nullptr;
  const float_binary_fn* binary = nullptr;
  int64_t a = -1, b = -1;
};

std::vector<step> parse_program(const std::string& op, const attr_map& attrs, size_t inputs) {
  auto names = get_attr<std::string>(attrs, "ops", op);
  auto operands = get_attr<std::vector<int64_t>>(attrs, "operands", op);
  std::vector<step> steps;
  for (size_t begin = 0; begin <= names.size();) {
    size_t end = std::min(names.find(',', begin), names.size());
    const std::string name = names.substr(begin, end - begin);
    begin = end + 1;
    step s;
    s.unary = find_float_unary(name);
    s.binary = find_float_binary(name);
    if (!s.unary && !s.binary) fail(op, "step '" + name + "' is not a fusable element-wise op");
    steps.push_back(s);
  }
  if (steps.empty() || operands.size() != 2 * steps.size())
    fail(op, "expects two operands per step, got " + std::to_string(operands.size()) + " for " +
                 std::to_string(steps.size()) + " steps");
  for (size_t i = 0; i < steps.size(); ++i) {
    auto& s = steps[i];
    s.a = operands[2 * i];
    s.b = operands[2 * i + 1];
    const int64_t known = int64_t(inputs + i);  // inputs, then earlier steps
    if (s.a < 0 || s.a >= known || (s.binary ? s.b < 0 || s.b >= known : s.b != -1))
      fail(op, "step " + std::to_string(i) + " names an operand it cannot read");
  }
  return steps;
}

std::vector<tensor_spec> infer_fused_elementwise(const shape_context& c) {
  parse_program(c.op, c.attrs, c.inputs.size());
  for (auto& in : c.inputs)
    if (in.type != dtype::float32 || !(in.dims == c.inputs[0].dims))
      c.fail("expects float32 inputs of one shape, got " + in.to_string() + " beside " +
             c.inputs[0].to_string());
  return {c.inputs[0]};
}

// Elements per block: every step's block of a thread stays in L1/L2.
constexpr int64_t block = 2048;

void fused_elementwise_kernel(kernel_context& ctx) {
  auto steps = parse_program(ctx.op, ctx.attrs, ctx.inputs.size());
  const size_t inputs = ctx.inputs.size();
  std::vector<const float*> in;
  for (auto& t : ctx.inputs) {
    if (t.type() != dtype::float32 || !(t.dims() == ctx.inputs[0].dims()))
      ctx.fail("expects float32 inputs of one shape");
    in.push_back(t.data<float>());
  }
  tensor& out = ctx.allocate_output(0, dtype::float32, ctx.inputs[0].dims());
  float* y = out.mutable_data<float>();
  parallel_for(out.num_elements(), parallel_grain, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scratch;  // kept: no allocation per firing
    scratch.resize(steps.size() * block);
    for (int64_t b = begin; b < end; b += block) {
      const int64_t n = std::min(block, end - b);
      auto operand = [&](int64_t ref) {
        return size_t(ref) < inputs ? in[size_t(ref)] + b
                                    : scratch.data() + (size_t(ref) - inputs) * block;
      };
      for (size_t i = 0; i < steps.size(); ++i) {
        float* dst = i + 1 == steps.size() ? y + b : scratch.data() + i * block;
        if (steps[i].unary)
          (*steps[i].unary)(operand(steps[i].a), dst, n);
        else
          (*steps[i].binary)(operand(steps[i].a), operand(steps[i].b), dst, n);
      }
    }
  });
}

const op_registrar registration({.name = "fused_elementwise",
                                 .num_inputs = -1,
                                 .min_inputs = 1,
                                 .infer = infer_fused_elementwise,
                                 .kernel = fused_elementwise_kernel,
                                 .summary = "element-wise float32 ops in one pass, made by the "
                                            "graph optimizer after gradients are built",
                                 .not_differentiable = true});

}  // namespace

float_unary_registrar::float_unary_registrar(const std::string& op, float_unary_fn fn) {
  unaries()[op] = std::move(fn);
}

const float_unary_fn* find_float_unary(const std::string& op) {
  auto it = unaries().find(op);
  return it == unaries().end() ? nullptr : &it->second;
}

const float_binary_fn* find_float_binary(const std::string& op) {
  auto it = binaries().find(op);
  return it == binaries().end() ? nullptr : &it->second;
}

}  // namespace actorflow
