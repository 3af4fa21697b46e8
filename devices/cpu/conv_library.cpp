#include "devices/cpu/conv_library.hpp"

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "devices/cpu/gemm_library.hpp"

#if defined(ACTORFLOW_HAS_ONEDNN)
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "devices/cpu/onednn_threads.hpp"
#endif

namespace actorflow::cpu {

namespace {

bool conv_library_at_start() {
  const char* choice = std::getenv("ACTORFLOW_CPU_CONV");
  return !(choice && std::string_view(choice) == "own");
}

std::atomic<bool> conv_on{conv_library_at_start()};
std::atomic<conv_rules> rules{conv_rules::this_cpu};

}  // namespace

void use_conv_library(bool on) { conv_on.store(on, std::memory_order_relaxed); }

void set_conv_rules(conv_rules r) { rules.store(r, std::memory_order_relaxed); }

#if defined(ACTORFLOW_HAS_ONEDNN)

bool conv_library_on() { return conv_on.load(std::memory_order_relaxed) && gemm_library_on(); }

namespace {

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

const engine& cpu_engine() {
  static const engine eng(engine::kind::cpu, 0);
  return eng;
}

// Streams are cheap on the CPU but not meant to be shared between threads.
stream& thread_stream() {
  thread_local stream s(cpu_engine());
  return s;
}

// 64-byte aligned float storage (oneDNN's blocked loads want whole cache lines).
struct aligned_floats {
  struct release {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, release> data;
  size_t capacity = 0;  // bytes

  float* reserve(size_t bytes) {
    if (bytes > capacity) {
      const size_t rounded = (bytes + 63) / 64 * 64;
      data.reset(static_cast<float*>(std::aligned_alloc(64, rounded)));
      if (!data) throw std::bad_alloc();
      capacity = rounded;
    }
    return data.get();
  }
};

// Per-thread buffers for one slice: its operands in oneDNN's layouts and the
// primitive's scratchpad. Used only inside one task body, which makes no TBB
// call that could run another body on this thread meanwhile.
enum buffer_slot { first_input, second_input, slice_result, scratchpad, slots };

float* thread_buffer(buffer_slot slot, size_t bytes) {
  thread_local aligned_floats buffers[slots];
  return buffers[slot].reserve(std::max<size_t>(bytes, 64));
}

memory wrap(const memory::desc& d, const void* p) {
  return memory(d, cpu_engine(), const_cast<void*>(p));
}

// An operand as the op holds it (NHWC, HWIO) and as the primitive wants it.
struct operand {
  memory::desc user, own;
  std::optional<reorder> to_own, to_user;  // the one the operand's direction needs

  static operand input(const memory::desc& user, const memory::desc& own) {
    operand o{user, own, {}, {}};
    if (own != user)
      o.to_own = reorder(reorder::primitive_desc(cpu_engine(), user, cpu_engine(), own));
    return o;
  }
  static operand output(const memory::desc& user, const memory::desc& own) {
    operand o{user, own, {}, {}};
    if (own != user)
      o.to_user = reorder(reorder::primitive_desc(cpu_engine(), own, cpu_engine(), user));
    return o;
  }
};

// Where a filter's (h, w, i, o) lies in an HWIO tensor of which it may be a
// part: that tensor's input and output channel counts (0: the filter's own),
// and the part's first input and output channel.
struct hwio_window {
  int64_t c = 0, k = 0, i0 = 0, o0 = 0;
};

// The filter in the primitive's blocked layout, as tables: the offset of
// element (o, i, h, w) is o_at[o] + i_at[i] + h_at[h] + w_at[w] (a blocked
// layout's offset is a sum of per-dimension terms). oneDNN's own reorder from
// HWIO into these layouts runs at about 1.3 GB/s on one thread (28 ms for
// Overfeat's 37.7 MB filter, a fifth of the convolution); these loops run on
// the arena's threads and copy runs of output channels where they are
// contiguous in both layouts.
struct filter_layout {
  memory::desc desc;
  std::vector<int64_t> o_at, i_at, h_at, w_at;
  int64_t o_run = 1;    // output channels contiguous in the blocked layout (its innermost block)
  size_t elements = 0;  // including the zero padding of the channel blocks
  bool padded = false;

