#include "ops/summary.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <set>

#include "core/proto_wire.hpp"
#include "ops/op_util.hpp"
#include "ops/png.hpp"

namespace actorflow {

namespace {

using proto::writer;

// Field numbers of summary.proto: Summary{value=1}; Value{tag=1,
// simple_value=2, image=4, histo=5, tensor=8, metadata=9}.
constexpr uint32_t summary_value_field = 1;
constexpr uint32_t value_tag = 1, value_simple = 2, value_image = 4, value_histo = 5,
                   value_tensor = 8, value_metadata = 9;
constexpr uint64_t dt_string = 7;  // types.proto

std::string wrap_value(const writer& value) {
  writer summary;
  summary.message_field(summary_value_field, value);
  return summary.take();
}

// ---------------------------------------------------------------- histogram

// TensorFlow's default bucket limits (core/lib/histogram/histogram.cc): the
// same multiplication, so the limits are TensorFlow's to the last bit.
const std::vector<double>& default_bucket_limits() {
  static const std::vector<double> limits = [] {
    std::vector<double> pos, neg;
    for (double v = 1.0e-12; v < 1.0e20; v *= 1.1) {
      pos.push_back(v);
      neg.push_back(-v);
    }
    pos.push_back(DBL_MAX);
    neg.push_back(-DBL_MAX);
    std::vector<double> all(neg.rbegin(), neg.rend());
    all.push_back(0.0);
    all.insert(all.end(), pos.begin(), pos.end());
    return all;
  }();
  return limits;
}

// The bucket of a value: upper_bound over the limits, as TensorFlow's, but
// through a table on the value's top bits (exponent and 6 bits of mantissa:
// steps of at most 1.1%, so a step of the table holds at most one limit of
// the 10% apart) and one or two comparisons: a histogram of a 784x512
// weight took 17 ns a value by binary search, about a tenth of that here.
class bucket_finder {
 public:
  explicit bucket_finder(const std::vector<double>& limits) : limits_(limits) {
    for (uint64_t key = 0; key < table_size; ++key) {
      double start = value_of(key);
      up_[key] = static_cast<uint32_t>(upper_bound(start));
      down_[key] = static_cast<uint32_t>(upper_bound(-start));
    }
  }

  size_t bucket(double v) const {
    const double a = std::fabs(v);
    if (!(a >= smallest && a < largest)) return upper_bound(v);  // 0, tiny, huge, NaN
    const uint64_t key = key_of(a);
    size_t b = v > 0 ? up_[key] : down_[key];
    if (v > 0)
      while (b < limits_.size() && limits_[b] <= v) ++b;
    else
      while (b > 0 && limits_[b - 1] > v) --b;
    return b;
  }

 private:
  static constexpr int mantissa_bits = 6;
  static constexpr double smallest = 1e-13, largest = 1e21;
  static constexpr uint64_t shift = 52 - mantissa_bits;
  static uint64_t bits(double a) { return std::bit_cast<uint64_t>(a); }
  static uint64_t key_of(double a) { return (bits(a) >> shift) - (bits(smallest) >> shift); }
  static double value_of(uint64_t key) {
    return std::bit_cast<double>((key + (bits(smallest) >> shift)) << shift);
  }
  static constexpr uint64_t table_size = (std::bit_cast<uint64_t>(largest) >> shift) -
                                         (std::bit_cast<uint64_t>(smallest) >> shift) + 1;
  size_t upper_bound(double v) const {
    return static_cast<size_t>(std::upper_bound(limits_.begin(), limits_.end(), v) -
                               limits_.begin());
  }
  const std::vector<double>& limits_;
  std::array<uint32_t, table_size> up_{}, down_{};
};

const bucket_finder& default_buckets() {
  static const bucket_finder finder(default_bucket_limits());
  return finder;
}

struct histogram {
  const std::vector<double>& limits = default_bucket_limits();
  std::vector<double> counts = std::vector<double>(limits.size(), 0.0);
  double min = DBL_MAX, max = -DBL_MAX, num = 0, sum = 0, sum_squares = 0;

