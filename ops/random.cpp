#include "ops/random.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "ops/op_util.hpp"

namespace actorflow {

namespace {

// ---------------------------------------------------------------------------------------------
// Bits

inline std::array<uint32_t, 4> philox_rounds(std::array<uint32_t, 4> ctr,
                                             std::array<uint32_t, 2> key) {
  constexpr uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;  // key schedule (Weyl sequence)
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += w0;
      key[1] += w1;
    }
    const uint64_t p0 = uint64_t{m0} * ctr[0];
    const uint64_t p1 = uint64_t{m1} * ctr[2];
    ctr = {uint32_t(p1 >> 32) ^ ctr[1] ^ key[0], uint32_t(p1), uint32_t(p0 >> 32) ^ ctr[3] ^ key[1],
           uint32_t(p0)};
  }
  return ctr;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// One stream: a key from the seeds; the counter holds (position, invocation).
struct stream {
  std::array<uint32_t, 2> key;
  uint64_t invocation;

  stream(int64_t seed, int64_t seed2, uint64_t invocation_, uint64_t attempt = 0)
      : invocation(invocation_) {
    uint64_t k = splitmix64(uint64_t(seed) ^ splitmix64(uint64_t(seed2)));
    // Redraws (truncated_normal) use independent keys.
    if (attempt > 0) k = splitmix64(k ^ splitmix64(attempt));
    key = {uint32_t(k), uint32_t(k >> 32)};
  }
  std::array<uint32_t, 4> at(uint64_t position) const {
    return philox_rounds({uint32_t(position), uint32_t(position >> 32), uint32_t(invocation),
                          uint32_t(invocation >> 32)},
                         key);
  }
};

// Values per Philox block: four float32 from 32 bits each, two float64 from 64 bits each.
template <class T>
constexpr int per_block = sizeof(T) == 4 ? 4 : 2;

// Uniform values in [0, 1) with the full mantissa of T.
template <class T>
std::array<T, per_block<T>> unit_uniforms(const std::array<uint32_t, 4>& w) {
  if constexpr (sizeof(T) == 4) {
    return {float(w[0] >> 8) * 0x1p-24f, float(w[1] >> 8) * 0x1p-24f, float(w[2] >> 8) * 0x1p-24f,
            float(w[3] >> 8) * 0x1p-24f};
  } else {
    return {double(((uint64_t(w[0]) << 32) | w[1]) >> 11) * 0x1p-53,
            double(((uint64_t(w[2]) << 32) | w[3]) >> 11) * 0x1p-53};
  }
}

// Standard normal values by Box-Muller, two from each pair of uniforms.
template <class T>
std::array<T, per_block<T>> unit_normals(const std::array<uint32_t, 4>& w) {
  auto u = unit_uniforms<T>(w);
  std::array<T, per_block<T>> z;
  for (int i = 0; i < per_block<T>; i += 2) {
    // 1 - u is in (0, 1], so the log is finite.
    const T r = std::sqrt(T(-2) * std::log(T(1) - u[i]));
    const T theta = T(2 * std::numbers::pi) * u[i + 1];
    z[i] = r * std::cos(theta);
    z[i + 1] = r * std::sin(theta);
  }
  return z;
}

// ---------------------------------------------------------------------------------------------
// Ops

enum class distribution { uniform, normal, truncated };

struct random_params {
  dtype type = dtype::float32;
  std::vector<int64_t> dims;
  double a = 0, b = 1;  // minval, maxval or mean, stddev
  int64_t seed = 0, seed2 = 0;
};

// Reads a number attribute given as a float or an int.
double number_attr(const attr_map& attrs, const std::string& name, const std::string& op,
                   double fallback) {
  auto it = attrs.find(name);
  if (it == attrs.end()) return fallback;
  if (auto p = std::get_if<int64_t>(&it->second)) return double(*p);
  return get_attr<double>(attrs, name, op);
}

random_params read_params(const attr_map& attrs, const std::string& op, distribution d) {
  random_params p;
  p.type = get_attr_or<dtype>(attrs, "dtype", op, dtype::float32);
  if (p.type == dtype::bfloat16) fail_no_bfloat16_kernel(op);
  if (!is_floating(p.type))
    fail(op, std::string("expects dtype float32 or float64, got ") + dtype_name(p.type));
  p.dims = get_attr<std::vector<int64_t>>(attrs, "shape", op);
  for (auto dim : p.dims)
    if (dim < 0) fail(op, "shape " + shape(p.dims).to_string() + " must be fully defined");
  p.seed = get_attr_or<int64_t>(attrs, "seed", op, 0);
  p.seed2 = get_attr_or<int64_t>(attrs, "seed2", op, 0);
  if (d == distribution::uniform) {
    p.a = number_attr(attrs, "minval", op, 0.0);
    p.b = number_attr(attrs, "maxval", op, 1.0);
    if (!std::isfinite(p.a) || !std::isfinite(p.b) || p.b < p.a)
      fail(op, "needs finite minval <= maxval, got minval " + std::to_string(p.a) + ", maxval " +
                   std::to_string(p.b));
  } else {
    p.a = number_attr(attrs, "mean", op, 0.0);
    p.b = number_attr(attrs, "stddev", op, 1.0);
    if (!std::isfinite(p.a) || !std::isfinite(p.b) || p.b < 0)
      fail(op, "needs a finite mean and stddev >= 0, got mean " + std::to_string(p.a) +
                   ", stddev " + std::to_string(p.b));
  }
  return p;
}

template <distribution D>
std::vector<tensor_spec> random_infer(const shape_context& c) {
  auto p = read_params(c.attrs, c.op, D);
  return {{p.type, shape(p.dims)}};
}

// Elements per task: a Philox block plus a log and a sine per pair is far costlier than an add.
constexpr int64_t random_grain_elements = 4 * 1024;

template <class T, distribution D>
void fill(T* out, int64_t n, const random_params& p, uint64_t invocation) {
  constexpr int64_t per = per_block<T>;
  const stream s(p.seed, p.seed2, invocation);
  if constexpr (D == distribution::truncated) {
    // Element i draws from position i of successive streams until a value lies within two
    // standard deviations, so it depends on nothing but its own index. A block holds 4
    // (float32) or 2 (float64) candidates, each outside the bound with probability 4.6%.
    const T mean = T(p.a), stddev = T(p.b);
    parallel_for(n, random_grain_elements / per, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        T z = 0;
        bool found = false;
        for (uint64_t attempt = 0; !found && attempt < 64; ++attempt) {
          auto w = attempt == 0 ? s.at(uint64_t(i))
                                : stream(p.seed, p.seed2, invocation, attempt).at(uint64_t(i));
          for (T v : unit_normals<T>(w))
            if (std::abs(v) <= T(2)) {
              z = v;
              found = true;
              break;
            }
        }
        out[i] = mean + stddev * z;
      }
    });
  } else {
    // uniform: lo + (hi - lo) * u; normal: mean + stddev * z.
    const T offset = T(p.a);
    const T scale = D == distribution::uniform ? T(p.b) - T(p.a) : T(p.b);
    const T hi = T(p.b);
    // Rounding can carry lo + range * u up to hi; such values become the largest below hi.
    const T below_hi = hi > offset ? std::nextafter(hi, offset) : offset;
    const int64_t blocks = (n + per - 1) / per;
    parallel_for(blocks, random_grain_elements / per, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        const auto w = s.at(uint64_t(blk));
        const int64_t first = blk * per, count = std::min(per, n - first);
        if constexpr (D == distribution::uniform) {
          const auto u = unit_uniforms<T>(w);
          for (int64_t j = 0; j < count; ++j) {
            const T v = offset + scale * u[size_t(j)];
            out[first + j] = v < hi ? v : below_hi;
          }
        } else {
          const auto z = unit_normals<T>(w);
          for (int64_t j = 0; j < count; ++j) out[first + j] = offset + scale * z[size_t(j)];
        }
      }
    });
  }
}

