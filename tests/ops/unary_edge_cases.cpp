// Edge values at every size for the element-wise unary float ops. A kernel
// that vectorizes handles a tensor's body and its tail (and each thread's
// chunk) apart; sqrt(+inf) was NaN on the SIMD path only, so a value's result
// depended on the size of the tensor holding it. Here every value (inf, -inf,
// NaN, +-0, denormals, the ends of exp's range, ordinary ones) goes through
// every such op alone and among others at sizes that hit scalar tails and
// vector bodies, and must come out as it does alone, and as TensorFlow and the
// C++ library say (computed in long double).
//
// The ops are found in the registry, not listed: every one-input op without
// attributes that maps a float tensor to one of the same dtype and shape is
// element-wise unless not_elementwise says otherwise, so a new unary op gets
// these cases by itself (and the coverage test asks for its reference).
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "ops/op_cases.hpp"

namespace actorflow::testing {
namespace {

// ---- which ops ------------------------------------------------------------------------

// One-input ops that can keep a float tensor's dtype and shape but are not
// element-wise: they mix elements, or reshape.
const std::map<std::string, std::string> not_elementwise = {
    {"softmax", "normalizes along the last dim"},
    {"log_softmax", "normalizes along the last dim"},
    {"squeeze", "drops size-1 dims: (1) becomes ()"},
};

// The float dtypes for which def maps (3,5) to (3,5) of the same dtype, taking no
// attributes; empty for an op that is not an element-wise unary float op.
std::vector<dtype> elementwise_float_types(const op_def& def) {
  if (def.num_inputs != 1 || !def.kernel || def.stateful || def.served_by_runtime() ||
      not_elementwise.count(def.name))
    return {};
  std::vector<dtype> types;
  for (dtype t : floats) {
    const shape dims{3, 5};
    try {
      auto out = infer_outputs(def, {{t, dims}}, {});
      if (out.size() == 1 && out[0].type == t && out[0].dims == dims) types.push_back(t);
    } catch (const error&) {  // needs an attribute, or takes other dtypes
    }
  }
  return types;
}

struct unary_op {
  std::string name;
  std::vector<dtype> types;
};

std::vector<unary_op> unary_float_ops() {
  std::vector<unary_op> ops;
  for (auto* def : op_registry::global().all()) {
    auto types = elementwise_float_types(*def);
    if (!types.empty()) ops.push_back({def->name, std::move(types)});
  }
  return ops;
}

// ---- what each op gives ---------------------------------------------------------------

using reference_fn = long double (*)(long double);

// TensorFlow's results (tf.math, tf.nn), which for these values are IEEE
// arithmetic's and the C library's; math.hpp notes where actorflow differs.
const std::map<std::string, reference_fn> references = {
    {"neg", [](long double x) { return -x; }},
    {"abs", [](long double x) { return std::fabs(x); }},
    {"exp", [](long double x) { return std::exp(x); }},
    {"log", [](long double x) { return std::log(x); }},
    {"sqrt", [](long double x) { return std::sqrt(x); }},
    {"rsqrt", [](long double x) { return 1 / std::sqrt(x); }},
    {"square", [](long double x) { return x * x; }},
    {"sign", [](long double x) -> long double { return x > 0    ? 1
                                                       : x < 0  ? -1
                                                       : x == 0 ? 0
                                                                : x; }},
    {"reciprocal", [](long double x) { return 1 / x; }},
    {"relu", [](long double x) -> long double { return x < 0 ? 0 : x; }},  // NaN and -0 stay
    {"sigmoid",
     [](long double x) {
       return x < 0 ? std::exp(x) / (1 + std::exp(x)) : 1 / (1 + std::exp(-x));
     }},
    {"tanh", [](long double x) { return std::tanh(x); }},
    {"identity", [](long double x) { return x; }},
    {"stop_gradient", [](long double x) { return x; }},
    {"zeros_like", [](long double) -> long double { return 0; }},
    {"ones_like", [](long double) -> long double { return 1; }},
};

// ---- the values -------------------------------------------------------------------------

template <class T>
std::vector<T> edge_values() {
  const T inf = std::numeric_limits<T>::infinity();
  std::vector<T> v{inf,      -inf,     std::numeric_limits<T>::quiet_NaN(), T(0), T(-0.0),
                   T(1e-40), T(-1e-40)};
  // Denormals of float64, and past the ends of exp's range, where Eigen clamps.
  if constexpr (std::is_same_v<T, double>)
    v.insert(v.end(), {1e-310, -1e-310, 709.9, -720.0, 1000.0, -1000.0});
  else
    v.insert(v.end(), {88.5f, -88.5f, 100.f, -100.f});
  return v;
}

// Edge values then ordinary ones: 17 (float32) or 19 values, prime, so that cycling
// through them puts each at every SIMD lane of a long tensor.
template <class T>
std::vector<T> value_pool() {
  auto v = edge_values<T>();
  v.insert(v.end(), {T(1), T(-1), T(0.5), T(2), T(-3), T(10)});
  return v;
}

/// A tensor of n values cycling through the pool from pool[first].
template <class T>
tensor cycled(int64_t n, size_t first) {
  const auto pool = value_pool<T>();
  std::vector<T> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = pool[(first + i) % pool.size()];
  return make<T>({n}, v);
}

// ---- comparing -------------------------------------------------------------------------

// The same class (NaN, an infinity of one sign, a zero of one sign) and, finite and
// non-zero, within tol relative or one denormal step apart.
template <class T>
bool same_value(T got, T want, double tol) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got) || want == 0 || got == 0)
    return got == want && std::signbit(got) == std::signbit(want);
  const double d = std::abs(double(got) - double(want));
  return d <= tol * std::abs(double(want)) || d <= double(std::numeric_limits<T>::denorm_min());
}

