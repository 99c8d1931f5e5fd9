// parallel_for over XLA's intra-op thread pool, shared by the native CPU kernels
// (cpu_attention.cc, cpu_matmul_amx.cc); compiled into each (header only).
#ifndef POI_JAX_LAYERS_NATIVE_PARALLEL_H_
#define POI_JAX_LAYERS_NATIVE_PARALLEL_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "xla/ffi/api/ffi.h"

namespace poi_jax_native {

// Runs f(0) .. f(n - 1) on the calling thread and the XLA intra-op pool; returns when all ran.
// The caller waits for the items, not for the helpers: a helper that has not started (its pool
// thread busy, perhaps in another such call) takes nothing, and the caller does the rest itself,
// so calls that wait on one another's helpers cannot deadlock. A helper that starts late finds
// no items left and touches only the shared counters, which it keeps alive.
template <typename F>
void parallel_for(xla::ffi::ThreadPool& pool, int64_t n, F&& f) {
  struct Shared {
    std::atomic<int64_t> next{0};
    int64_t done = 0;
    std::mutex mu;
    std::condition_variable cv;
  };
  auto shared = std::make_shared<Shared>();
  auto run = [n, &f](Shared& s) {
    for (int64_t i; (i = s.next.fetch_add(1)) < n;) {
      f(i);
      std::lock_guard<std::mutex> lock(s.mu);
      if (++s.done == n) s.cv.notify_all();
    }
  };
  const int64_t helpers = std::min<int64_t>(pool.num_threads(), n - 1);
  for (int64_t t = 0; t < helpers; ++t) pool.Schedule([shared, run] { run(*shared); });
  run(*shared);
  std::unique_lock<std::mutex> lock(shared->mu);
  shared->cv.wait(lock, [&] { return shared->done == n; });
}

}  // namespace poi_jax_native

#endif  // POI_JAX_LAYERS_NATIVE_PARALLEL_H_