  explicit filter_layout(const memory::desc& md) : desc(md) {
    const dnnl_memory_desc_t& d = md.data;
    if (d.ndims != 4 || d.format_kind != dnnl_blocked)
      throw std::runtime_error("unexpected filter layout");
    const auto& b = d.format_desc.blocking;
    std::vector<int64_t>* at[4] = {&o_at, &i_at, &h_at, &w_at};
    for (int dim = 0; dim < 4; ++dim) {
      // Blocks of this dimension, outermost first, and their strides.
      int64_t total = 1;
      for (int k = 0; k < b.inner_nblks; ++k)
        if (b.inner_idxs[k] == dim) total *= b.inner_blks[k];
      at[dim]->resize(static_cast<size_t>(d.dims[dim]));
      for (int64_t x = 0; x < d.dims[dim]; ++x) {
        int64_t off = (x / total) * b.strides[dim], inner_stride = 1, div = 1;
        for (int k = b.inner_nblks - 1; k >= 0; --k) {
          if (b.inner_idxs[k] == dim) {
            off += ((x / div) % b.inner_blks[k]) * inner_stride;
            div *= b.inner_blks[k];
          }
          inner_stride *= b.inner_blks[k];
        }
        (*at[dim])[static_cast<size_t>(x)] = off;
      }
      padded = padded || d.padded_dims[dim] != d.dims[dim];
    }
    if (b.inner_nblks > 0 && b.inner_idxs[b.inner_nblks - 1] == 0)
      o_run = std::min<dnnl_dim_t>(b.inner_blks[b.inner_nblks - 1], 64);
    elements = md.get_size() / memory::data_type_size(md.data_type());
  }

  // Calls f(hwio offset, blocked base) for each (h, w, i) row of the filter
  // in the HWIO tensor `in` (this filter may be a part of its channels).
  template <class F>
  void each_row(const hwio_window& in, bool parallel, F&& f) const {
    const int64_t kh = int64_t(h_at.size()), kw = int64_t(w_at.size()), c = int64_t(i_at.size());
    const int64_t ld = in.k ? in.k : int64_t(o_at.size()), rows_per_tap = in.c ? in.c : c;
    auto rows = [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t i = row % c, hw = row / c;
        f((hw * rows_per_tap + in.i0 + i) * ld + in.o0,
          h_at[size_t(hw / kw)] + w_at[size_t(hw % kw)] + i_at[size_t(i)]);
      }
    };
    if (!parallel) return rows(0, kh * kw * c);
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, kh * kw * c, 64),
                      [&](const auto& r) { rows(r.begin(), r.end()); });
  }

  /// blocked = hwio (through `in`), in this layout (its channel padding zeroed).
  template <class T>
  void from_hwio(const T* hwio, T* blocked, const hwio_window& in = {},
                 bool parallel = true) const {
    if (padded) std::fill(blocked, blocked + elements, T{});
    const int64_t k = int64_t(o_at.size());
    each_row(in, parallel, [&](int64_t src, int64_t base) {
      for (int64_t o = 0; o < k; o += o_run) {
        T* to = blocked + base + o_at[size_t(o)];
        const int64_t n = std::min(o_run, k - o);
        for (int64_t j = 0; j < n; ++j) to[j] = hwio[src + o + j];
      }
    });
  }

  /// hwio (through `out`) = the sum of `parts`, each float32 in this layout,
  /// rounded once to T.
  template <class T>
  void sum_to_hwio(const std::vector<const float*>& parts, T* hwio, const hwio_window& out = {},
                   bool parallel = true) const {
    const int64_t k = int64_t(o_at.size());
    each_row(out, parallel, [&](int64_t dst, int64_t base) {
      for (int64_t o = 0; o < k; o += o_run) {
        const int64_t n = std::min(o_run, k - o), at = base + o_at[size_t(o)];
        float sum[64];  // o_run is a block of channels: 16 (or 32, 64)
        for (int64_t j = 0; j < n; ++j) sum[j] = parts[0][at + j];
        for (size_t t = 1; t < parts.size(); ++t)
          for (int64_t j = 0; j < n; ++j) sum[j] += parts[t][at + j];
        T* to = hwio + dst + o;
        for (int64_t j = 0; j < n; ++j) {
          if constexpr (std::is_same_v<T, bfloat16>)
            to[j] = to_bfloat16(sum[j]);
          else
            to[j] = sum[j];
        }
      }
    });
  }
};

// The primitive for slices of `images` images, its sliced operands (inputs in
// argument order, then the result) and its scratchpad.
struct slice_plan {
  int64_t images = 0;
  primitive conv;
  std::vector<std::pair<int, operand>> sliced_inputs;  // (oneDNN argument, operand)
  std::pair<int, operand> result;
  size_t scratchpad_bytes = 0;
};

