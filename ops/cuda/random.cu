// Random values on the GPU with the CPU kernels' generator (ops/random.cpp):
// Philox-4x32-10 keyed by the seeds, the counter holding (position,
// invocation), so that a value depends only on its index and the GPU draws
// the bits the CPU draws. Uniforms are the CPU's exactly; normals go through
// the device's log, sine and cosine, which may differ in the last bits.
#include "ops/cuda/device_util.cuh"

namespace actorflow::gpu::kernels {

namespace {

struct bits4 {
  uint32_t w[4];
};

__device__ bits4 philox(uint64_t position, uint64_t invocation, uint32_t k0, uint32_t k1) {
  uint32_t c0 = uint32_t(position), c1 = uint32_t(position >> 32), c2 = uint32_t(invocation),
           c3 = uint32_t(invocation >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = uint64_t{0xD2511F53u} * c0;
    const uint64_t p1 = uint64_t{0xCD9E8D57u} * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n1 = uint32_t(p1);
    const uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1, n3 = uint32_t(p0);
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
  }
  return {{c0, c1, c2, c3}};
}

__device__ uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

template <class T>
constexpr int per_block = sizeof(T) == 4 ? 4 : 2;

template <class T>
__device__ T unit_uniform(const bits4& b, int j) {
  if constexpr (sizeof(T) == 4)
    return float(b.w[j] >> 8) * 0x1p-24f;
  else
    return double(((uint64_t(b.w[2 * j]) << 32) | b.w[2 * j + 1]) >> 11) * 0x1p-53;
}

// The pair of standard normals of uniforms (u0, u1), by Box-Muller.
template <class T>
__device__ void unit_normals(const bits4& b, T* z) {
  for (int i = 0; i < per_block<T>; i += 2) {
    const T u0 = unit_uniform<T>(b, i), u1 = unit_uniform<T>(b, i + 1);
    const T r = sqrt(T(-2) * log(T(1) - u0));
    const T theta = T(2 * 3.14159265358979323846) * u1;
    z[i] = r * cos(theta);
    z[i + 1] = r * sin(theta);
  }
}

// No fused multiply-add: the CPU rounds the product and the sum apart.
template <class T>
__device__ T affine(T offset, T scale, T v) {
  if constexpr (sizeof(T) == 4)
    return __fadd_rn(offset, __fmul_rn(scale, v));
  else
    return __dadd_rn(offset, __dmul_rn(scale, v));
}

template <class T>
__global__ void uniform_kernel(T* __restrict__ out, int64_t n, uint64_t invocation, uint32_t k0,
                               uint32_t k1, T lo, T scale, T hi, T below_hi) {
  constexpr int per = per_block<T>;
  AF_GRID_LOOP(blk, (n + per - 1) / per) {
    const bits4 b = philox(uint64_t(blk), invocation, k0, k1);
    for (int j = 0; j < per && blk * per + j < n; ++j) {
      const T v = affine(lo, scale, unit_uniform<T>(b, j));
      out[blk * per + j] = v < hi ? v : below_hi;
    }
  }
}

// Element i draws at position i of successive streams until a value lies
// within two standard deviations (64 attempts at most, as on the CPU).
template <class T>
__global__ void truncated_kernel(T* __restrict__ out, int64_t n, uint64_t invocation, uint64_t key,
                                 T mean, T stddev) {
  AF_GRID_LOOP(i, n) {
    T z = 0;
    bool found = false;
    for (uint64_t attempt = 0; !found && attempt < 64; ++attempt) {
      const uint64_t k = attempt == 0 ? key : splitmix64(key ^ splitmix64(attempt));
      const bits4 b = philox(uint64_t(i), invocation, uint32_t(k), uint32_t(k >> 32));
      T v[per_block<T>];
      unit_normals<T>(b, v);
      for (int j = 0; j < per_block<T> && !found; ++j)
        if (fabs(v[j]) <= T(2)) {
          z = v[j];
          found = true;
        }
    }
    out[i] = affine(mean, stddev, z);
  }
}

}  // namespace

void random_uniform(dtype t, void* out, int64_t n, uint64_t invocation, uint64_t key, double lo,
                    double hi, cudaStream_t s) {
  if (n == 0) return;
  const uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  if (t == dtype::float64) {
    const double below = hi > lo ? nextafter(hi, lo) : lo;
    uniform_kernel<double><<<blocks_for((n + 1) / 2), block_threads, 0, s>>>(
        static_cast<double*>(out), n, invocation, k0, k1, lo, hi - lo, hi, below);
  } else {
    const float flo = float(lo), fhi = float(hi);
    const float below = fhi > flo ? nextafterf(fhi, flo) : flo;
    uniform_kernel<float><<<blocks_for((n + 3) / 4), block_threads, 0, s>>>(
        static_cast<float*>(out), n, invocation, k0, k1, flo, fhi - flo, fhi, below);
  }
  note_launch();
}

void truncated_normal(dtype t, void* out, int64_t n, uint64_t invocation, uint64_t key, double mean,
                      double stddev, cudaStream_t s) {
  if (n == 0) return;
  if (t == dtype::float64)
    truncated_kernel<double><<<blocks_for(n), block_threads, 0, s>>>(static_cast<double*>(out), n,
                                                                     invocation, key, mean, stddev);
  else
    truncated_kernel<float><<<blocks_for(n), block_threads, 0, s>>>(
        static_cast<float*>(out), n, invocation, key, float(mean), float(stddev));
  note_launch();
}

}  // namespace actorflow::gpu::kernels
