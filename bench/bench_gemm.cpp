// Matrix-matrix products as in prompt processing: a 2048 x 2048 weight matrix against 512
// activation columns, per weight type and per ISA level this CPU runs, on one thread. "rowdot"
// is one row dot per output (the decode kernels, weight rows reused from L1 across 8 columns at
// a time); "tiled" the register-tiled kernels. Activations are converted once, outside the
// timed loop, as the matmul does. "packed" the tiles over weights repacked as the CPU backend
// keeps them. The figure to read is GFLOP/s (2 K N M per product).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/packed.h"
#include "backends/cpu/vec_dot.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "random_floats.h"

namespace {

constexpr int64_t kK = 2048;  // row length
constexpr int64_t kN = 2048;  // weight rows
constexpr int64_t kM = 512;   // activation columns

using ps::bench::random_floats;

const std::vector<uint8_t>& weights(ps::DType t) {
  static std::map<ps::DType, std::vector<uint8_t>> cache;
  auto& w = cache[t];
  if (w.empty()) {
    const std::vector<float> src = random_floats(size_t(kN * kK), 1);
    const size_t row_bytes = ps::row_bytes(t, kK);
    w.resize(row_bytes * size_t(kN));
    for (int64_t r = 0; r < kN; ++r)
      ps::quantize_row(t, src.data() + r * kK, w.data() + size_t(r) * row_bytes, kK);
  }
  return w;
}

struct Activations {
  std::vector<uint8_t> bytes;
  size_t stride = 0;
};

Activations activations(const ps::cpu::DotKernel& k) {
  static const std::vector<float> x = random_floats(size_t(kK * kM), 2);
  Activations a;
  a.stride =
      k.act_type == ps::DType::F32 ? size_t(kK) * sizeof(float) : ps::row_bytes(k.act_type, kK);
  a.bytes.resize(a.stride * size_t(kM));
  for (int64_t m = 0; m < kM; ++m)
    k.act_from_f32(x.data() + m * kK, a.bytes.data() + size_t(m) * a.stride, kK);
  return a;
}

void set_flops(benchmark::State& state) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * double(kK) * double(kN) * double(kM) * 1e-9 * double(state.iterations()),
      benchmark::Counter::kIsRate);
}