// A large filter's convolution split by channels instead of images: each
// part runs over all images for its share of the result's channels (the
// output channels of the forward and the filter gradient, the input channels
// of the input gradient), so each thread's primitive reads (or writes) only
// its part of the filter, and no thread sums a partial filter of its own.
// Split by images, each thread's primitive runs the whole filter (Overfeat's
// 37.7 MB) through memory, and the filter gradient's partial sums are added
// after: 0.80-0.93x oneDNN's own threading on that layer.
struct channel_parts {
  int64_t channels = 0;  // per part, a whole number of oneDNN's blocks of 16
  int shared_arg = 0;
  operand shared;  // all images: reordered once and read by every part
  slice_plan full, last;
  std::optional<filter_layout> full_filter, last_filter;
};

// A problem's plan: the filter (shared by all slices) and one or two slice
// plans (full slices, and the last, smaller one); or the channel parts.
struct problem_plan {
  int64_t images_per_slice = 0;
  int filter_arg = 0;
  std::optional<filter_layout> filter;  // its desc is the primitive's filter layout
  slice_plan full, last;
  std::optional<channel_parts> by_channels;
};

memory::dims dims_nchw(int64_t n, int64_t h, int64_t w, int64_t c) { return {n, c, h, w}; }

struct conv_descs {
  memory::desc src, weights, dst;  // tag::any: the primitive picks
  memory::desc src_user, dst_user;
  memory::dims strides, pad_l, pad_r;
};

// `data`: the type of the activations and of the filter the forward reads;
// `filter_type`: that of the filter in the pass (the filter gradient is
// summed in float32 whatever the data).
conv_descs describe(const conv_problem& p, int64_t images, const memory::desc* weights, dt data,
                    dt filter_type) {
  auto any = [&](memory::dims d, dt t) { return memory::desc(d, t, tag::any); };
  auto user = [&](memory::dims d, tag t) { return memory::desc(d, data, t); };
  const memory::dims src = dims_nchw(images, p.h, p.w, p.c),
                     dst = dims_nchw(images, p.oh, p.ow, p.k);
  const memory::dims wei{p.k, p.c, p.kh, p.kw};
  const int64_t pad_bottom = (p.oh - 1) * p.sh + p.kh - p.h - p.pad_top;
  const int64_t pad_right = (p.ow - 1) * p.sw + p.kw - p.w - p.pad_left;
  return {
      any(src, data),          weights ? *weights : any(wei, filter_type),
      any(dst, data),          user(src, tag::nhwc),
      user(dst, tag::nhwc),    {p.sh, p.sw},
      {p.pad_top, p.pad_left}, {std::max<int64_t>(pad_bottom, 0), std::max<int64_t>(pad_right, 0)}};
}

primitive_attr user_scratchpad() {
  primitive_attr attr;
  attr.set_scratchpad_mode(scratchpad_mode::user);
  return attr;
}

// One pass's primitive over `images` images of problem `p`, and the layouts
// it picked: `input` and `output` are the images' operands (the forward's
// src and dst; the input gradient's diff_src and diff_dst; the filter
// gradient's src and diff_dst), `filter` the filter's (diff_weights for the
// filter gradient, in float32). `weights`, when given, fixes the filter's.
struct pass_primitive {
  primitive conv;
  memory::desc input, output, filter;
  size_t scratchpad_bytes = 0;
};

pass_primitive make_primitive(conv_pass pass, const conv_problem& p, int64_t images, dt data,
                              const memory::desc* weights) {
  const dt filter_type = pass == conv_pass::backprop_filter ? dt::f32 : data;
  const auto d = describe(p, images, weights, data, filter_type);
  const auto algo = algorithm::convolution_direct;
  const auto attr = user_scratchpad();
  // The forward's own, or the backward passes' hint (its filter in `data`).
  const auto h = describe(p, images, filter_type == data ? weights : nullptr, data, data);
  convolution_forward::primitive_desc fwd(
      convolution_forward::desc(prop_kind::forward_training, algo, h.src, h.weights, h.dst,
                                h.strides, h.pad_l, h.pad_r),
      attr, cpu_engine());
  if (pass == conv_pass::forward)
    return {convolution_forward(fwd), fwd.src_desc(), fwd.dst_desc(), fwd.weights_desc(),
            fwd.scratchpad_desc().get_size()};
  if (pass == conv_pass::backprop_input) {
    convolution_backward_data::primitive_desc bwd(
        convolution_backward_data::desc(algo, d.src, d.weights, d.dst, d.strides, d.pad_l, d.pad_r),
        attr, cpu_engine(), fwd);
    return {convolution_backward_data(bwd), bwd.diff_src_desc(), bwd.diff_dst_desc(),
            bwd.weights_desc(), bwd.scratchpad_desc().get_size()};
  }
  convolution_backward_weights::primitive_desc bwd(
      convolution_backward_weights::desc(algo, d.src, d.weights, d.dst, d.strides, d.pad_l,
                                         d.pad_r),
      attr, cpu_engine(), fwd);
  return {convolution_backward_weights(bwd), bwd.src_desc(), bwd.diff_dst_desc(),
          bwd.diff_weights_desc(), bwd.scratchpad_desc().get_size()};
}

