// Read bandwidth of main memory with the same thread pool the kernels use: the denominator of
// the "fraction of the memory-bandwidth bound" figure for token generation.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"

namespace {

void BM_MemoryRead(benchmark::State& state) {
  const int threads = int(state.range(0));
  const size_t bytes = size_t(1) << 30;  // far larger than any cache
  const size_t n = bytes / sizeof(uint64_t);
  auto* data = static_cast<uint64_t*>(std::aligned_alloc(64, bytes));
  for (size_t i = 0; i < n; ++i) data[i] = i * 2654435761u;  // touch every page, non-zero
  ps::ThreadPool pool(threads);
  const int64_t chunks = 256;
  std::vector<uint64_t> sums(size_t(threads) * 8);
  for (auto _ : state) {
    pool.parallel_for(chunks, [&](int64_t c, int t) {
      const size_t begin = n / chunks * size_t(c), end = n / chunks * size_t(c + 1);
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (size_t i = begin; i < end; i += 4) {
        s0 ^= data[i], s1 ^= data[i + 1], s2 ^= data[i + 2], s3 ^= data[i + 3];
      }
      sums[size_t(t) * 8] += s0 ^ s1 ^ s2 ^ s3;
    });
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
  std::free(data);
}
BENCHMARK(BM_MemoryRead)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