// The row-dot matmul: rows in chunks, each row dotted with 8 columns while it is in L1.
void rowdot(benchmark::State& state, ps::DType t, ps::IsaLevel level) {
  const ps::cpu::DotKernel& k = ps::cpu::dot_kernel(t, level);
  const std::vector<uint8_t>& w = weights(t);
  const Activations a = activations(k);
  std::vector<float> y(size_t(kN * kM));
  const size_t w_stride = ps::row_bytes(t, kK);
  for (auto _ : state) {
    for (int64_t r0 = 0; r0 < kN; r0 += 16) {
      for (int64_t m0 = 0; m0 < kM; m0 += 8) {
        for (int64_t r = r0; r < r0 + 16; ++r)
          for (int64_t m = m0; m < m0 + 8; ++m)
            y[size_t(m * kN + r)] =
                k.dot(kK, w.data() + size_t(r) * w_stride, a.bytes.data() + size_t(m) * a.stride);
      }
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_flops(state);
}

void tiled(benchmark::State& state, ps::DType t, ps::IsaLevel level, int threads) {
  const ps::cpu::DotKernel& k = ps::cpu::dot_kernel(t, level);
  const ps::cpu::GemmKernel* g = ps::cpu::gemm_kernel(t, level);
  if (g == nullptr) {
    state.SkipWithError("no tiled kernel at this level");
    return;
  }
  const std::vector<uint8_t>& w = weights(t);
  const Activations a = activations(k);
  std::vector<float> y(size_t(kN * kM));
  ps::ThreadPool pool(threads);
  for (auto _ : state) {
    ps::cpu::gemm(pool, *g, k.dot, kK, kN, kM, w.data(), ps::row_bytes(t, kK), a.bytes.data(),
                  a.stride, y.data(), size_t(kN));
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_flops(state);
  state.SetLabel(std::to_string(g->rows) + "x" + std::to_string(g->cols) + " tiles");
}

// The packed tiles the CPU backend runs for prompts: the weights repacked into the level's
// groups of rows, the activations converted as the packed kernel converts them.
void packed(benchmark::State& state, ps::DType t, ps::IsaLevel level) {
  const ps::cpu::PackedKernel* pk = ps::cpu::packed_kernel(t, level);
  if (pk == nullptr) {
    state.SkipWithError("no packed kernel at this level");
    return;
  }
  const std::vector<uint8_t>& w = weights(t);
  ps::ThreadPool pool(1);
  const ps::cpu::PackedLayout layout = ps::cpu::packed_layout(t, pk->gemm.rows, kK);
  std::vector<uint8_t> wp(layout.row_bytes * size_t(kN));
  ps::cpu::pack_rows(t, pk->gemm.rows, w.data(), wp.data(), kK, kN, pool);
  static const std::vector<float> x = random_floats(size_t(kK * kM), 2);
  const size_t a_stride = pk->act_row_bytes(kK);
  std::vector<uint8_t> a(a_stride * size_t(kM));
  for (int64_t m = 0; m < kM; ++m)
    pk->act_from_f32(x.data() + m * kK, a.data() + size_t(m) * a_stride, kK);
  std::vector<float> y(size_t(kN * kM));
  for (auto _ : state) {
    ps::cpu::gemm(pool, pk->gemm, pk->tail_dot, kK, kN, kM, wp.data(), layout.row_bytes, a.data(),
                  a_stride, y.data(), size_t(kN));
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_flops(state);
  state.SetLabel(std::to_string(pk->gemm.rows) + "x" + std::to_string(pk->gemm.cols) + " tiles");
}

// Registered before main() runs, beside the other groups of the kernel benchmark binary.
const bool registered = [] {
  const ps::DType types[] = {ps::DType::F32,  ps::DType::F16,  ps::DType::BF16, ps::DType::Q8_0,
                             ps::DType::Q4_0, ps::DType::Q4_1, ps::DType::Q5_0, ps::DType::Q5_1};
  const ps::IsaLevel best = ps::best_isa_level();
  for (ps::IsaLevel level : {ps::IsaLevel::Avx2, ps::IsaLevel::Avx512}) {
    if (level > best) continue;
    const std::string suffix = std::string("/") + ps::isa_level_name(level);
    for (ps::DType t : types) {
      const std::string name(ps::dtype_name(t));
      benchmark::RegisterBenchmark(("gemm_rowdot/" + name + suffix).c_str(), rowdot, t, level)
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.5);
      benchmark::RegisterBenchmark(("gemm_tiled/" + name + suffix).c_str(), tiled, t, level, 1)
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.5);
      benchmark::RegisterBenchmark(("gemm_tiled_2threads/" + name + suffix).c_str(), tiled, t,
                                   level, 2)
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.5)
          ->UseRealTime();
    }
  }
  for (ps::IsaLevel level : {ps::IsaLevel::Avx2, ps::IsaLevel::AvxVnni, ps::IsaLevel::Avx512}) {
    if (!ps::isa_level_runs(level)) continue;
    const std::string suffix = std::string("/") + ps::isa_level_name(level);
    for (ps::DType t : {ps::DType::Q4_0, ps::DType::Q8_0, ps::DType::Q2_K, ps::DType::Q3_K,
                        ps::DType::Q4_K, ps::DType::Q5_K, ps::DType::Q6_K})
      benchmark::RegisterBenchmark(
          ("gemm_packed/" + std::string(ps::dtype_name(t)) + suffix).c_str(), packed, t, level)
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.5);
  }
  return true;
}();

}  // namespace