// The slice plan for `images` images; `weights`, when given, fixes the filter's
// layout (the last slice must use the layout the full slices' plan chose).
slice_plan plan_slice(conv_pass pass, const conv_problem& p, int64_t images, dt data,
                      const memory::desc* weights, memory::desc* chosen_weights) {
  const auto d = describe(p, images, nullptr, data, data);
  const pass_primitive prim = make_primitive(pass, p, images, data, weights);
  slice_plan s{images, prim.conv, {}, {}, prim.scratchpad_bytes};
  *chosen_weights = prim.filter;
  if (pass == conv_pass::forward) {
    s.sliced_inputs.push_back({DNNL_ARG_SRC, operand::input(d.src_user, prim.input)});
    s.result = {DNNL_ARG_DST, operand::output(d.dst_user, prim.output)};
  } else if (pass == conv_pass::backprop_input) {
    s.sliced_inputs.push_back({DNNL_ARG_DIFF_DST, operand::input(d.dst_user, prim.output)});
    s.result = {DNNL_ARG_DIFF_SRC, operand::output(d.src_user, prim.input)};
  } else {
    s.sliced_inputs.push_back({DNNL_ARG_SRC, operand::input(d.src_user, prim.input)});
    s.sliced_inputs.push_back({DNNL_ARG_DIFF_DST, operand::input(d.dst_user, prim.output)});
    // The slices' partial filters are summed in the primitive's layout and
    // converted once (the problem plan's filter_layout).
    s.result = {DNNL_ARG_DIFF_WEIGHTS, operand{{}, prim.filter, {}, {}}};
  }
  return s;
}

// Images per slice. Few, large slices: each thread's primitive then loops
// over its images with the filter in cache (slices of one image run the
// 1024-channel layers' filters through memory once per image, 0.83x, and
// the 28x28 images of the CNN's first layer at 0.15x). At most about 16 MiB
// of operands per slice, since each thread keeps its slice's buffers. And
// balanced: the size that gives the busiest thread the fewest images (VGG's
// 56x56 layer in 5 slices of 3 and one of 1: 0.8x).
int64_t images_per_slice(const conv_problem& p, dt data) {
  const int64_t image_bytes =
      (p.h * p.w * p.c + p.oh * p.ow * p.k) * int64_t(memory::data_type_size(data));
  const int64_t threads = std::max(1, tbb::this_task_arena::max_concurrency());
  const int64_t by_memory = (int64_t{16} << 20) / std::max<int64_t>(image_bytes, 1);
  const int64_t largest = std::clamp<int64_t>(by_memory, 1, (p.n + threads - 1) / threads);
  int64_t best = 1, best_load = INT64_MAX;
  for (int64_t per = 1; per <= largest; ++per) {
    const int64_t slices = (p.n + per - 1) / per;
    const int64_t load = (slices + threads - 1) / threads * per;  // the busiest thread's images
    if (load <= best_load) best = per, best_load = load;
  }
  return best;
}

// NHWC dims {n, channels, h, w} within a tensor of `all` channels.
memory::desc channels_of(int64_t n, int64_t channels, int64_t h, int64_t w, int64_t all, dt type) {
  return memory::desc({n, channels, h, w}, type, memory::dims{h * w * all, 1, w * all, all});
}

