// Read bandwidth of main memory with the same thread pool the kernels use: the denominator of
// the "fraction of the memory-bandwidth bound" figure for token generation.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

#if defined(__x86_64__)
// The same read with the widest loads the CPU has (64 bytes with AVX-512, else 32), four
// independent lines per step and a software prefetch ahead: the loop of BM_MemoryRead is compiled
// for the baseline x86-64 and reads 16 bytes at a time, which one core cannot always turn into its
// full bandwidth. The bandwidth bound of docs/PERFORMANCE.md takes the higher of the two. Lines are
// prefetched 2 KiB ahead, as the decode tiles prefetch their next block.
constexpr size_t kAhead = 2048 / sizeof(uint64_t);

__attribute__((target("avx512f"))) uint64_t read_avx512(const uint64_t* p, size_t n) {
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i < n; i += 32) {
    for (size_t l = 0; l < 32; l += 8)
      _mm_prefetch(reinterpret_cast<const char*>(p + i + l + kAhead), _MM_HINT_T0);
    s0 = _mm512_xor_si512(s0, _mm512_load_si512(p + i));
    s1 = _mm512_xor_si512(s1, _mm512_load_si512(p + i + 8));
    s2 = _mm512_xor_si512(s2, _mm512_load_si512(p + i + 16));
    s3 = _mm512_xor_si512(s3, _mm512_load_si512(p + i + 24));
  }
  const __m512i s = _mm512_xor_si512(_mm512_xor_si512(s0, s1), _mm512_xor_si512(s2, s3));
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, s);
  return lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3] ^ lanes[4] ^ lanes[5] ^ lanes[6] ^ lanes[7];
}

__attribute__((target("avx2"))) uint64_t read_avx2(const uint64_t* p, size_t n) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i < n; i += 16) {
    for (size_t l = 0; l < 16; l += 8)
      _mm_prefetch(reinterpret_cast<const char*>(p + i + l + kAhead), _MM_HINT_T0);
    s0 = _mm256_xor_si256(s0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    s1 = _mm256_xor_si256(s1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    s2 = _mm256_xor_si256(s2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    s3 = _mm256_xor_si256(s3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  const __m256i s = _mm256_xor_si256(_mm256_xor_si256(s0, s1), _mm256_xor_si256(s2, s3));
  return uint64_t(_mm256_extract_epi64(s, 0) ^ _mm256_extract_epi64(s, 1) ^
                  _mm256_extract_epi64(s, 2) ^ _mm256_extract_epi64(s, 3));
}

void BM_MemoryReadWide(benchmark::State& state) {
  const bool avx512 = ps::best_isa_level() >= ps::IsaLevel::Avx512;
  if (!avx512 && ps::best_isa_level() < ps::IsaLevel::Avx2) {
    state.SkipWithError("no AVX2");
    return;
  }
  const int threads = int(state.range(0));
  const size_t bytes = size_t(1) << 30;
  const size_t n = bytes / sizeof(uint64_t);
  auto* data = static_cast<uint64_t*>(std::aligned_alloc(64, bytes));
  for (size_t i = 0; i < n; ++i) data[i] = i * 2654435761u;
  ps::ThreadPool pool(threads);
  const int64_t chunks = 256;
  std::vector<uint64_t> sums(size_t(threads) * 8);
  for (auto _ : state) {
    pool.parallel_for(chunks, [&](int64_t c, int t) {
      const size_t begin = n / chunks * size_t(c), len = n / chunks;
      sums[size_t(t) * 8] += avx512 ? read_avx512(data + begin, len) : read_avx2(data + begin, len);
    });
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
  state.SetLabel(avx512 ? "64-byte loads" : "32-byte loads");
  std::free(data);
}
BENCHMARK(BM_MemoryReadWide)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

}  // namespace
