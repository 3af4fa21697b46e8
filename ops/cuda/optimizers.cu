// Optimizer updates: one fused kernel per optimizer, one pass over the
// variable, its gradient and its slots, with ops/optimizers.cpp's formulas
// (PyTorch's). The learning rate is a device scalar read by every thread; the
// host-side scalars (Adam's bias corrections) arrive as kernel arguments and
// are combined with it in double precision, as the CPU does, before the cast.
#include <cmath>

#include "ops/cuda/device_util.cuh"

namespace actorflow::gpu::kernels {

namespace {

__device__ __forceinline__ double read_scalar(const void* p, bool is_double) {
  return is_double ? *static_cast<const double*>(p) : double(*static_cast<const float*>(p));
}

// The learning rate and the optional gradient scale (clipping's), device
// scalars read by every thread.
struct device_scalars {
  const void* lr;
  bool lr_double;
  const void* scale;  // null: 1
  bool scale_double;
  __device__ __forceinline__ double rate() const { return read_scalar(lr, lr_double); }
  __device__ __forceinline__ double grad_scale() const {
    return scale ? read_scalar(scale, scale_double) : 1.0;
  }
};

device_scalars scalars_of(const update_args& a) {
  return {a.lr, a.lr_type == dtype::float64, a.scale, a.scale_type == dtype::float64};
}

// Where gradient element i applies in the variable and its slots: i for a
// dense gradient; in the variable's row rows[i / row_size] for a row one.
struct row_map {
  const int64_t* rows;
  int64_t row_size;
  __device__ __forceinline__ int64_t operator()(int64_t i) const {
    return rows ? rows[i / row_size] * row_size + i % row_size : i;
  }
};

row_map rows_of(const update_args& a) { return {a.rows, a.row_size}; }

template <class T>
__global__ void sgd_kernel(int64_t n, T* __restrict__ w, const T* __restrict__ g, device_scalars k,
                           T wd, row_map at) {
  const T rate = T(k.rate()), gs = T(k.grad_scale());
  AF_GRID_LOOP(i, n) {
    const int64_t j = at(i);
    w[j] -= rate * (gs * g[i] + wd * w[j]);
  }
}

template <class T>
__global__ void momentum_kernel(int64_t n, T* __restrict__ w, const T* __restrict__ g,
                                T* __restrict__ buf, device_scalars k, T wd, T mu, bool nesterov) {
  const T rate = T(k.rate()), gs = T(k.grad_scale());
  AF_GRID_LOOP(i, n) {
    const T gi = gs * g[i] + wd * w[i];
    buf[i] = mu * buf[i] + gi;
    w[i] -= rate * (nesterov ? gi + mu * buf[i] : buf[i]);
  }
}

// w -= (lr / c1) * m / (sqrt(v) / sqrt(c2) + eps)
template <class T>
__global__ void adam_kernel(int64_t n, T* __restrict__ w, const T* __restrict__ g,
                            T* __restrict__ m, T* __restrict__ v, device_scalars k, T wd, T b1,
                            T b2, double c1, T inv_sqrt_c2, T eps, row_map at) {
  const T step = T(k.rate() / c1), gs = T(k.grad_scale());
  AF_GRID_LOOP(i, n) {
    const int64_t j = at(i);
    const T gi = gs * g[i] + wd * w[j];
    m[j] = b1 * m[j] + (T(1) - b1) * gi;
    v[j] = b2 * v[j] + (T(1) - b2) * gi * gi;
    w[j] -= step * m[j] / (sqrt(v[j]) * inv_sqrt_c2 + eps);
  }
}

template <class T>
__global__ void rmsprop_kernel(int64_t n, T* __restrict__ w, const T* __restrict__ g,
                               T* __restrict__ ms, T* __restrict__ mom, device_scalars k, T wd,
                               T rho, T eps, T mu) {
  const T rate = T(k.rate()), gs = T(k.grad_scale());
  AF_GRID_LOOP(i, n) {
    const T gi = gs * g[i] + wd * w[i];
    ms[i] = rho * ms[i] + (T(1) - rho) * gi * gi;
    T step = gi / (sqrt(ms[i]) + eps);
    if (mom) step = mom[i] = mu * mom[i] + step;
    w[i] -= rate * step;
  }
}

template <class T>
__global__ void adagrad_kernel(int64_t n, T* __restrict__ w, const T* __restrict__ g,
                               T* __restrict__ acc, device_scalars k, T wd, T eps, row_map at) {
  const T rate = T(k.rate()), gs = T(k.grad_scale());
  AF_GRID_LOOP(i, n) {
    const int64_t j = at(i);
    const T gi = gs * g[i] + wd * w[j];
    acc[j] += gi * gi;
    w[j] -= rate * gi / (sqrt(acc[j]) + eps);
  }
}

template <class T>
T* as(void* p) {
  return static_cast<T*>(p);
}
template <class T>
const T* as(const void* p) {
  return static_cast<const T*>(p);
}

}  // namespace

void apply_sgd(const update_args& a, void* w, const void* g, cudaStream_t s) {
  if (a.n == 0) return;
  const device_scalars k = scalars_of(a);
  dispatch_float(a.t, [&](auto tag) {
    using T = decltype(tag);
    sgd_kernel<T><<<blocks_for(a.n), block_threads, 0, s>>>(a.n, as<T>(w), as<T>(g), k,
                                                            T(a.weight_decay), rows_of(a));
  });
  note_launch();
}

void apply_momentum(const update_args& a, void* w, const void* g, void* velocity, double mu,
                    bool nesterov, cudaStream_t s) {
  if (a.n == 0) return;
  const device_scalars k = scalars_of(a);
  dispatch_float(a.t, [&](auto tag) {
    using T = decltype(tag);
    momentum_kernel<T><<<blocks_for(a.n), block_threads, 0, s>>>(
        a.n, as<T>(w), as<T>(g), as<T>(velocity), k, T(a.weight_decay), T(mu), nesterov);
  });
  note_launch();
}

void apply_adam(const update_args& a, void* w, const void* g, void* m, void* v, double beta1,
                double beta2, double c1, double c2, double epsilon, cudaStream_t s) {
  if (a.n == 0) return;
  const device_scalars k = scalars_of(a);
  dispatch_float(a.t, [&](auto tag) {
    using T = decltype(tag);
    adam_kernel<T><<<blocks_for(a.n), block_threads, 0, s>>>(
        a.n, as<T>(w), as<T>(g), as<T>(m), as<T>(v), k, T(a.weight_decay), T(beta1), T(beta2), c1,
        T(1.0 / std::sqrt(c2)), T(epsilon), rows_of(a));
  });
  note_launch();
}

void apply_rmsprop(const update_args& a, void* w, const void* g, void* mean_square,
                   void* momentum_slot, double rho, double epsilon, double mu, cudaStream_t s) {
  if (a.n == 0) return;
  const device_scalars k = scalars_of(a);
  dispatch_float(a.t, [&](auto tag) {
    using T = decltype(tag);
    rmsprop_kernel<T><<<blocks_for(a.n), block_threads, 0, s>>>(
        a.n, as<T>(w), as<T>(g), as<T>(mean_square), as<T>(momentum_slot), k, T(a.weight_decay),
        T(rho), T(epsilon), T(mu));
  });
  note_launch();
}

void apply_adagrad(const update_args& a, void* w, const void* g, void* accumulator, double epsilon,
                   cudaStream_t s) {
  if (a.n == 0) return;
  const device_scalars k = scalars_of(a);
  dispatch_float(a.t, [&](auto tag) {
    using T = decltype(tag);
    adagrad_kernel<T><<<blocks_for(a.n), block_threads, 0, s>>>(
        a.n, as<T>(w), as<T>(g), as<T>(accumulator), k, T(a.weight_decay), T(epsilon), rows_of(a));
  });
  note_launch();
}

}  // namespace actorflow::gpu::kernels