// The primitive of one part of `channels` channels (from some first one: the
// caller offsets the pointers) over all images. Sets `shared` to the operand
// all parts read whole, `filter` to the part's filter layout.
slice_plan plan_channel_part(conv_pass pass, const conv_problem& p, int64_t channels, dt data,
                             channel_parts* c, std::optional<filter_layout>* filter) {
  conv_problem part = p;
  (pass == conv_pass::backprop_input ? part.c : part.k) = channels;
  const auto d = describe(part, p.n, nullptr, data, data);
  const pass_primitive prim = make_primitive(pass, part, p.n, data, nullptr);
  slice_plan s{p.n, prim.conv, {}, {}, prim.scratchpad_bytes};
  operand shared;
  if (pass == conv_pass::forward) {
    c->shared_arg = DNNL_ARG_SRC;
    shared = operand::input(d.src_user, prim.input);
    s.result = {DNNL_ARG_DST,
                operand::output(channels_of(p.n, channels, p.oh, p.ow, p.k, data), prim.output)};
  } else if (pass == conv_pass::backprop_input) {
    c->shared_arg = DNNL_ARG_DIFF_DST;
    shared = operand::input(d.dst_user, prim.output);
    s.result = {DNNL_ARG_DIFF_SRC,
                operand::output(channels_of(p.n, channels, p.h, p.w, p.c, data), prim.input)};
  } else {
    c->shared_arg = DNNL_ARG_SRC;
    shared = operand::input(d.src_user, prim.input);
    s.sliced_inputs.push_back(
        {DNNL_ARG_DIFF_DST,
         operand::input(channels_of(p.n, channels, p.oh, p.ow, p.k, data), prim.output)});
    s.result = {DNNL_ARG_DIFF_WEIGHTS, operand{{}, prim.filter, {}, {}}};
  }
  if (c->shared.own != memory::desc() && c->shared.own != shared.own)
    throw std::runtime_error("the parts want the shared operand in different layouts");
  c->shared = std::move(shared);
  filter->emplace(prim.filter);
  return s;
}

// Channel parts for a forward or filter gradient whose filter is large (8 MiB
// and up) and whose activations are at most 32 MiB (each thread keeps its
// part's buffers); nothing otherwise. An input gradient split by images ran
// as fast or faster on every such layer measured (ResNet-50's 4x4x512 3x3
// layer at batch 16: 3.7 ms against 6.3 by input channels; VGG's and
// Overfeat's level within 7%), where its filter gradient by channels took
// half the time (3.5 ms against 6.9).
std::optional<channel_parts> plan_channel_parts(conv_pass pass, const conv_problem& p, dt data) {
  const int64_t threads = std::max(1, tbb::this_task_arena::max_concurrency());
  const int64_t elem = int64_t(memory::data_type_size(data));
  const int64_t split = pass == conv_pass::backprop_input ? p.c : p.k;
  channel_parts c;
  c.channels = ((split + threads - 1) / threads + 15) / 16 * 16;
  const bool large = p.kh * p.kw * p.c * p.k * 4 >= (int64_t{8} << 20);
  const bool fits =
      std::max(p.n * p.h * p.w * p.c, p.n * p.oh * p.ow * p.k) * elem <= (int64_t{32} << 20);
  if (pass == conv_pass::backprop_input || threads < 2 || !large || !fits || c.channels >= split)
    return std::nullopt;
  c.full = plan_channel_part(pass, p, c.channels, data, &c, &c.full_filter);
  if (const int64_t rest = split % c.channels; rest > 0)
    c.last = plan_channel_part(pass, p, rest, data, &c, &c.last_filter);
  return c;
}

std::unique_ptr<problem_plan> make_plan(conv_pass pass, const conv_problem& p, dt data) {
  auto plan = std::make_unique<problem_plan>();
  try {
    plan->by_channels = plan_channel_parts(pass, p, data);
    if (plan->by_channels) return plan;
  } catch (const std::exception&) {
    // Split by images instead.
  }
  plan->images_per_slice = images_per_slice(p, data);
  memory::desc weights;
  plan->full = plan_slice(pass, p, plan->images_per_slice, data, nullptr, &weights);
  if (const int64_t rest = p.n % plan->images_per_slice; rest > 0) {
    memory::desc same;
    plan->last = plan_slice(pass, p, rest, data, &weights, &same);
  }
  plan->filter_arg = pass == conv_pass::backprop_filter ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS;
  plan->filter.emplace(weights);
  return plan;
}

using plan_key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                            int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int>;

// Plans by problem and pass, made at first use; null where oneDNN has no
// primitive for the problem. A graph's shapes are few; an application that
// keeps changing them (an unknown batch size) is bounded by the cap. Shared:
// a kernel still running a plan keeps it when the cap clears the cache.
std::shared_ptr<const problem_plan> plan_for(conv_pass pass, const conv_problem& p, dt data) {
  static std::mutex mutex;
  static std::map<plan_key, std::shared_ptr<const problem_plan>> plans;
  constexpr size_t max_plans = 256;
  const int threads = tbb::this_task_arena::max_concurrency();
  const plan_key key{int(pass), p.n,  p.h,  p.w,  p.c,       p.k,        p.kh,    p.kw,
                     p.sh,      p.sw, p.oh, p.ow, p.pad_top, p.pad_left, threads, int(data)};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  if (plans.size() >= max_plans) plans.clear();
  std::shared_ptr<const problem_plan> plan;
  try {
    plan = make_plan(pass, p, data);
  } catch (const std::exception&) {  // dnnl::error, or a layout it does not describe
    plan = nullptr;                  // unimplemented for this problem: the caller's kernel runs
  }
  return plans.emplace(key, std::move(plan)).first->second;
}