  void add(double v) {
    // Bucket i holds the values in [limits[i-1], limits[i]), as TensorFlow's upper_bound.
    size_t b = default_buckets().bucket(v);
    counts[std::min(b, counts.size() - 1)] += 1.0;
    min = std::min(min, v);
    max = std::max(max, v);
    num += 1;
    sum += v;
    sum_squares += v * v;
  }

  // HistogramProto{min=1, max=2, num=3, sum=4, sum_squares=5, bucket_limit=6,
  // bucket=7}; a run of empty buckets becomes one, with the run's last limit
  // (Histogram::EncodeToProto with preserve_zero_buckets = false).
  writer encode() const {
    std::vector<double> out_limits, out_counts;
    for (size_t i = 0; i < counts.size();) {
      double end = limits[i], count = counts[i];
      ++i;
      if (count <= 0.0)
        for (; i < counts.size() && counts[i] <= 0.0; ++i) end = limits[i], count = counts[i];
      out_limits.push_back(end);
      out_counts.push_back(count);
    }
    writer w;
    w.double_field(1, min);
    w.double_field(2, max);
    w.double_field(3, num);
    w.double_field(4, sum);
    w.double_field(5, sum_squares);
    w.packed_doubles_field(6, out_limits);
    w.packed_doubles_field(7, out_counts);
    return w;
  }
};

// ---------------------------------------------------------------- images

// TensorFlow's NormalizeFloatImage (summary_image_op.cc): per image, an affine
// map into [0, 255] from the finite pixels' range; a pixel with a non-finite
// channel becomes red (255, 0, 0, 255 cut to the depth).
template <class T>
std::vector<uint8_t> normalize_float_image(const T* p, int64_t pixels, int64_t depth) {
  auto finite_pixel = [&](int64_t i) {
    for (int64_t j = 0; j < depth; ++j)
      if (!std::isfinite(p[i * depth + j])) return false;
    return true;
  };
  float lo = INFINITY, hi = -INFINITY;
  for (int64_t i = 0; i < pixels; ++i)
    if (finite_pixel(i))
      for (int64_t j = 0; j < depth; ++j) {
        lo = std::min(lo, static_cast<float>(p[i * depth + j]));
        hi = std::max(hi, static_cast<float>(p[i * depth + j]));
      }
  constexpr float zero_threshold = 1e-6f;
  T scale, offset;
  if (lo < 0) {
    const float m = std::max(std::abs(lo), std::abs(hi));
    scale = T(m < zero_threshold ? 0.0f : 127.0f / m);
    offset = T(128.0f);
  } else {
    scale = T(hi < zero_threshold ? 0.0f : 255.0f / hi);
    offset = T(0.0f);
  }
  const uint8_t bad_color[4] = {255, 0, 0, 255};
  std::vector<uint8_t> out(static_cast<size_t>(pixels * depth));
  for (int64_t i = 0; i < pixels; ++i) {
    const bool ok = finite_pixel(i);
    for (int64_t j = 0; j < depth; ++j)
      out[static_cast<size_t>(i * depth + j)] =
          ok ? static_cast<uint8_t>(p[i * depth + j] * scale + offset) : bad_color[j];
  }
  return out;
}

void check_image_spec(const std::string& op, dtype type, const shape& dims, int64_t max_images) {
  if (type != dtype::uint8 && type != dtype::float32 && type != dtype::float64)
    fail(op, std::string("images must be uint8, float32 or float64, got ") + dtype_name(type));
  if (dims.rank() != 4)
    fail(op, "images must be 4-D (batch, height, width, channels), got shape " + dims.to_string());
  const int64_t c = dims[3];
  if (c != shape::unknown && c != 1 && c != 3 && c != 4)
    fail(op, "images must have 1, 3 or 4 channels, got shape " + dims.to_string());
  if (max_images < 1) fail(op, "max_images must be at least 1, got " + std::to_string(max_images));
}

writer image_summary_value(const std::string& tag, const uint8_t* pixels, int64_t h, int64_t w,
                           int64_t c) {
  writer image;  // Summary.Image{height=1, width=2, colorspace=3, encoded_image_string=4}
  image.int64_field(1, h);
  image.int64_field(2, w);
  image.int64_field(3, c);
  image.bytes_field(4, encode_png(pixels, h, w, static_cast<int>(c)));
  writer value;
  value.bytes_field(value_tag, tag);
  value.message_field(value_image, image);
  return value;
}

void check_numeric(const std::string& op, dtype t) {
  if (t == dtype::boolean) fail(op, "expects a numeric dtype, got bool");
  if (t == dtype::bfloat16) fail_no_bfloat16_kernel(op);
}

// ---------------------------------------------------------------- ops

tensor_spec summary_spec() { return {dtype::uint8, shape{shape::unknown}}; }

std::vector<tensor_spec> scalar_infer(const shape_context& c) {
  check_numeric(c.op, c.inputs[0].type);
  if (c.inputs[0].dims.rank() != 0)
    c.fail("expects a scalar value, got shape " + c.inputs[0].dims.to_string());
  c.attr<std::string>("tag");
  return {summary_spec()};
}

std::vector<tensor_spec> histogram_infer(const shape_context& c) {
  check_numeric(c.op, c.inputs[0].type);
  c.attr<std::string>("tag");
  return {summary_spec()};
}

std::vector<tensor_spec> image_infer(const shape_context& c) {
  check_image_spec(c.op, c.inputs[0].type, c.inputs[0].dims, c.attr_or<int64_t>("max_images", 3));
  c.attr<std::string>("tag");
  return {summary_spec()};
}

std::vector<tensor_spec> merge_infer(const shape_context& c) {
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.inputs[i].type != dtype::uint8 || c.inputs[i].dims.rank() != 1)
      c.fail("input " + std::to_string(i) + " is " + c.inputs[i].to_string() +
             ", not a summary (a 1-D uint8 tensor)");
  return {summary_spec()};
}

void set_summary(kernel_context& ctx, const std::string& bytes) {
  ctx.set_output(0, summary_tensor(bytes));
}

// The tags of a serialized Summary's values, checking that it parses.
std::vector<std::string> summary_tags(std::string_view bytes, const std::string& where) {
  std::vector<std::string> tags;
  proto::reader r(bytes, where);
  for (proto::field f; r.next(f);) {
    if (f.number != summary_value_field) continue;
    r.expect(f, proto::wire_type::bytes);
    std::string tag;
    proto::reader v(f.bytes, where + ".value");
    for (proto::field g; v.next(g);)
      if (g.number == value_tag) {
        v.expect(g, proto::wire_type::bytes);
        tag = std::string(g.bytes);
      }
    tags.push_back(std::move(tag));
  }
  return tags;
}

void merge_kernel(kernel_context& ctx) {
  std::set<std::string> seen;
  std::string merged;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    if (ctx.inputs[i].type() != dtype::uint8 || ctx.inputs[i].rank() != 1)
      ctx.fail("input " + std::to_string(i) + " is not a summary (a 1-D uint8 tensor)");
    const std::string bytes = summary_bytes(ctx.inputs[i]);
    for (auto& tag : summary_tags(bytes, ctx.op + ": input " + std::to_string(i)))
      if (!tag.empty() && !seen.insert(tag).second)
        ctx.fail("duplicate tag '" + tag + "' in the summaries merged");
    merged += bytes;
  }
  set_summary(ctx, merged);
}

