// The CUDA/HIP backend's kernels and device code, compiled for the host against the emulated
// runtime (src/backends/cuda/emulation.h), run the op conformance cases against the CPU
// backend. Built twice: with 32-lane warps (NVIDIA, RDNA) and with 64-lane ones (GCN, CDNA), so
// the reductions and the warp-per-row matmul are checked at both widths. This checks the
// kernels' logic (indexing, strides, reductions, barriers), not their speed or anything only
// hardware shows; scripts/device-check runs the same cases on a real GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "backend/registry.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/device.h"
#include "conformance_cases.h"
#include "core/error.h"
#include "engine/model_context.h"

namespace ps {
namespace {

// The execution model itself, on small kernels of its own.
TEST(GpuEmulationModel, SyncthreadsHoldsEveryThreadUntilAllArrive) {
  // Each thread reads what its neighbour wrote before the barrier: a thread running on past it
  // would see the neighbour's slot unwritten. Two blocks: the second sees the first's leftovers
  // unless every thread writes again.
  constexpr unsigned kThreads = 96;
  std::vector<int> out(2 * kThreads, -1);
  emu::launch(dim3(2), dim3(32, 3), nullptr, [&] {
    __shared__ int slot[kThreads];
    const unsigned t = emu::linear_thread();
    slot[t] = int(1000 * blockIdx.x + t);
    __syncthreads();
    out[blockIdx.x * kThreads + t] = slot[(t + 1) % kThreads];
    __syncthreads();
    slot[t] = -7;
  });
  for (unsigned b = 0; b < 2; ++b)
    for (unsigned t = 0; t < kThreads; ++t)
      EXPECT_EQ(out[b * kThreads + t], int(1000 * b + (t + 1) % kThreads)) << b << " " << t;
}

TEST(GpuEmulationModel, ReturnedThreadsDoNotHoldUpBarriers) {
  std::vector<int> out(64, 0);
  emu::launch(dim3(1), dim3(64), nullptr, [&] {
    __shared__ int total;
    const unsigned t = threadIdx.x;
    if (t >= 40) return;
    if (t == 0) total = 0;
    __syncthreads();
    for (unsigned i = 0; i < 40; ++i) {
      if (i == t) total += int(t);
      __syncthreads();
    }
    out[t] = total;
  });
  for (unsigned t = 0; t < 64; ++t) EXPECT_EQ(out[t], t < 40 ? 39 * 40 / 2 : 0) << t;
}

TEST(GpuEmulationModel, ShuffleReducesEachWarp) {
  constexpr unsigned kThreads = 2 * PS_EMU_WARP + 5;  // a partial last warp
  std::vector<float> out(kThreads, 0.0f);
  emu::launch(dim3(1), dim3(kThreads), nullptr, [&] {
    const unsigned t = threadIdx.x;
    if (t >= 2 * PS_EMU_WARP) return;  // the partial warp leaves before shuffling
    float v = float(t % PS_EMU_WARP + 1);
    for (int mask = PS_EMU_WARP / 2; mask > 0; mask /= 2) v += emu::shfl_xor(v, mask);
    out[t] = v;
  });
  for (unsigned t = 0; t < kThreads; ++t)
    EXPECT_EQ(out[t], t < 2 * PS_EMU_WARP ? float(PS_EMU_WARP * (PS_EMU_WARP + 1) / 2) : 0.0f);
}

TEST(GpuEmulationModelDeathTest, ThreadsAtDifferentBarriersAreReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto divergent = [] {
    emu::launch(dim3(3), dim3(64), nullptr, [] {
      if (blockIdx.x == 2 && threadIdx.x == 5) {
        (void)emu::shfl_xor(1.0f, 1);
        return;
      }
      __syncthreads();
    });
  };
  EXPECT_DEATH(divergent(), "block \\(2,0,0\\) deadlocks: 63 threads wait at __syncthreads");
}

TEST(GpuEmulation, KernelsMatchTheCpuBackend) {
  std::unique_ptr<Backend> cpu_backend = make_cpu_backend();
  std::unique_ptr<Device> cpu = cpu_backend->open_device(0, DeviceOptions{});
  DeviceInfo info;
  info.id = fmt::format("emulated-gpu(warp {})", PS_EMU_WARP);
  info.api = Api::Cuda;
  gpu::GpuDevice dev(info, 0);
  std::map<std::string, std::string> unsupported;
  int compared = 0;
  for (auto& c : conformance::all_cases()) {
    std::string why;
    for (Tensor* n : c->graph.nodes())
      if (why.empty()) why = dev.unsupported_reason(*n);
    if (!why.empty()) {
      unsupported[c->name] = why;
      continue;
    }
    SCOPED_TRACE(c->name);
    const std::vector<float> want = conformance::run_on(*cpu, *c);
    const std::vector<float> got = conformance::run_on(dev, *c);
    for (const std::string& m : conformance::mismatches(*c, want, got)) ADD_FAILURE() << m;
    ++compared;
  }
  std::printf("%s: %d cases compared with the CPU backend; %zu not supported\n", info.id.c_str(),
              compared, unsupported.size());
  for (const auto& [name, why] : unsupported)
    std::printf("  %-40s %s\n", name.c_str(), why.c_str());
  // Every op and dtype of the engine has a kernel.
  EXPECT_TRUE(unsupported.empty());
  EXPECT_GT(compared, 200);
}

// backend.h's ordering of buffer reads and writes against queued kernels, on the CUDA/HIP
// device code's stream.
TEST(GpuEmulation, KeepsTheOrderingContract) {
  DeviceInfo info;
  info.id = fmt::format("emulated-gpu(warp {})", PS_EMU_WARP);
  info.api = Api::Cuda;
  gpu::GpuDevice dev(info, 0);
  for (const std::string& p : conformance::ordering_problems(dev)) ADD_FAILURE() << p;
}

// POLYSTACK_PROFILE_OPS=1: each kernel timed by its op (matrix products by weight type and
// activation rows too), the totals printed when the device closes.
TEST(GpuEmulation, ProfileOpsCountsEveryKernel) {
  ASSERT_EQ(setenv("POLYSTACK_PROFILE_OPS", "1", 1), 0);
  DeviceInfo info;
  info.id = "emulated-gpu";
  info.api = Api::Cuda;
  std::map<std::string, uint64_t> want;  // "matmul Q4_K x3" -> calls
  int runs = 0;
  testing::internal::CaptureStderr();
  {
    gpu::GpuDevice dev(info, 0);
    unsetenv("POLYSTACK_PROFILE_OPS");
    for (auto& c : conformance::all_cases()) {
      bool matmul = false;
      for (Tensor* n : c->graph.nodes()) matmul |= n->op == OpKind::MatMul;
      if (!matmul || runs == 6) continue;
      for (Tensor* n : c->graph.nodes()) {
        if (n->op == OpKind::None || n->op == OpKind::View) continue;
        want[n->op == OpKind::MatMul
                 ? fmt::format("matmul {} x{}", dtype_name(n->src[0]->type), n->src[1]->n_rows())
                 : std::string(op_name(n->op))] += 1;
      }
      (void)conformance::run_on(dev, *c);
      ++runs;
    }
  }
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_EQ(runs, 6);
  for (const auto& [what, calls] : want) {
    // "polystack: emulated-gpu op matmul F32 x3            2 calls ..."
    const size_t at = err.find(fmt::format("polystack: emulated-gpu op {} ", what));
    ASSERT_NE(at, std::string::npos) << what << " missing from:\n" << err;
    const std::string line = err.substr(at, err.find('\n', at) - at);
    EXPECT_NE(line.find(fmt::format(" {} calls ", calls)), std::string::npos) << line;
  }
  EXPECT_NE(err.find(fmt::format(" in {} runs; ", runs)), std::string::npos) << err;
  // Without the variable nothing is timed or printed.
  testing::internal::CaptureStderr();
  { gpu::GpuDevice quiet(info, 0); }
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

// POLYSTACK_CUDA_MATVEC=dp4a: decode steps of Q4_K, Q6_K and Q8_0 weights with activations
// rounded to int8, against the CPU backend, on the conformance cases (but the vocabulary-sized
// one, slow here) and more column counts (each kernel variant: 1, 2, 4 and 8 columns) and rows
// that leave a block of rows partial.
// The results must differ from the float kernels' somewhere (the int8 path ran).
TEST(GpuEmulation, Int8DecodeMatchesTheCpuBackend) {
  std::unique_ptr<Backend> cpu_backend = make_cpu_backend();
  std::unique_ptr<Device> cpu = cpu_backend->open_device(0, DeviceOptions{});
  DeviceInfo info;
  info.id = "emulated-gpu";
  info.api = Api::Cuda;
  gpu::GpuDevice float_dev(info, 0);
  ASSERT_EQ(setenv("POLYSTACK_CUDA_MATVEC", "dp4a", 1), 0);
  gpu::GpuDevice dev(info, 0);
  ASSERT_EQ(setenv("POLYSTACK_CUDA_MATVEC", "fp8", 1), 0);
  try {
    gpu::GpuDevice bad(info, 0);
    ADD_FAILURE() << "POLYSTACK_CUDA_MATVEC=fp8 was taken";
  } catch (const BackendError& e) {
    EXPECT_STREQ(e.what(), "POLYSTACK_CUDA_MATVEC: 'fp8' is neither float nor dp4a");
  }
  unsetenv("POLYSTACK_CUDA_MATVEC");
  std::vector<std::unique_ptr<conformance::Case>> cases;
  for (auto& c : conformance::all_cases()) {
    const Tensor* n = c->out;
    if (n->op == OpKind::MatMul && n->src[1]->ne[1] <= 8 && n->src[0]->ne[1] < 1000 &&
        (n->src[0]->type == DType::Q4_K || n->src[0]->type == DType::Q6_K ||
         n->src[0]->type == DType::Q8_0))
      cases.push_back(std::move(c));
  }
  std::mt19937 rng(7);
  for (DType t : {DType::Q4_K, DType::Q6_K, DType::Q8_0})
    for (int64_t m : {2, 3, 8}) {
      auto c = std::make_unique<conformance::Case>();
      c->name = fmt::format("matmul {} K=512 N=37 M={}", dtype_name(t), m);
      Tensor* w = c->random_leaf("w", t, {512, 37, 1, 1}, rng);
      Tensor* x = c->random_leaf("x", DType::F32, {512, m, 1, 1}, rng);
      c->out = c->graph.matmul(w, x);
      c->tolerance = 2e-2;
      cases.push_back(std::move(c));
    }
  int differ = 0;
  for (auto& c : cases) {
    SCOPED_TRACE(c->name);
    const std::vector<float> want = conformance::run_on(*cpu, *c);
    const std::vector<float> got = conformance::run_on(dev, *c);
    const std::vector<float> floats = conformance::run_on(float_dev, *c);
    for (const std::string& m : conformance::mismatches(*c, want, got)) ADD_FAILURE() << m;
    std::printf("%-32s int8 decode: %.2e from the CPU, float kernels %.2e\n", c->name.c_str(),
                relative_error(want, got), relative_error(want, floats));
    differ += got != floats;
  }
  EXPECT_GE(cases.size(), 20u);
  EXPECT_EQ(differ, int(cases.size()));
}

// The emulated device as the registry's cuda:0 and cuda:1 (this binary sits in a folder
// without plugins): two GPUs for a model split over both.
class EmulatedBackend final : public Backend {
 public:
  Api api() const override { return Api::Cuda; }
  ProbeReport probe() override {
    ProbeReport r;
    r.api = Api::Cuda;
    r.built = true;
    for (int i = 0; i < 2; ++i) {
      DeviceInfo d;
      d.id = fmt::format("cuda:{}", i);
      d.api = Api::Cuda;
      d.kind = DeviceKind::DiscreteGpu;
      d.name = fmt::format("emulated GPU (warp {})", PS_EMU_WARP);
      r.devices.push_back(d);
    }
    return r;
  }
  std::unique_ptr<Device> open_device(int index, const DeviceOptions&) override {
    // Both on the one emulated runtime, each with buffers of its own.
    return std::make_unique<gpu::GpuDevice>(probe().devices.at(size_t(index)), 0);
  }
};

void add_emulated_backend_once() {
  static bool added = false;
  if (!added) Registry::global().add(std::make_unique<EmulatedBackend>());
  added = true;
}

// A whole model through the session and scheduler on the emulated device: weights uploaded,
// the KV cache in device buffers, prompt batches and single-token steps, against the CPU.
TEST(GpuEmulation, Stories260KMatchesTheCpuBackend) {
  const std::filesystem::path model =
      std::filesystem::path(POLYSTACK_SHARED_DIR) / "models" / "stories260K.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " is absent";
  add_emulated_backend_once();
  auto loaded = LoadedModel::load(model.string());
  // BOS + "Once upon a time" and the start of its greedy continuation: the prompt in batches
  // of 4 and 3, then single tokens.
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 432, 383};
  const std::vector<int32_t> steps = {286, 261};
  auto logits = [&](const std::string& device, int n_gpu_layers,
                    std::vector<double> tensor_split = {}, int main_gpu = -1,
                    std::string* plan = nullptr) {
    ContextOptions o;
    o.device = device;
    o.n_gpu_layers = n_gpu_layers;
    o.split_layers = !tensor_split.empty();
    o.tensor_split = tensor_split;
    o.main_gpu = main_gpu;
    o.strict = true;
    // The self-check's model-sized cases would take minutes on the emulator; the conformance
    // cases above check the same kernels.
    o.self_check = false;
    o.n_ctx = 64;
    o.n_batch = 4;
    ModelContext s(loaded, o);
    if (plan) *plan = s.plan().summary;
    std::vector<float> all = s.eval(prompt, true);
    for (int32_t t : steps) {
      const std::vector<float> step = s.eval(std::span<const int32_t>(&t, 1));
      all.insert(all.end(), step.begin(), step.end());
    }
    return all;
  };
  const std::vector<float> want = logits("cpu", -1);
  const auto compare = [&](const std::vector<float>& got, const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    double scale = 0, err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, std::fabs(double(want[i])));
      err = std::max(err, std::fabs(double(got[i]) - want[i]));
    }
    std::printf("stories260K, %zu positions, %s: max |emulated - cpu| / max |cpu| = %.2e\n",
                prompt.size() + steps.size(), what.c_str(), err / scale);
    EXPECT_LT(err / scale, 1e-3) << what;
  };
  // Split at every layer boundary: the last N of 5 layers on the emulated GPU, the rest (and
  // the output) on the CPU, with the activations copied across at each boundary; 6 and -1:
  // everything on the GPU.
  for (int ngl : {0, 1, 2, 3, 4, 5, 6, -1})
    compare(logits("cuda:0", ngl), fmt::format("-ngl {}", ngl));
  // Two GPUs, --tensor-split 3,2: the input and layers 0-2 on cuda:0, layers 3-4 and the output
  // on cuda:1; then -ngl 4 (layers 1-4) over both and the CPU.
  std::string plan;
  compare(logits("cuda", -1, {3, 2}, -1, &plan), "--tensor-split 3,2");
  EXPECT_NE(plan.find("input + layers 0-2 on cuda:0"), std::string::npos) << plan;
  EXPECT_NE(plan.find("layers 3-4 + output on cuda:1"), std::string::npos) << plan;
  compare(logits("cuda", 4, {1, 1}, -1, &plan), "-ngl 4 --tensor-split 1,1");
  EXPECT_NE(plan.find("layers 1-2 on cuda:0"), std::string::npos) << plan;
  EXPECT_NE(plan.find("layers 3-4 on cuda:1"), std::string::npos) << plan;
  EXPECT_NE(plan.find("input + layer 0 + output on cpu"), std::string::npos) << plan;
  // --main-gpu 1: the second GPU alone.
  compare(logits("cuda", -1, {}, 1, &plan), "--main-gpu 1");
  EXPECT_NE(plan.find("everything on cuda:1"), std::string::npos) << plan;
}