// Runs a slice's primitive: its inputs reordered into this thread's buffers
// where the primitive wants another layout, its result written to `result`
// (in the primitive's layout; the caller reorders it where needed).
void run_slice(const slice_plan& s, const std::vector<const void*>& inputs,
               const std::vector<std::pair<int, memory>>& shared, void* result) {
  stream& strm = thread_stream();
  std::unordered_map<int, memory> args;
  for (size_t i = 0; i < s.sliced_inputs.size(); ++i) {
    const auto& [arg, o] = s.sliced_inputs[i];
    memory user = wrap(o.user, inputs[i]);
    if (!o.to_own) {
      args.emplace(arg, user);
      continue;
    }
    memory own = wrap(o.own, thread_buffer(buffer_slot(first_input + i), o.own.get_size()));
    o.to_own->execute(strm, user, own);
    args.emplace(arg, own);
  }
  for (const auto& [arg, m] : shared) args.emplace(arg, m);
  args.emplace(s.result.first, wrap(s.result.second.own, result));
  args.emplace(DNNL_ARG_SCRATCHPAD,
               memory(memory::desc({int64_t(s.scratchpad_bytes)}, dt::u8, tag::x), cpu_engine(),
                      thread_buffer(scratchpad, s.scratchpad_bytes)));
  s.conv.execute(strm, args);
}

const slice_plan& slice_of(const problem_plan& plan, int64_t images) {
  return images == plan.images_per_slice ? plan.full : plan.last;
}

// forward and backprop_input: each slice's result is its own part of `out`.
template <class T>
void run_sliced(const problem_plan& plan, const conv_problem& p, int64_t in_image,
                int64_t out_image, const T* sliced, const T* filter_user, T* out,
                const std::function<void(float*, int64_t)>& finish_rows) {
  aligned_floats blocked;
  plan.filter->from_hwio(filter_user,
                         reinterpret_cast<T*>(blocked.reserve(plan.filter->elements * sizeof(T))));
  const memory filter = wrap(plan.filter->desc, blocked.data.get());
  const int64_t per = plan.images_per_slice, count = (p.n + per - 1) / per;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, count, 1), [&](const auto& r) {
    use_one_openmp_thread();
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      const int64_t n0 = i * per, images = std::min(per, p.n - n0);
      const slice_plan& s = slice_of(plan, images);
      T* user_out = out + n0 * out_image;
      const operand& res = s.result.second;
      void* own_out = user_out;
      if (res.to_user) own_out = thread_buffer(slice_result, res.own.get_size());
      run_slice(s, {sliced + n0 * in_image}, {{plan.filter_arg, filter}}, own_out);
      if (res.to_user) {
        memory own = wrap(res.own, own_out), user = wrap(res.user, user_out);
        res.to_user->execute(thread_stream(), own, user);
      }
      if constexpr (std::is_same_v<T, float>)
        if (finish_rows) finish_rows(user_out, images * p.oh * p.ow);
    }
  });
}

// backprop_filter: each thread sums its slices' partial filters, in the
// primitive's layout; the partial sums are added and reordered once.
template <class T>
void run_filter_grad(const problem_plan& plan, const conv_problem& p, const T* x, const T* dy,
                     T* df) {
  const size_t bytes = plan.filter->elements * sizeof(float);
  tbb::enumerable_thread_specific<std::pair<aligned_floats, bool>> partials;
  const int64_t per = plan.images_per_slice, count = (p.n + per - 1) / per;
  const int64_t x_image = p.h * p.w * p.c, dy_image = p.oh * p.ow * p.k;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, count, 1), [&](const auto& r) {
    use_one_openmp_thread();
    auto& [sum, started] = partials.local();
    float* acc = sum.reserve(bytes);
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      const int64_t n0 = i * per, images = std::min(per, p.n - n0);
      float* target = started ? thread_buffer(slice_result, bytes) : acc;
      run_slice(slice_of(plan, images), {x + n0 * x_image, dy + n0 * dy_image}, {}, target);
      if (started)
        for (size_t j = 0; j < plan.filter->elements; ++j) acc[j] += target[j];
      started = true;
    }
  });
  std::vector<const float*> parts;
  for (auto& [sum, started] : partials)
    if (started) parts.push_back(sum.data.get());
  plan.filter->sum_to_hwio(parts, df);
}

