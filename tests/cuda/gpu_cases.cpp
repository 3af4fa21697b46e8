// The GPU kernels' case table (see cuda_test_util.hpp).
#include <cmath>

#include "cuda/cuda_test_util.hpp"

namespace actorflow::testing {

namespace {

// Every element of a float tensor at position k * step set to `v` (NaN, inf).
tensor with_value_every(tensor t, int64_t step, double v) {
  visit_floating(t.type(), "test", [&](auto tag) {
    using T = decltype(tag);
    T* p = t.mutable_data<T>();
    for (int64_t i = 0; i < t.num_elements(); i += step) p[i] = static_cast<T>(v);
  });
  return t;
}

std::string label_of(const std::string& what, dtype t) { return what + " " + dtype_name(t); }

attr_map axes_attrs(std::vector<int64_t> axes, bool keep_dims = false) {
  return {{"axes", std::move(axes)}, {"keep_dims", keep_dims}};
}

}  // namespace

// The cases of every op that has a GPU kernel; the test fails for a kernel without any.
std::map<std::string, case_list> gpu_cases() {
  random_source rnd;
  std::map<std::string, case_list> cases;
  auto unary_cases = [&](const std::string& op, const std::vector<dtype>& types, double lo,
                         double hi) {
    for (dtype t : types) {
      cases[op].push_back({label_of("(3,257)", t), {rnd.uniform(t, shape{3, 257}, lo, hi)}});
      cases[op].push_back({label_of("scalar", t), {rnd.uniform(t, shape{}, lo, hi)}});
    }
  };
  for (auto op : {"exp", "sigmoid", "tanh"}) unary_cases(op, floats, -5, 5);
  for (auto op : {"log", "sqrt", "rsqrt"}) unary_cases(op, floats, 0.01, 10);
  unary_cases("reciprocal", floats, 0.1, 4);
  for (auto op : {"neg", "abs", "square", "sign"}) unary_cases(op, signed_nums, -100, 100);
  unary_cases("relu", nums, -100, 100);
  unary_cases("logical_not", {dtype::boolean}, 0, 1);
  for (dtype t : floats)
    cases["relu"].push_back(
        {label_of("NaN passes", t), {with_value_every(rnd.uniform(t, shape{64}), 7, NAN)}});

  // cast: saturation, NaN -> 0, to and from bool
  auto big = with_value_every(rnd.uniform(dtype::float32, shape{200}, -1e10, 1e10), 9, NAN);
  for (dtype to : {dtype::int32, dtype::int64, dtype::uint8, dtype::boolean, dtype::float64})
    cases["cast"].push_back({std::string("float32 -> ") + dtype_name(to), {big}, {{"dtype", to}}});
  for (dtype from : {dtype::int64, dtype::boolean, dtype::uint8, dtype::float64})
    cases["cast"].push_back({std::string(dtype_name(from)) + " -> float32",
                             {rnd.uniform(from, shape{100}, -300, 300)},
                             {{"dtype", dtype::float32}}});
  cases["cast"].push_back({"int32 -> uint8 wraps",
                           {rnd.uniform(dtype::int32, shape{100}, -1000, 1000)},
                           {{"dtype", dtype::uint8}}});

  // Derivative helpers: same-shape pairs.
  for (dtype t : nums)
    cases["relu_grad"].push_back(
        {label_of("(dy, x)", t),
         {rnd.uniform(t, shape{5, 40}, 0, 50), rnd.uniform(t, shape{5, 40}, -50, 50)}});
  for (auto op : {"sigmoid_grad", "tanh_grad", "sqrt_grad", "rsqrt_grad", "reciprocal_grad"})
    for (dtype t : floats)
      cases[op].push_back({label_of("(y, dy)", t),
                           {rnd.uniform(t, shape{5, 40}, 0.1, 1), rnd.uniform(t, shape{5, 40})}});

  // Broadcasting binary ops.
  const std::vector<std::pair<shape, shape>> pairs{{shape{6, 40}, shape{6, 40}},
                                                   {shape{4, 1, 5}, shape{3, 1}},
                                                   {shape{}, shape{2, 3}},
                                                   {shape{2, 1, 3, 1, 2}, shape{1, 4, 1, 5, 2}},
                                                   {shape{0, 3}, shape{3}}};
  auto binary_cases = [&](const std::string& op, const std::vector<dtype>& types, double lo,
                          double hi, double blo, double bhi) {
    for (dtype t : types)
      for (auto& [a, b] : pairs)
        cases[op].push_back({label_of(a.to_string() + " with " + b.to_string(), t),
                             {rnd.uniform(t, a, lo, hi), rnd.uniform(t, b, blo, bhi)}});
  };
  for (auto op : {"add", "sub", "mul", "maximum", "minimum"})
    binary_cases(op, nums, -100, 100, -100, 100);
  binary_cases("div", floats, -10, 10, 0.5, 3);
  binary_cases("pow", floats, 0.1, 3, -2, 2);
  for (dtype t : floats)
    cases["pow"].push_back(
        {label_of("squares", t), {rnd.uniform(t, shape{50}), tensor(t, shape{})}});
  for (auto& c : cases["pow"])
    if (c.label.rfind("squares", 0) == 0)
      visit_floating(c.inputs[1].type(), "test",
                     [&](auto tag) { c.inputs[1].mutable_data<decltype(tag)>()[0] = 2; });
  for (auto op : {"maximum", "minimum"})
    for (dtype t : floats)
      cases[op].push_back({label_of("NaN wins", t),
                           {with_value_every(rnd.uniform(t, shape{30}), 4, NAN),
                            with_value_every(rnd.uniform(t, shape{30}), 3, NAN)}});
  for (auto op : {"equal", "not_equal"}) binary_cases(op, every, 0, 3, 0, 3);
  for (auto op : {"less", "less_equal", "greater", "greater_equal"})
    binary_cases(op, nums, 0, 3, 0, 3);
  for (auto op : {"logical_and", "logical_or"}) binary_cases(op, {dtype::boolean}, 0, 1, 0, 1);
  for (dtype t : every)
    cases["select"].push_back(
        {label_of("cond (4,1), a (4,5), b (5)", t),
         {rnd.uniform(dtype::boolean, shape{4, 1}), rnd.uniform(t, shape{4, 5}, 0, 100),
          rnd.uniform(t, shape{5}, 0, 100)}});

  // Array ops.
  for (dtype t : every) {
    auto x = rnd.uniform(t, shape{6, 4}, 0, 9);
    cases["reshape"].push_back(
        {label_of("(6,4) -> (-1,8)", t), {x}, {{"shape", std::vector<int64_t>{-1, 8}}}});
    cases["reshape_like"].push_back(
        {label_of("like (3,8)", t), {x, rnd.uniform(dtype::float32, shape{3, 8})}});
    cases["expand_dims"].push_back({label_of("axis 1", t), {x}, {{"axis", int64_t{1}}}});
    cases["squeeze"].push_back({label_of("(6,1,4)", t), {x.reshaped(shape{6, 1, 4})}});
    cases["identity"].push_back({label_of("(6,4)", t), {x}});
    cases["stop_gradient"].push_back({label_of("(6,4)", t), {x}});
    cases["zeros_like"].push_back({label_of("(6,4)", t), {x}});
    cases["ones_like"].push_back({label_of("(6,4)", t), {x}});
    cases["size"].push_back({label_of("(6,4)", t), {x}});
    cases["transpose"].push_back({label_of("(2,3,4) perm (2,0,1)", t),
                                  {x.reshaped(shape{2, 3, 4})},
                                  {{"perm", std::vector<int64_t>{2, 0, 1}}}});
    cases["transpose"].push_back({label_of("reversed", t), {x}});
    cases["broadcast_to"].push_back({label_of("(6,1,4) -> (6,5,4)", t),
                                     {x.reshaped(shape{6, 1, 4})},
                                     {{"shape", std::vector<int64_t>{6, 5, 4}}}});
    cases["broadcast_like"].push_back(
        {label_of("(4) like (3,4)", t),
         {rnd.uniform(t, shape{4}, 0, 9), rnd.uniform(dtype::float32, shape{3, 4})}});
    cases["fill"].push_back(
        {label_of("(3,5) of 1", t),
         {},
         {{"shape", std::vector<int64_t>{3, 5}}, {"dtype", t}, {"value", 1.0}}});
  }

  // Reductions: trailing, leading, middle and scattered axes, keep_dims, long rows and columns
  // (split into parts), empty inputs.
  const std::vector<std::pair<shape, std::vector<int64_t>>> reductions{
      {shape{4, 5, 6}, {}},   {shape{4, 5, 6}, {2}},    {shape{4, 5, 6}, {0}},
      {shape{4, 5, 6}, {1}},  {shape{4, 5, 6}, {0, 2}}, {shape{3, 20000}, {1}},
      {shape{20000, 3}, {0}}, {shape{300, 700}, {0}},   {shape{0, 4}, {1}}};
  for (auto op : {"sum", "mean", "max", "min", "prod"})
    for (dtype t : nums)
      for (auto& [dims, axes] : reductions) {
        if (std::string(op) == "prod" && dims.num_elements() > 1000) continue;  // overflows
        const double lo = std::string(op) == "prod" ? 0.9 : (t == dtype::uint8 ? 0 : -100);
        const double hi = std::string(op) == "prod" ? 1.1 : 100;
        cases[op].push_back({label_of(dims.to_string() + " axes " + std::to_string(axes.size()), t),
                             {rnd.uniform(t, dims, lo, hi)},
                             axes_attrs(axes)});
      }
  for (dtype t : floats) {
    cases["sum"].push_back(
        {label_of("keep_dims", t), {rnd.uniform(t, shape{4, 5, 6})}, axes_attrs({-1}, true)});
    cases["sum"].push_back(
        {label_of("sum over an empty dim", t), {rnd.uniform(t, shape{4, 0})}, axes_attrs({1})});
    cases["mean"].push_back({label_of("mean over an empty dim is NaN", t),
                             {rnd.uniform(t, shape{4, 0})},
                             axes_attrs({1})});
    cases["max"].push_back({label_of("NaN wins", t),
                            {with_value_every(rnd.uniform(t, shape{8, 9}), 10, NAN)},
                            axes_attrs({1})});
  }
  for (auto op : {"argmax", "argmin"})
    for (dtype t : nums)
      for (int64_t axis : {0, 1, -1})
        cases[op].push_back({label_of("(7,9,5) axis " + std::to_string(axis) + ", ties", t),
                             {rnd.uniform(t, shape{7, 9, 5}, 0, 5)},
                             {{"axis", axis}}});
  for (dtype t : nums) {
    cases["sum_to_shape_of"].push_back(
        {label_of("(4,3,5) to (3,1)", t),
         {rnd.uniform(t, shape{4, 3, 5}, 0, 20), rnd.uniform(t, shape{3, 1})}});
    cases["bias_add_grad"].push_back(
        {label_of("(64,10)", t), {rnd.uniform(t, shape{64, 10}, 0, 20)}});
    cases["bias_add_grad"].push_back(
        {label_of("(2,3,4)", t), {rnd.uniform(t, shape{2, 3, 4}, 0, 20)}});
    cases["bias_add"].push_back(
        {label_of("(8,10) + (10)", t),
         {rnd.uniform(t, shape{8, 10}, 0, 20), rnd.uniform(t, shape{10}, 0, 20)}});
  }

  // Softmax and cross-entropy.
  for (dtype t : floats) {
    for (auto op : {"softmax", "log_softmax"}) {
      cases[op].push_back({label_of("(7,10)", t), {rnd.uniform(t, shape{7, 10}, -20, 20)}});
      cases[op].push_back(
          {label_of("(2,3,1000)", t), {rnd.uniform(t, shape{2, 3, 1000}, -20, 20)}});
    }
    cases["softmax_cross_entropy_with_logits"].push_back(
        {label_of("(9,10)", t),
         {rnd.uniform(t, shape{9, 10}, -20, 20), rnd.distribution(t, 9, 10)}});
    cases["softmax_cross_entropy_with_logits"].push_back(
        {label_of("(3,100)", t),
         {rnd.uniform(t, shape{3, 100}, -20, 20), rnd.distribution(t, 3, 100)}});
    for (dtype l : {dtype::int32, dtype::int64})
      cases["sparse_softmax_cross_entropy_with_logits"].push_back(
          {label_of(std::string("(33,10), labels ") + dtype_name(l), t),
           {rnd.uniform(t, shape{33, 10}, -20, 20), rnd.uniform(l, shape{33}, 0, 9)}});
  }

  // matmul: every transpose flag, batched on either side or both.
  struct mm {
    shape a, b;
    bool ta, tb;
  };
  const std::vector<mm> products{{shape{5, 7}, shape{7, 3}, false, false},
                                 {shape{7, 5}, shape{7, 3}, true, false},
                                 {shape{5, 7}, shape{3, 7}, false, true},
                                 {shape{7, 5}, shape{3, 7}, true, true},
                                 {shape{2, 5, 7}, shape{7, 3}, false, false},
                                 {shape{2, 7, 5}, shape{7, 3}, true, false},
                                 {shape{5, 7}, shape{2, 7, 3}, false, false},
                                 {shape{2, 5, 7}, shape{2, 3, 7}, false, true},
                                 {shape{64, 784}, shape{784, 512}, false, false},
                                 {shape{5, 0}, shape{0, 3}, false, false}};
  for (dtype t : floats)
    for (auto& p : products)
      cases["matmul"].push_back({label_of(p.a.to_string() + " x " + p.b.to_string() +
                                              (p.ta ? " ta" : "") + (p.tb ? " tb" : ""),
                                          t),
                                 {rnd.uniform(t, p.a), rnd.uniform(t, p.b)},
                                 {{"transpose_a", p.ta}, {"transpose_b", p.tb}},
                                 t == dtype::float32 ? 1e-4 : 0});

  // conv2d and its backprops: symmetric and TF's bottom-heavy SAME padding, strides, VALID.
  struct conv {
    shape x, f;
    std::vector<int64_t> strides;
    std::string padding;
    shape y;
  };
  const std::vector<conv> convs{
      {shape{2, 9, 9, 3}, shape{3, 3, 3, 4}, {1, 1}, "SAME", shape{2, 9, 9, 4}},
      {shape{2, 8, 8, 3}, shape{3, 3, 3, 4}, {2, 2}, "SAME", shape{2, 4, 4, 4}},
      {shape{1, 8, 7, 2}, shape{2, 2, 2, 3}, {1, 1}, "SAME", shape{1, 8, 7, 3}},
      {shape{2, 9, 9, 3}, shape{3, 3, 3, 4}, {2, 1}, "VALID", shape{2, 4, 7, 4}},
      {shape{2, 28, 28, 1}, shape{5, 5, 1, 32}, {1, 1}, "SAME", shape{2, 28, 28, 32}}};
  for (auto& c : convs) {
    const auto label = c.x.to_string() + " * " + c.f.to_string() + " " + c.padding + " strides " +
                       std::to_string(c.strides[0]) + "," + std::to_string(c.strides[1]);
    auto x = rnd.uniform(dtype::float32, c.x);
    auto f = rnd.uniform(dtype::float32, c.f);
    auto dy = rnd.uniform(dtype::float32, c.y);
    auto a = window_attrs(c.strides, c.padding);
    cases["conv2d"].push_back({label, {x, f}, a, 1e-4});
    cases["conv2d_backprop_input"].push_back({label, {x, f, dy}, a, 1e-4});
    cases["conv2d_backprop_filter"].push_back({label, {x, f, dy}, a, 1e-4});
  }

  // Pooling: odd SAME padding (bottom / right), VALID, overlapping windows.
  struct pool {
    shape x;
    std::vector<int64_t> ksize, strides;
    std::string padding;
  };
  const std::vector<pool> pools{{shape{2, 7, 7, 3}, {2, 2}, {2, 2}, "SAME"},
                                {shape{2, 7, 7, 3}, {2, 2}, {2, 2}, "VALID"},
                                {shape{1, 6, 5, 2}, {3, 3}, {1, 1}, "SAME"},
                                {shape{1, 6, 5, 2}, {3, 2}, {2, 1}, "SAME"}};
  for (dtype t : floats)
    for (auto& p : pools) {
      const auto label = label_of(p.x.to_string() + " ksize " + std::to_string(p.ksize[0]) + "," +
                                      std::to_string(p.ksize[1]) + " " + p.padding,
                                  t);
      auto a = window_attrs(p.strides, p.padding, p.ksize);
      auto x = rnd.uniform(t, p.x);
      auto y = run_kernel("max_pool", {x}, a)[0];
      auto dy = rnd.uniform(t, y.dims());
      cases["max_pool"].push_back({label, {x}, a});
      cases["avg_pool"].push_back({label, {x}, a});
      cases["max_pool_grad"].push_back({label, {x, y, dy}, a});
      cases["avg_pool_grad"].push_back({label, {x, dy}, a});
    }
  return cases;
}

double default_tolerance(dtype t) {
  return t == dtype::float32 ? 1e-5 : t == dtype::float64 ? 1e-12 : 0;
}

std::string compare(const tensor& got, const tensor& want, double tol) {
  if (got.type() != want.type())
    return std::string("dtype ") + dtype_name(got.type()) + ", expected " + dtype_name(want.type());
  if (got.dims() != want.dims())
    return "shape " + got.dims().to_string() + ", expected " + want.dims().to_string();
  std::string diff;
  visit_dtype(got.type(), [&](auto tag) {
    using T = decltype(tag);
    const T* a = got.data<T>();
    const T* e = want.data<T>();
    for (int64_t i = 0; i < got.num_elements() && diff.empty(); ++i) {
      bool same = a[i] == e[i];
      if constexpr (std::is_floating_point_v<T>)
        same = same || (std::isnan(a[i]) && std::isnan(e[i])) ||
               std::abs(double(a[i]) - double(e[i])) <= tol * (1 + std::abs(double(e[i])));
      if (!same)
        diff = "element " + std::to_string(i) + ": got " + std::to_string(double(a[i])) +
               ", expected " + std::to_string(double(e[i]));
    }
  });
  return diff;
}

dtype key_type(const gpu::gpu_kernel_def& k, const gpu_case& c) {
  if (k.update || c.inputs.empty())
    return c.attrs.count("dtype") ? std::get<dtype>(c.attrs.at("dtype")) : dtype::float32;
  return c.inputs[static_cast<size_t>(k.type_input)].type();
}

}  // namespace actorflow::testing
