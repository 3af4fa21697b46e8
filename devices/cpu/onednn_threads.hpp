// oneDNN's threads inside actorflow's (Debian's libdnnl runs on OpenMP).
//
// Kernels split their work across the CPU device's TBB arena and call oneDNN
// for one piece on one thread. OpenMP's thread count is a per-thread setting,
// so each thread that calls into oneDNN is told, once, before its first call,
// to use one OpenMP thread: the library never starts a second pool of threads
// beside TBB's, and the cores stay TBB's alone.
#pragma once
#if defined(ACTORFLOW_HAS_ONEDNN)
#include <omp.h>

namespace actorflow::cpu {

inline void use_one_openmp_thread() {
  thread_local const bool set = [] {
    omp_set_num_threads(1);
    return true;
  }();
  (void)set;
}

}  // namespace actorflow::cpu
#endif