// A pass by channel parts: the shared operand reordered once; each part's
// filter channels converted, its primitive run and its result written into
// its channels by one thread. `a` and `b` are library_conv's operands.
template <class T>
void run_by_channels(conv_pass pass, const channel_parts& c, const conv_problem& p, const T* a,
                     const T* b, T* out, const std::function<void(float*, int64_t)>& finish_rows) {
  const T* shared_user = pass == conv_pass::backprop_input ? b : a;
  aligned_floats shared_buffer;
  memory shared = wrap(c.shared.user, shared_user);
  if (c.shared.to_own) {
    memory own = wrap(c.shared.own, shared_buffer.reserve(c.shared.own.get_size()));
    c.shared.to_own->execute(thread_stream(), shared, own);
    shared = own;
  }
  const int64_t split = pass == conv_pass::backprop_input ? p.c : p.k;
  const int64_t parts = (split + c.channels - 1) / c.channels;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, parts, 1), [&](const auto& r) {
    use_one_openmp_thread();
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      const int64_t first = i * c.channels;
      const bool full = std::min(c.channels, split - first) == c.channels;
      const slice_plan& s = full ? c.full : c.last;
      const filter_layout& layout = full ? *c.full_filter : *c.last_filter;
      if (pass == conv_pass::backprop_filter) {
        float* result = thread_buffer(slice_result, layout.elements * sizeof(float));
        run_slice(s, {b + first}, {{c.shared_arg, shared}}, result);
        layout.sum_to_hwio({result}, out + first, hwio_window{.k = p.k}, /*parallel=*/false);
        continue;
      }
      // The part's filter: output channels [first, ...) of the forward's,
      // input channels [first, ...) of the input gradient's.
      const hwio_window window = pass == conv_pass::forward
                                     ? hwio_window{.c = p.c, .k = p.k, .o0 = first}
                                     : hwio_window{.c = p.c, .k = p.k, .i0 = first};
      T* weights = reinterpret_cast<T*>(thread_buffer(second_input, layout.elements * sizeof(T)));
      layout.from_hwio(pass == conv_pass::forward ? b : a, weights, window, /*parallel=*/false);
      const memory part_filter = wrap(layout.desc, weights);
      const operand& res = s.result.second;
      void* own_out = out + first;
      if (res.to_user) own_out = thread_buffer(slice_result, res.own.get_size());
      run_slice(s, {}, {{c.shared_arg, shared}, {DNNL_ARG_WEIGHTS, part_filter}}, own_out);
      if (res.to_user) {
        memory own = wrap(res.own, own_out), user = wrap(res.user, out + first);
        res.to_user->execute(thread_stream(), own, user);
      }
    }
  });
  if constexpr (std::is_same_v<T, float>) {
    if (finish_rows)
      tbb::parallel_for(
          tbb::blocked_range<int64_t>(0, p.n * p.oh * p.ow, 1024),
          [&](const auto& r) { finish_rows(out + r.begin() * p.k, int64_t(r.size())); });
  }
}

}  // namespace