// The same bits, any NaN matching any NaN.
template <class T>
bool same_bits(T got, T want) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  return std::memcmp(&got, &want, sizeof(T)) == 0;
}

template <class T>
T alone(const std::string& op, T x) {
  return run_kernel(op, {make<T>({1}, {x})})[0].template data<T>()[0];
}

template <class T>
std::string show(T v) {
  std::ostringstream os;
  os.precision(std::numeric_limits<T>::max_digits10);
  os << v;
  return os.str();
}

// "" when out (op of x, on any device) holds for each element what op gives the value
// alone on the CPU and what the reference gives; else the first element that does not.
template <class T>
std::string check_elementwise(const std::string& op, const tensor& x, const tensor& out) {
  if (out.type() != x.type() || out.dims() != x.dims())
    return "output " + out.dims().to_string() + ", expected " + x.dims().to_string();
  const double tol = default_tolerance(x.type());
  auto ref = references.find(op);
  std::map<T, T> alone_of;  // NaN is never a key: it is compared by class
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const T v = x.data<T>()[i], got = out.data<T>()[i];
    const T single = std::isnan(v)               ? alone(op, v)
                     : std::signbit(v) && v == 0 ? alone(op, v)  // -0 and 0 are one key
                     : alone_of.count(v)         ? alone_of[v]
                                                 : (alone_of[v] = alone(op, v));
    std::string at =
        "element " + std::to_string(i) + ", " + op + "(" + show(v) + ") = " + show(got);
    if (!same_value(got, single, tol)) return at + ", alone " + show(single);
    if (ref != references.end()) {
      const T want = static_cast<T>(ref->second(static_cast<long double>(v)));
      if (!same_value(got, want, tol)) return at + ", expected " + show(want);
    }
  }
  return "";
}

// ---- the cases --------------------------------------------------------------------------

// Sizes: a single packet's worth and less (scalar tails), one past a packet, and
// bodies with tails of 8 and 3 that parallel kernels split.
const std::vector<int64_t> sizes{7, 16, 17, 1000, 4099};

template <class T>
op_case edge_case(const std::string& op, const tensor& x, const std::string& label) {
  return {.op = op,
          .label = label_of(label, dtype_of<T>()),
          .inputs = {x},
          .check = [op, x](const std::vector<tensor>& outs) {
            REQUIRE(outs.size() == 1);
            auto diff = check_elementwise<T>(op, x, outs[0]);
            CHECK_MESSAGE(diff.empty(), diff);
          }};
}

std::vector<op_case> edge_cases() {
  std::vector<op_case> cases;
  for (auto& op : unary_float_ops())
    for (dtype t : op.types)
      visit_floating(t, "test", [&](auto tag) {
        using T = decltype(tag);
        const auto pool = value_pool<T>();
        for (size_t k = 0; k < pool.size(); ++k)
          cases.push_back(edge_case<T>(op.name, cycled<T>(1, k), "edge value " + show(pool[k])));
        for (int64_t n : sizes)
          cases.push_back(
              edge_case<T>(op.name, cycled<T>(n, 0), "edge values, size " + std::to_string(n)));
      });
  return cases;
}

const op_case_registrar edge_registration(edge_cases);

// ---- checks beyond the table -----------------------------------------------------------

TEST_CASE("every element-wise unary float op has edge-value cases and a reference") {
  std::set<std::string> with_cases;
  for (auto& c : op_cases())
    if (c.label.rfind("edge value", 0) == 0) with_cases.insert(c.op);
  std::string found;
  for (auto& op : unary_float_ops()) {
    found += " " + op.name;
    CHECK_MESSAGE(with_cases.count(op.name), "'" << op.name << "' has no edge-value cases");
    CHECK_MESSAGE(references.count(op.name),
                  "'" << op.name << "' has no reference in unary_edge_cases.cpp");
  }
  MESSAGE("element-wise unary float ops:" << found);
  // The discovery still finds what it was written against.
  for (auto* name : {"sqrt", "exp", "tanh", "relu", "neg", "sign"})
    CHECK_MESSAGE(found.find(std::string(" ") + name) != std::string::npos, name);
  for (auto& [name, why] : not_elementwise)
    CHECK_MESSAGE(op_registry::global().find(name), "not_elementwise names unknown op " << name);
}

