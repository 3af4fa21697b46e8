#include "perf/bench_conv_onednn.hpp"

#if defined(ACTORFLOW_HAS_ONEDNN)
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "perf/bench_util.hpp"
#endif

namespace actorflow::bench {

#if defined(ACTORFLOW_HAS_ONEDNN)
namespace {

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

// One operand: the user's NHWC/HWIO memory, and the primitive's own (the same
// memory unless the primitive wants another layout).
struct operand {
  memory user, own;
  bool reordered() const { return user != own; }
};

operand make_operand(const engine& eng, const memory::desc& user_md, const memory::desc& wanted) {
  memory user(user_md, eng);
  auto* p = static_cast<float*>(user.get_data_handle());
  for (size_t i = 0; i < user_md.get_size() / sizeof(float); ++i)
    p[i] = float(i % 13) / 13.0f - 0.5f;
  return {user, wanted == user_md ? user : memory(wanted, eng)};
}

struct conv_descs {
  memory::desc src, weights, dst;
  memory::dims strides, pad_l, pad_r;
};

// TensorFlow's SAME padding: the extra row or column goes to the bottom/right; VALID: none.
conv_descs describe(const conv_layer_shape& l, bool blocked) {
  const int64_t oh = l.out(l.h, l.kh), ow = l.out(l.w, l.kw);
  auto pad = [&](int64_t out, int64_t in, int64_t k) {
    return l.same ? std::max<int64_t>((out - 1) * l.stride + k - in, 0) : int64_t{0};
  };
  const int64_t ph = pad(oh, l.h, l.kh), pw = pad(ow, l.w, l.kw);
  auto md = [&](memory::dims d, tag t) { return memory::desc(d, dt::f32, blocked ? tag::any : t); };
  return {md({l.n, l.c, l.h, l.w}, tag::nhwc),
          md({l.k, l.c, l.kh, l.kw}, tag::hwio),
          md({l.n, l.k, oh, ow}, tag::nhwc),
          {l.stride, l.stride},
          {ph / 2, pw / 2},
          {ph - ph / 2, pw - pw / 2}};
}

memory::desc user_desc(const memory::desc& d, tag t) { return memory::desc(d.dims(), dt::f32, t); }

}  // namespace

std::optional<double> onednn_conv_seconds(const conv_layer_shape& l, conv_pass pass, bool blocked,
                                          int threads, int repeats) {
  // Threads that ran actorflow's GEMM calls were set to one OpenMP thread;
  // this one gets it back after, or its next GEMM calls would start a pool.
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  struct restore {
    int threads;
    ~restore() { omp_set_num_threads(threads); }
  } restore_after{before};
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  auto d = describe(l, blocked);
  const auto algo = algorithm::convolution_direct;
  convolution_forward::primitive_desc fwd(
      {prop_kind::forward_training, algo, d.src, d.weights, d.dst, d.strides, d.pad_l, d.pad_r},
      eng);
  // Inputs are reordered in before the primitive, the result out after it.
  std::vector<std::pair<operand, int>> inputs;
  operand result;
  primitive conv;
  auto in = [&](const memory::desc& wanted, tag t, int arg) {
    inputs.push_back({make_operand(eng, user_desc(wanted, t), wanted), arg});
  };
  auto out = [&](const memory::desc& wanted, tag t) {
    result = make_operand(eng, user_desc(wanted, t), wanted);
  };
  if (pass == conv_pass::forward) {
    in(fwd.src_desc(), tag::nhwc, DNNL_ARG_SRC);
    in(fwd.weights_desc(), tag::hwio, DNNL_ARG_WEIGHTS);
    out(fwd.dst_desc(), tag::nhwc);
    conv = convolution_forward(fwd);
  } else if (pass == conv_pass::backprop_input) {
    convolution_backward_data::primitive_desc bwd(
        {algo, d.src, d.weights, d.dst, d.strides, d.pad_l, d.pad_r}, eng, fwd);
    in(bwd.diff_dst_desc(), tag::nhwc, DNNL_ARG_DIFF_DST);
    in(bwd.weights_desc(), tag::hwio, DNNL_ARG_WEIGHTS);
    out(bwd.diff_src_desc(), tag::nhwc);
    conv = convolution_backward_data(bwd);
  } else {
    convolution_backward_weights::primitive_desc bwd(
        {algo, d.src, d.weights, d.dst, d.strides, d.pad_l, d.pad_r}, eng, fwd);
    in(bwd.src_desc(), tag::nhwc, DNNL_ARG_SRC);
    in(bwd.diff_dst_desc(), tag::nhwc, DNNL_ARG_DIFF_DST);
    out(bwd.diff_weights_desc(), tag::hwio);
    conv = convolution_backward_weights(bwd);
  }
  const int result_arg = pass == conv_pass::forward          ? DNNL_ARG_DST
                         : pass == conv_pass::backprop_input ? DNNL_ARG_DIFF_SRC
                                                             : DNNL_ARG_DIFF_WEIGHTS;
  std::unordered_map<int, memory> args{{result_arg, result.own}};
  for (auto& [o, arg] : inputs) args[arg] = o.own;
  std::vector<std::pair<reorder, operand>> reorders_in;
  for (auto& [o, arg] : inputs)
    if (o.reordered()) reorders_in.push_back({reorder(o.user, o.own), o});
  std::optional<reorder> reorder_out;
  if (result.reordered()) reorder_out = reorder(result.own, result.user);
  return median_seconds(repeats, 2, [&] {
    for (auto& [r, o] : reorders_in) r.execute(s, o.user, o.own);
    conv.execute(s, args);
    if (reorder_out) reorder_out->execute(s, result.own, result.user);
    s.wait();
  });
}

#else

std::optional<double> onednn_conv_seconds(const conv_layer_shape&, conv_pass, bool, int, int) {
  return std::nullopt;
}

#endif

}  // namespace actorflow::bench