// Measured per layer and pass in actorflow-bench's conv group (every distinct
// layer of the CNN, AlexNet's first three, VGG-A and Overfeat; ours against
// this library in the same run, ratios of several runs):
// - the library is level or faster (up to 1.4x) on forwards and filter
//   gradients, except those of a 3x3 filter over 3 channels (VGG's first
//   layer: 0.71-0.75x, 27 products per output leave it memory-bound, and
//   the reorders of its 224x224x64 result cost more than its kernel saves);
// - on input gradients it is faster where the output is small (12x12 to 14x14:
//   1.07-1.19x), slower where it is 24x24 and up (VGG's and Overfeat's second
//   layer: 0.89-0.96x), and far slower under 16 input channels (0.2x: its
//   blocked layouts need 16);
// - on 1x1 filters at stride 1 ours is one GEMM on the NHWC operands as they
//   are, where the library adds its reorders: 0.59-0.95x (GoogLeNet's 1x1
//   layers); at stride 2 (ResNet-50's downsampling at 112x112 images, batch
//   16) ours gathers or scatters every other pixel around the same GEMM, and
//   the library's input gradient took 3.7x ours (29.7 ms against 8.1 for
//   7x7x1024 -> 4x4x2048), its filter gradient 1.2-2x;
// - at strides above 1 over 16 channels and more ours is faster in every pass
//   (a Zen 5 EPYC, convolutions alone: ResNet-50's stride-2 3x3 layers at 112
//   pixels 1.3-1.6x, Inception-v3's at 150 pixels 1.1-2.7x; the library's
//   best, on the 9x9x512 layer's forward, 0.8x ours);
// - its primitives take milliseconds to make, which only large problems repay.
// Those figures are from CPUs with AVX-512. Without it (a Zen 3, AVX2, the
// same run's rows, blocked layouts against ours) the library's input
// gradients are level or faster at every size over 16 channels (1.02-1.75x:
// ResNet-50's 28x28x64 3x3 layer 1.59x, VGG's 112x112x64 1.36x), and its
// filter gradients are faster up to 128 channels (1.1-1.8x), slower over more
// channels (0.76-0.93x: AlexNet's third layer, VGG's and Overfeat's from 128
// up) and under 16 channels (0.25x on the CNN's first layer, 0.82x on
// AlexNet's). On outputs of 4x4 pixels or fewer ours multiplies the whole
// patch matrix in one product planned for the threads (ops/conv.cpp), and is
// faster in every pass (ResNet-50's stage 4 3x3 layer at 112 pixels: 1.18x
// forward, 1.28x input, 1.59x filter gradient).
bool conv_library_chosen(conv_pass pass, const conv_problem& p) {
  constexpr int64_t min_macs = int64_t{1} << 22;
  const int64_t macs = p.n * p.oh * p.ow * p.k * p.kh * p.kw * p.c;
  const bool one_by_one = p.kh == 1 && p.kw == 1;
  const bool strided = p.sh > 1 || p.sw > 1;
  const conv_rules r = rules.load(std::memory_order_relaxed);
  const bool avx512 = r == conv_rules::this_cpu ? cpu_has_avx512_core() : r == conv_rules::avx512;
  if (!conv_library_on() || macs < min_macs || one_by_one) return false;
  if (strided && p.c >= 16) return false;
  if (!avx512 && p.oh * p.ow <= 16) return false;
  if (pass == conv_pass::backprop_input) return p.c >= 16 && (p.oh * p.ow <= 256 || !avx512);
  if (pass == conv_pass::backprop_filter && !avx512) return p.c >= 16 && p.c <= 128;
  return p.c >= 16 || p.kh * p.kw > 9;
}

namespace {

template <class T>
bool run_pass(conv_pass pass, const conv_problem& p, dt data, const T* a, const T* b, T* out,
              const std::function<void(float*, int64_t)>& finish_rows) {
  if (!conv_library_on() || p.n <= 0) return false;
  const std::shared_ptr<const problem_plan> plan = plan_for(pass, p, data);
  if (!plan) return false;
  use_one_openmp_thread();
  const int64_t x_image = p.h * p.w * p.c, y_image = p.oh * p.ow * p.k;
  try {
    if (plan->by_channels)
      run_by_channels(pass, *plan->by_channels, p, a, b, out, finish_rows);
    else if (pass == conv_pass::forward)
      run_sliced(*plan, p, x_image, y_image, a, b, out, finish_rows);
    else if (pass == conv_pass::backprop_input)
      run_sliced(*plan, p, y_image, x_image, b, a, out, {});
    else
      run_filter_grad(*plan, p, a, b, out);
  } catch (const dnnl::error& e) {
    fail(error_code::internal, "conv2d",
         std::string("oneDNN convolution failed: ") + e.what() + " (status " +
             std::to_string(int(e.status)) + ")");
  }
  return true;
}

}  // namespace

bool library_conv(conv_pass pass, const conv_problem& p, const float* a, const float* b, float* out,
                  const std::function<void(float*, int64_t)>& finish_rows) {
  return run_pass(pass, p, dt::f32, a, b, out, finish_rows);
}

bool library_conv_bf16(conv_pass pass, const conv_problem& p, const bfloat16* a, const bfloat16* b,
                       bfloat16* out) {
  return run_pass(pass, p, dt::bf16, a, b, out, {});
}

#else

bool conv_library_on() { return false; }

bool conv_library_chosen(conv_pass, const conv_problem&) { return false; }

bool library_conv(conv_pass, const conv_problem&, const float*, const float*, float*,
                  const std::function<void(float*, int64_t)>&) {
  return false;
}

bool library_conv_bf16(conv_pass, const conv_problem&, const bfloat16*, const bfloat16*,
                       bfloat16*) {
  return false;
}

#endif

}  // namespace actorflow::cpu
