// The matmuls of one decode step of bench-1b (16 layers of a 2048-wide llama: q, k, v, o,
// gate, up, down; every weight of one type) with packed weights against one activation column, each
// layer's weights in their own memory so that the step streams the whole model from RAM as a real
// decode does. Activations are converted outside the timed loop. The figure to read is
// bytes_per_second, set against BM_MemoryRead of the same thread count: it is the bandwidth bound's
// share that the matmuls reach before attention, norms and the rest of the step take their part.
#include <benchmark/benchmark.h>

#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/packed.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/large_buffer.h"
#include "core/thread_pool.h"
#include "random_floats.h"

namespace {

constexpr int64_t kEmbd = 2048, kKv = 512, kFf = 5632;
constexpr int kLayers = 16;

struct Shape {
  int64_t n, k;
};
constexpr Shape kShapes[] = {{kEmbd, kEmbd}, {kKv, kEmbd}, {kKv, kEmbd}, {kEmbd, kEmbd},
                             {kFf, kEmbd},   {kFf, kEmbd}, {kEmbd, kFf}};

// (first shape, count) of each batch, and where each product writes in y.
constexpr std::pair<size_t, size_t> kBatches[] = {{0, 3}, {3, 1}, {4, 2}, {6, 1}};
constexpr size_t kOutputOffset[] = {0, kEmbd, kEmbd + kKv, 0, 0, kFf, 0};

using ps::bench::random_floats;

void decode_step(benchmark::State& state, ps::DType t, int threads) {
  const ps::cpu::PackedKernel* pk = ps::cpu::packed_kernel(t, ps::best_isa_level());
  if (pk == nullptr) {
    state.SkipWithError("no packed kernel for this type at this level");
    return;
  }
  const int rows = pk->gemm.rows;
  ps::ThreadPool pool(threads);
  // Each shape is quantized and packed once, then copied into every layer's own buffer.
  struct Matrix {
    Shape s;
    size_t row_bytes;
    std::vector<ps::LargeBuffer> layers;  // in memory as the CPU backend keeps packed weights
  };
  std::vector<Matrix> mats;
  size_t total = 0;
  for (const Shape& s : kShapes) {
    const std::vector<float> src = random_floats(size_t(s.n * s.k), unsigned(s.n + s.k));
    const size_t gguf_row = ps::row_bytes(t, s.k);
    std::vector<uint8_t> q(gguf_row * size_t(s.n));
    for (int64_t r = 0; r < s.n; ++r)
      ps::quantize_row(t, src.data() + r * s.k, q.data() + size_t(r) * gguf_row, s.k);
    Matrix m{s, ps::cpu::packed_layout(t, rows, s.k).row_bytes, {}};
    std::vector<uint8_t> packed(m.row_bytes * size_t(s.n));
    ps::cpu::pack_rows(t, rows, q.data(), packed.data(), s.k, s.n, pool);
    for (int l = 0; l < kLayers; ++l) {
      ps::LargeBuffer b(packed.size());
      std::memcpy(b.data(), packed.data(), packed.size());
      m.layers.push_back(std::move(b));
    }
    total += packed.size() * kLayers;
    mats.push_back(std::move(m));
  }
  std::vector<uint8_t> act(pk->act_row_bytes(kFf));
  const std::vector<float> x = random_floats(size_t(kFf), 7);
  std::vector<float> y(static_cast<size_t>(2 * kFf));
  for (auto _ : state) {
    for (int l = 0; l < kLayers; ++l) {
      // As the CPU backend runs them: q, k and v in one batch, o, gate and up in one, down.
      for (const auto& [first, count] : kBatches) {
        ps::cpu::GemmProblem batch[3];
        pk->act_from_f32(x.data(), act.data(), kShapes[first].k);
        for (size_t j = 0; j < count; ++j) {
          const Matrix& m = mats[first + j];
          batch[j] = {&pk->gemm,
                      pk->tail_dot,
                      m.s.k,
                      m.s.n,
                      1,
                      m.layers[size_t(l)].data(),
                      m.row_bytes,
                      act.data(),
                      act.size(),
                      y.data() + kOutputOffset[first + j],
                      size_t(m.s.n)};
        }
        ps::cpu::gemm_batch(pool, std::span(batch, count));
      }
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(total));
  state.SetLabel(std::to_string(total >> 20) + " MiB per step");
}

const bool registered = [] {
  for (ps::DType t :
       {ps::DType::Q4_0, ps::DType::Q8_0, ps::DType::Q4_K, ps::DType::Q5_K, ps::DType::Q6_K}) {
    for (int threads : {1, 2}) {
      const std::string name =
          "decode_step/" + std::string(ps::dtype_name(t)) + "/" + std::to_string(threads);
      benchmark::RegisterBenchmark(name.c_str(), decode_step, t, threads)
          ->Unit(benchmark::kMillisecond)
          ->MinTime(1.0)
          ->UseRealTime();
    }
  }
  return true;
}();

}  // namespace