// Bit for bit on the CPU: the sizes around the SIMD block (64 floats, 32 doubles) and a
// size split across threads, each value at each position of the small tensors.
template <class T>
void check_same_bits_at_every_size(const std::string& op) {
  const auto pool = value_pool<T>();
  std::vector<T> singles;
  for (T v : pool) singles.push_back(alone(op, v));
  std::vector<int64_t> ns;
  for (int64_t n = 2; n <= 140; ++n) ns.push_back(n);
  ns.push_back(40001);
  for (int64_t n : ns)
    for (size_t first = 0; first < (n <= 20 ? pool.size() : 1); ++first) {
      const tensor x = cycled<T>(n, first);
      const tensor out = run_kernel(op, {x})[0];
      for (int64_t i = 0; i < n; ++i) {
        const size_t k = (first + size_t(i)) % pool.size();
        const T v = pool[k], got = out.data<T>()[i], single = singles[k];
        if (same_bits(got, single)) continue;
        FAIL_CHECK(op << "(" << show(v) << ") at element " << i << " of " << n << " is "
                      << show(got) << ", alone " << show(single));
        return;
      }
    }
}

TEST_CASE("element-wise unary float ops give a value the same bits at every size") {
  for (auto& op : unary_float_ops())
    for (dtype t : op.types) {
      INFO(op.name << " " << std::string(dtype_name(t)));
      visit_floating(t, "test",
                     [&](auto tag) { check_same_bits_at_every_size<decltype(tag)>(op.name); });
    }
}

// TensorFlow's results at the edges, spelled out (TF 2.x, tf.math and tf.nn), at one
// element and in a tensor large enough for every SIMD path.
struct documented {
  const char* op;
  double x, want;
};
const double inf_d = std::numeric_limits<double>::infinity();
const double nan_d = std::numeric_limits<double>::quiet_NaN();
const std::vector<documented> tensorflow_edges{
    {"sqrt", inf_d, inf_d},       {"sqrt", -0.0, -0.0},
    {"sqrt", -1, nan_d},          {"sqrt", 0, 0},
    {"rsqrt", 0, inf_d},          {"rsqrt", -0.0, -inf_d},
    {"rsqrt", inf_d, 0},          {"rsqrt", -1, nan_d},
    {"log", 0, -inf_d},           {"log", -0.0, -inf_d},
    {"log", -1, nan_d},           {"log", inf_d, inf_d},
    {"log", -inf_d, nan_d},       {"exp", -inf_d, 0},
    {"exp", inf_d, inf_d},        {"exp", nan_d, nan_d},
    {"tanh", inf_d, 1},           {"tanh", -inf_d, -1},
    {"tanh", -0.0, -0.0},         {"sigmoid", -inf_d, 0},
    {"sigmoid", inf_d, 1},        {"sigmoid", nan_d, nan_d},
    {"relu", nan_d, nan_d},       {"relu", -inf_d, 0},
    {"relu", inf_d, inf_d},       {"sign", -0.0, 0},
    {"sign", nan_d, nan_d},       {"sign", -inf_d, -1},
    {"reciprocal", 0, inf_d},     {"reciprocal", -0.0, -inf_d},
    {"reciprocal", -inf_d, -0.0}, {"abs", -0.0, 0},
    {"abs", -inf_d, inf_d},       {"neg", 0, -0.0},
    {"square", -inf_d, inf_d},    {"square", nan_d, nan_d},
};

TEST_CASE("unary ops give TensorFlow's results at the edges, alone and in a large tensor") {
  for (auto& d : tensorflow_edges)
    for (dtype t : floats)
      visit_floating(t, "test", [&](auto tag) {
        using T = decltype(tag);
        INFO(std::string(d.op) << "(" << d.x << ") " << std::string(dtype_name(t)));
        for (int64_t n : {int64_t{1}, int64_t{4099}}) {
          const tensor out = run_kernel(d.op, {make<T>({n}, std::vector<T>(size_t(n), T(d.x)))})[0];
          const T* got = out.data<T>();
          for (int64_t i : {int64_t{0}, n / 2, n - 1})
            CHECK_MESSAGE(same_value(got[i], T(d.want), 0),
                          "got " << show(got[i]) << " at " << i << " of " << n);
        }
      });
}

}  // namespace
}  // namespace actorflow::testing
