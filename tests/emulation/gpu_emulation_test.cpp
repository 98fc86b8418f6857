// The CUDA/HIP backend's kernels and device code, compiled for the host against the emulated
// runtime (src/backends/cuda/emulation.h), run the op conformance cases against the CPU
// backend. Built twice: with 32-lane warps (NVIDIA, RDNA) and with 64-lane ones (GCN, CDNA), so
// the reductions and the warp-per-row matmul are checked at both widths. This checks the
// kernels' logic (indexing, strides, reductions, barriers), not their speed or anything only
// hardware shows; scripts/device-check runs the same cases on a real GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/device.h"
#include "conformance_cases.h"

namespace ps {
namespace {

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
    // The vocabulary-sized cases launch tens of thousands of emulated blocks: on a GPU only.
    if (c->name.find("270001") != std::string::npos) continue;
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

}  // namespace
}  // namespace ps