// The llama family beyond llama (rope_freqs, qwen2's biases, qwen3's QK-norm, phi3's fused
// weights, LongRoPE and window): synthetic models the test's fixture writes with
// scripts/make_llama_gguf.py, listed in POLYSTACK_EMU_FAMILY_MODELS as path=context pairs
// separated by ','. All on the emulated GPU, then split with the first layer on the CPU.
TEST(GpuEmulation, ModelFamiliesMatchTheCpuBackend) {
  const char* list = std::getenv("POLYSTACK_EMU_FAMILY_MODELS");
  if (!list || !*list) GTEST_SKIP() << "POLYSTACK_EMU_FAMILY_MODELS is not set";
  add_emulated_backend_once();
  std::string rest = list;
  int checked = 0;
  while (!rest.empty()) {
    const size_t semi = rest.find(',');
    const std::string item = rest.substr(0, semi);
    rest = semi == std::string::npos ? "" : rest.substr(semi + 1);
    const size_t eq = item.rfind('=');
    ASSERT_NE(eq, std::string::npos) << item;
    const std::string path = item.substr(0, eq);
    const int n_ctx = std::atoi(item.c_str() + eq + 1);
    auto loaded = LoadedModel::load(path);
    const std::vector<int32_t> prompt = {1, 300, 17, 420, 5, 99, 260, 301, 45};
    const std::vector<int32_t> steps = {77, 512};
    auto logits = [&](const std::string& device, int n_gpu_layers, int n_cpu_moe = -1) {
      ContextOptions o;
      o.device = device;
      o.n_gpu_layers = n_gpu_layers;
      o.n_cpu_moe = n_cpu_moe;
      o.strict = true;
      o.self_check = false;
      o.n_ctx = n_ctx;
      o.n_batch = 4;
      ModelContext s(loaded, o);
      std::vector<float> all = s.eval(prompt, true);
      for (int32_t t : steps) {
        const std::vector<float> step = s.eval(std::span<const int32_t>(&t, 1));
        all.insert(all.end(), step.begin(), step.end());
      }
      return all;
    };
    const std::vector<float> want = logits("cpu", -1);
    // Every layer on the GPU, the last one only, and for a mixture of experts every layer on
    // the GPU with the routed experts on the CPU (--cpu-moe) and the first layer's (--n-cpu-moe
    // 1).
    std::vector<std::pair<int, int>> splits = {{-1, -1}, {1, -1}};
    if (loaded->model->params().n_expert > 0) {
      splits.emplace_back(-1, LayerRequest::kAllLayers);
      splits.emplace_back(-1, 1);
    }
    for (auto [ngl, n_cpu_moe] : splits) {
      const std::vector<float> got = logits("cuda:0", ngl, n_cpu_moe);
      ASSERT_EQ(got.size(), want.size());
      double scale = 0, err = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        scale = std::max(scale, std::fabs(double(want[i])));
        err = std::max(err, std::fabs(double(got[i]) - want[i]));
      }
      std::printf(
          "%s (%s), -c %d -ngl %d --n-cpu-moe %d: max |emulated - cpu| / max |cpu| = "
          "%.2e\n",
          std::filesystem::path(path).filename().c_str(),
          loaded->model->params().architecture.c_str(), n_ctx, ngl, n_cpu_moe, err / scale);
      EXPECT_LT(err / scale, 1e-3) << path << " -ngl " << ngl << " --n-cpu-moe " << n_cpu_moe;
    }
    ++checked;
  }
  EXPECT_GE(checked, 6);
}

}  // namespace
}  // namespace ps