const std::set<std::string>& summary_ops() {
  static const std::set<std::string> ops = {"scalar_summary", "histogram_summary", "image_summary",
                                            "text_summary"};
  return ops;
}

const op_registrar registrations[] = {
    op_registrar({.name = "scalar_summary",
                  .num_inputs = 1,
                  .infer = scalar_infer,
                  .kernel =
                      [](kernel_context& ctx) {
                        const tensor& x = ctx.input(0);
                        check_numeric(ctx.op, x.type());
                        if (x.rank() != 0)
                          ctx.fail("expects a scalar value, got shape " + x.dims().to_string());
                        const double v = visit_dtype(x.type(), [&](auto tag) {
                          return static_cast<double>(x.item<decltype(tag)>());
                        });
                        set_summary(ctx, encode_scalar_summary(ctx.attr<std::string>("tag"), v));
                      },
                  .summary = "a Summary (1-D uint8) with the scalar under attr tag",
                  .not_differentiable = true}),
    op_registrar({.name = "histogram_summary",
                  .num_inputs = 1,
                  .infer = histogram_infer,
                  .kernel =
                      [](kernel_context& ctx) {
                        set_summary(ctx, encode_histogram_summary(ctx.attr<std::string>("tag"),
                                                                  ctx.input(0)));
                      },
                  .summary = "a Summary (1-D uint8) with a histogram of the values",
                  .not_differentiable = true}),
    op_registrar(
        {.name = "image_summary",
         .num_inputs = 1,
         .infer = image_infer,
         .kernel =
             [](kernel_context& ctx) {
               const auto max_images = ctx.attr_or<int64_t>("max_images", 3);
               check_image_spec(ctx.op, ctx.input(0).type(), ctx.input(0).dims(), max_images);
               set_summary(ctx, encode_image_summary(ctx.attr<std::string>("tag"), ctx.input(0),
                                                     static_cast<int>(max_images)));
             },
         .summary = "a Summary (1-D uint8) with up to attr max_images PNG images",
         .not_differentiable = true}),
    op_registrar({.name = "text_summary",
                  .num_inputs = 0,
                  .infer =
                      [](const shape_context& c) {
                        c.attr<std::string>("tag");
                        c.attr<std::string>("text");
                        return std::vector<tensor_spec>{summary_spec()};
                      },
                  .kernel =
                      [](kernel_context& ctx) {
                        set_summary(ctx, encode_text_summary(ctx.attr<std::string>("tag"),
                                                             ctx.attr<std::string>("text")));
                      },
                  .summary = "a Summary (1-D uint8) with attr text for the text plugin",
                  .not_differentiable = true}),
    op_registrar({.name = "merge_summary",
                  .num_inputs = -1,
                  .min_inputs = 1,
                  .infer = merge_infer,
                  .kernel = merge_kernel,
                  .summary = "the Summaries of its inputs as one (their bytes concatenated)",
                  .not_differentiable = true}),
};

}  // namespace