template <distribution D>
void random_kernel(kernel_context& ctx) {
  const auto p = read_params(ctx.attrs, ctx.op, D);
  tensor& out = ctx.allocate_output(0, p.type, shape(p.dims));
  visit_floating(p.type, ctx.op.c_str(), [&](auto tag) {
    using T = decltype(tag);
    fill<T, D>(out.mutable_data<T>(), out.num_elements(), p, ctx.invocation);
  });
}

const op_registrar registrations[] = {
    op_registrar({.name = "random_uniform",
                  .num_inputs = 0,
                  .infer = random_infer<distribution::uniform>,
                  .kernel = random_kernel<distribution::uniform>,
                  .stateful = true,
                  .summary = "uniform values in [minval, maxval)",
                  .not_differentiable = true}),
    op_registrar({.name = "random_normal",
                  .num_inputs = 0,
                  .infer = random_infer<distribution::normal>,
                  .kernel = random_kernel<distribution::normal>,
                  .stateful = true,
                  .summary = "normal values with the given mean and stddev",
                  .not_differentiable = true}),
    op_registrar({.name = "truncated_normal",
                  .num_inputs = 0,
                  .infer = random_infer<distribution::truncated>,
                  .kernel = random_kernel<distribution::truncated>,
                  .stateful = true,
                  .summary = "normal values redrawn beyond 2 stddev from the mean",
                  .not_differentiable = true}),
};

output add_random(graph& g, const char* op, shape dims, dtype type, const char* a_name, double a,
                  const char* b_name, double b, int64_t seed, int64_t seed2,
                  const std::string& name) {
  auto& n = g.add_node(op, {},
                       {{"shape", dims.dims()},
                        {"dtype", type},
                        {a_name, a},
                        {b_name, b},
                        {"seed", seed},
                        {"seed2", seed2}},
                       name.empty() ? op : name);
  return output(&g, {n.id, 0});
}

}  // namespace

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) {
  return philox_rounds(counter, key);
}

output random_uniform(graph& g, shape dims, dtype type, double minval, double maxval, int64_t seed,
                      int64_t seed2, const std::string& name) {
  return add_random(g, "random_uniform", std::move(dims), type, "minval", minval, "maxval", maxval,
                    seed, seed2, name);
}

output random_normal(graph& g, shape dims, dtype type, double mean, double stddev, int64_t seed,
                     int64_t seed2, const std::string& name) {
  return add_random(g, "random_normal", std::move(dims), type, "mean", mean, "stddev", stddev, seed,
                    seed2, name);
}

output truncated_normal(graph& g, shape dims, dtype type, double mean, double stddev, int64_t seed,
                        int64_t seed2, const std::string& name) {
  return add_random(g, "truncated_normal", std::move(dims), type, "mean", mean, "stddev", stddev,
                    seed, seed2, name);
}

}  // namespace actorflow
