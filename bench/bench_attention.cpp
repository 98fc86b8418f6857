// Attention of one decoding token of bench-1b (16 query heads over 4 cache heads of 128, an F16
// cache) over `span` cached positions, through the CPU kernel as the backend runs it. Each call
// takes the next of enough caches, each in its own memory, that they do not fit the last-level
// cache together: as in a decode step, where a layer's cache was last read a whole model's
// weights ago. bytes_per_second counts the K and V bytes read; set it against BM_MemoryRead. The
// warm variant reads one cache over and over, from the caches of the CPU.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/cpu_features.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "graph/graph.h"
#include "random_floats.h"

namespace {

constexpr int64_t kHeadDim = 128, kHeads = 16, kKvHeads = 4;
constexpr size_t kColdBytes = size_t(96) << 20;  // more than the caches of the CPU hold

using ps::bench::random_floats;

void attention_decode(benchmark::State& state, int64_t span, int threads, bool cold) {
  ps::ThreadPool pool(threads);
  ps::cpu::Context ctx;
  ctx.pool = &pool;
  ctx.isa = ps::active_isa_level();
  const size_t cache_elems = size_t(kHeadDim * kKvHeads * span);
  const size_t n_caches = cold ? std::max<size_t>(2, kColdBytes / (4 * cache_elems)) : 1;
  std::vector<float> values = random_floats(cache_elems, 3);
  std::vector<uint16_t> half(cache_elems);
  for (size_t i = 0; i < cache_elems; ++i) half[i] = ps::f32_to_fp16(values[i]);
  std::vector<std::vector<uint16_t>> k(n_caches, half), v(n_caches, half);
  const std::vector<float> q = random_floats(size_t(kHeadDim * kHeads), 4);
  std::vector<float> out(size_t(kHeadDim * kHeads));
  ps::Graph g;
  std::vector<ps::Tensor*> nodes;
  ps::Tensor* qt =
      g.leaf("q", ps::DType::F32, {kHeadDim, kHeads, 1, 1}, const_cast<float*>(q.data()));
  for (size_t c = 0; c < n_caches; ++c) {
    ps::Tensor* kt = g.leaf("k", ps::DType::F16, {kHeadDim, kKvHeads, span, 1}, k[c].data());
    ps::Tensor* vt = g.leaf("v", ps::DType::F16, {kHeadDim, kKvHeads, span, 1}, v[c].data());
    ps::Tensor* a = g.attention(qt, kt, vt, int32_t(span - 1), 0.088f);
    a->data = out.data();
    nodes.push_back(a);
  }
  size_t next = 0;
  for (auto _ : state) {
    ps::cpu::attention(ctx, *nodes[next]);
    next = next + 1 == n_caches ? 0 : next + 1;
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(2 * cache_elems * 2));
}

const bool registered = [] {
  for (bool cold : {true, false})
    for (int64_t span : {16, 64, 96, 128, 1024})
      for (int threads : {1, 2}) {
        const std::string name = std::string("attention_decode/") + (cold ? "cold" : "warm") + "/" +
                                 std::to_string(span) + "/" + std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), attention_decode, span, threads, cold)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
  return true;
}();

}  // namespace