std::string encode_scalar_summary(const std::string& tag, double v) {
  writer value;
  value.bytes_field(value_tag, tag);
  value.float_field(value_simple, static_cast<float>(v));
  return wrap_value(value);
}

std::string encode_histogram_summary(const std::string& tag, const tensor& values) {
  const std::string op = "histogram_summary";
  check_numeric(op, values.type());
  histogram h;
  visit_dtype(values.type(), [&](auto type_tag) {
    using T = decltype(type_tag);
    const T* p = values.data<T>();
    for (int64_t i = 0; i < values.num_elements(); ++i) {
      const auto v = static_cast<double>(p[i]);
      if (!std::isfinite(v))
        fail(op, "non-finite value " + std::to_string(v) + " in the values of '" + tag + "'");
      h.add(v);
    }
  });
  writer value;
  value.bytes_field(value_tag, tag);
  value.message_field(value_histo, h.encode());
  return wrap_value(value);
}

std::string encode_image_summary(const std::string& tag, const tensor& images, int max_images) {
  const std::string op = "image_summary";
  check_image_spec(op, images.type(), images.dims(), max_images);
  const auto& d = images.dims();
  const int64_t n = std::min<int64_t>(d[0], max_images), h = d[1], w = d[2], c = d[3];
  if (n > 0 && (h <= 0 || w <= 0))
    fail(op, "images must have a positive height and width, got shape " + d.to_string());
  const int64_t per_image = h * w * c;
  std::string out;
  for (int64_t i = 0; i < n; ++i) {
    const std::string image_tag =
        max_images > 1 ? tag + "/image/" + std::to_string(i) : tag + "/image";
    std::vector<uint8_t> pixels;
    const uint8_t* p = nullptr;
    if (images.type() == dtype::uint8) {
      p = images.data<uint8_t>() + i * per_image;
    } else {
      visit_floating(images.type(), op.c_str(), [&](auto type_tag) {
        using T = decltype(type_tag);
        pixels = normalize_float_image(images.data<T>() + i * per_image, h * w, c);
      });
      p = pixels.data();
    }
    out += wrap_value(image_summary_value(image_tag, p, h, w, c));
  }
  return out;
}

