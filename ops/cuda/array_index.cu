// Gathers and scatter-adds of rows by index (ops/array_index.cpp): the
// indices are checked on the host and come here as int64 arrays. A
// scatter-add gives each output element to one thread, which adds its
// updates in index order: the sums are the CPU's, bit for bit, and do not
// depend on the GPU.
#include "ops/cuda/device_util.cuh"

namespace actorflow::gpu::kernels {

namespace {

template <class E>
__global__ void gather_rows_kernel(const E* __restrict__ params, const int64_t* __restrict__ idx,
                                   E* __restrict__ out, int64_t d, int64_t n, int64_t inner,
                                   int64_t total) {
  AF_GRID_LOOP(t, total) {
    const int64_t c = t % inner, rest = t / inner, j = rest % n, o = rest / n;
    out[t] = params[(o * d + idx[j]) * inner + c];
  }
}

template <class T>
__global__ void scatter_add_rows_kernel(const T* __restrict__ updates, T* __restrict__ out,
                                        int64_t d, int64_t n, int64_t inner,
                                        const int64_t* __restrict__ targets,
                                        const int64_t* __restrict__ offsets,
                                        const int64_t* __restrict__ sources, int64_t rows,
                                        int64_t total) {
  AF_GRID_LOOP(t, total) {
    const int64_t c = t % inner, rest = t / inner, r = rest % rows, o = rest / rows;
    T* at = out + (o * d + targets[r]) * inner + c;
    T acc = *at;
    for (int64_t k = offsets[r]; k < offsets[r + 1]; ++k)
      acc = static_cast<T>(wrap_t<T>(acc) + wrap_t<T>(updates[(o * n + sources[k]) * inner + c]));
    *at = acc;
  }
}

}  // namespace

void gather_rows(size_t elem_size, const void* params, const int64_t* idx, void* out, int64_t outer,
                 int64_t d, int64_t n, int64_t inner, cudaStream_t s) {
  const int64_t total = outer * n * inner;
  if (total == 0) return;
  dispatch_size(elem_size, [&](auto tag) {
    using E = decltype(tag);
    gather_rows_kernel<E><<<blocks_for(total), block_threads, 0, s>>>(
        static_cast<const E*>(params), idx, static_cast<E*>(out), d, n, inner, total);
  });
  note_launch();
}

void scatter_add_rows(dtype t, const void* updates, void* out, int64_t outer, int64_t d, int64_t n,
                      int64_t inner, const int64_t* targets, const int64_t* offsets,
                      const int64_t* sources, int64_t rows, cudaStream_t s) {
  const int64_t total = outer * rows * inner;
  if (total == 0) return;
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>)
      scatter_add_rows_kernel<T><<<blocks_for(total), block_threads, 0, s>>>(
          static_cast<const T*>(updates), static_cast<T*>(out), d, n, inner, targets, offsets,
          sources, rows, total);
  });
  note_launch();
}

}  // namespace actorflow::gpu::kernels
