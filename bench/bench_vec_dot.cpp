// Matrix-vector products (4096 weight rows of 4096 elements against one activation row) with
// the CPU dot kernels, per weight type and per ISA level this CPU runs, on one thread. This is
// the token-generation inner loop, so the figure to read is bytes_per_second: weight bytes
// streamed per second, to set against the memory bandwidth one core can draw.
#include <benchmark/benchmark.h>

#include <map>
#include <string>
#include <vector>

#include "backends/cpu/vec_dot.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "random_floats.h"

namespace {

constexpr int64_t kCols = 4096;
constexpr int64_t kRows = 4096;

const std::vector<float>& random_floats(size_t n, unsigned seed) {
  static std::map<unsigned, std::vector<float>> cache;
  auto& v = cache[seed];
  if (v.size() != n) v = ps::bench::random_floats(n, seed);
  return v;
}

// The weight matrix of one type, built once and shared by every level.
const std::vector<uint8_t>& weights(ps::DType t) {
  static std::map<ps::DType, std::vector<uint8_t>> cache;
  auto& w = cache[t];
  if (w.empty()) {
    const std::vector<float>& src = random_floats(size_t(kRows * kCols), 1);
    const size_t row_bytes = ps::row_bytes(t, kCols);
    w.resize(row_bytes * size_t(kRows));
    for (int64_t r = 0; r < kRows; ++r)
      ps::quantize_row(t, src.data() + r * kCols, w.data() + size_t(r) * row_bytes, kCols);
  }
  return w;
}

void matvec(benchmark::State& state, ps::DType t, ps::IsaLevel level) {
  const ps::cpu::DotKernel& k = ps::cpu::dot_kernel(t, level);
  const std::vector<uint8_t>& w = weights(t);
  const std::vector<float>& x = random_floats(size_t(kCols), 2);
  std::vector<uint8_t> act(k.act_type == ps::DType::F32 ? size_t(kCols) * sizeof(float)
                                                        : ps::row_bytes(k.act_type, kCols));
  k.act_from_f32(x.data(), act.data(), kCols);
  std::vector<float> y(static_cast<size_t>(kRows));
  const size_t row_bytes = ps::row_bytes(t, kCols);
  for (auto _ : state) {
    for (int64_t r = 0; r < kRows; ++r)
      y[size_t(r)] = k.dot(kCols, w.data() + size_t(r) * row_bytes, act.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(w.size()));
}

void quantize_activations(benchmark::State& state, ps::DType t, ps::IsaLevel level) {
  const ps::cpu::DotKernel& k = ps::cpu::dot_kernel(t, level);
  const std::vector<float>& x = random_floats(size_t(kCols), 2);
  std::vector<uint8_t> act(ps::row_bytes(k.act_type, kCols));
  for (auto _ : state) {
    k.act_from_f32(x.data(), act.data(), kCols);
    benchmark::DoNotOptimize(act.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * kCols * int64_t(sizeof(float)));
}

void register_all() {
  const ps::DType types[] = {ps::DType::F32,  ps::DType::F16,  ps::DType::BF16, ps::DType::Q8_0,
                             ps::DType::Q4_0, ps::DType::Q4_1, ps::DType::Q5_0, ps::DType::Q5_1};
  const ps::IsaLevel best = ps::best_isa_level();
  for (ps::IsaLevel level : {ps::IsaLevel::Scalar, ps::IsaLevel::Avx2, ps::IsaLevel::Avx512}) {
    if (level > best) continue;
    const std::string suffix = std::string("/") + ps::isa_level_name(level);
    for (ps::DType t : types) {
      const std::string name(ps::dtype_name(t));
      benchmark::RegisterBenchmark(("matvec/" + name + suffix).c_str(), matvec, t, level)
          ->Unit(benchmark::kMillisecond);
    }
    for (ps::DType t : {ps::DType::Q4_0, ps::DType::Q4_1}) {
      const std::string act_name(ps::dtype_name(ps::cpu::dot_kernel(t, level).act_type));
      benchmark::RegisterBenchmark(("act_from_f32/" + act_name + suffix).c_str(),
                                   quantize_activations, t, level);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("cpu", ps::cpu_features().brand);
  benchmark::AddCustomContext("best_isa", ps::isa_level_name(ps::best_isa_level()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