std::string encode_text_summary(const std::string& tag, const std::string& text) {
  writer shape_proto;   // an empty TensorShapeProto: a scalar
  writer tensor_proto;  // TensorProto{dtype=1, tensor_shape=2, string_val=8}
  tensor_proto.varint_field(1, dt_string);
  tensor_proto.message_field(2, shape_proto);
  tensor_proto.bytes_field(8, text);
  writer plugin, metadata;  // SummaryMetadata{plugin_data=1{plugin_name=1}}
  plugin.bytes_field(1, "text");
  metadata.message_field(1, plugin);
  writer value;
  value.bytes_field(value_tag, tag);
  value.message_field(value_tensor, tensor_proto);
  value.message_field(value_metadata, metadata);
  return wrap_value(value);
}

std::string summary_bytes(const tensor& serialized) {
  if (serialized.type() != dtype::uint8 || serialized.rank() != 1)
    fail("summary", "expects a 1-D uint8 tensor (a summary op's output), got " +
                        std::string(dtype_name(serialized.type())) + serialized.dims().to_string());
  if (serialized.num_elements() == 0) return {};
  return std::string(reinterpret_cast<const char*>(serialized.data<uint8_t>()),
                     static_cast<size_t>(serialized.num_elements()));
}

tensor summary_tensor(const std::string& bytes) {
  tensor t(dtype::uint8, shape{static_cast<int64_t>(bytes.size())});
  if (!bytes.empty()) std::memcpy(t.raw_mutable_data(), bytes.data(), bytes.size());
  return t;
}

output scalar_summary(const std::string& tag, output value, const std::string& name) {
  return make_op("scalar_summary", {value}, {{"tag", tag}}, name);
}

output histogram_summary(const std::string& tag, output values, const std::string& name) {
  return make_op("histogram_summary", {values}, {{"tag", tag}}, name);
}

output image_summary(const std::string& tag, output images, int max_images,
                     const std::string& name) {
  return make_op("image_summary", {images}, {{"tag", tag}, {"max_images", int64_t{max_images}}},
                 name);
}

output text_summary(graph& g, const std::string& tag, const std::string& text,
                    const std::string& name) {
  auto& n = g.add_node("text_summary", {}, {{"tag", tag}, {"text", text}},
                       name.empty() ? "text_summary" : name);
  return output(&g, {n.id, 0});
}

output merge_summary(const std::vector<output>& summaries, const std::string& name) {
  return make_op("merge_summary", summaries, {}, name);
}

output merge_all_summaries(graph& g, const std::string& name) {
  std::vector<output> found;
  for (const node& n : g.nodes())
    if (summary_ops().count(n.op)) found.emplace_back(&g, endpoint{n.id, 0});
  if (found.empty()) return {};
  return merge_summary(found, name);
}

}  // namespace actorflow
