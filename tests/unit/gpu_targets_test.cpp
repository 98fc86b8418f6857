// The CUDA and HIP backends' host-side logic, which runs without a GPU: which devices this
// build's code covers, version strings, and the probe report of a device from its facts.
#include <gtest/gtest.h>

#include "backends/cuda/targets.h"

namespace ps::gpu {
namespace {

CudaTargets release_targets() {
  // What the release build compiles (src/CMakeLists.txt).
  return *parse_cuda_architectures("75-real;80-real;86-real;89-real;90-real;100-real;120");
}

TEST(CudaTargets, ParsesCMakeArchitectureSyntax) {
  const auto t = parse_cuda_architectures("90;75-real; 120-virtual ;80-real");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->sass, (std::vector<CudaArch>{{75}, {80}, {90}}));
  EXPECT_EQ(t->ptx, (std::vector<CudaArch>{{90}, {120}}));
  EXPECT_FALSE(parse_cuda_architectures("90;sm_80"));
  EXPECT_FALSE(parse_cuda_architectures("90-realish"));
  EXPECT_FALSE(parse_cuda_architectures("5"));
  EXPECT_FALSE(parse_cuda_architectures("90b-real"));
  EXPECT_FALSE(parse_cuda_architectures("a-real"));
  EXPECT_FALSE(parse_cuda_architectures("native"));
  EXPECT_TRUE(parse_cuda_architectures("")->sass.empty());
  // nvcc's arch-specific ('a') and family-specific ('f') targets.
  const auto h = parse_cuda_architectures("90a-real,100f;90-real");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->sass, (std::vector<CudaArch>{{90}, {90, 'a'}, {100, 'f'}}));
  EXPECT_EQ(h->ptx, (std::vector<CudaArch>{{100, 'f'}}));
}

TEST(CudaTargets, ArchSpecificCodeRunsOnItsOwnComputeCapabilityOnly) {
  // A build for an H200 alone: sm_90a machine code.
  const CudaTargets h = *parse_cuda_architectures("90a-real");
  CudaCoverage c = cuda_coverage(90, h);
  EXPECT_EQ(c.kind, CudaCoverage::Kind::MachineCode);
  EXPECT_EQ(c.arch, (CudaArch{90, 'a'}));
  EXPECT_EQ(c.text, "machine code for sm_90a");
  // sm_90a code does not run on a later 9.x (plain sm_90 code would), nor on 10.0.
  EXPECT_EQ(cuda_coverage(91, h).kind, CudaCoverage::Kind::None);
  c = cuda_coverage(100, h);
  EXPECT_EQ(c.kind, CudaCoverage::Kind::None);
  EXPECT_EQ(c.text,
            "this card is sm_100 but this build has machine code for sm_90a; rebuild with "
            "-DPOLYSTACK_CUDA_ARCHITECTURES=100");
  // Beside plain sm_90 code, a 9.0 card takes the arch-specific code and a 9.1 the plain.
  const CudaTargets both = *parse_cuda_architectures("90-real;90a-real");
  EXPECT_EQ(cuda_coverage(90, both).arch, (CudaArch{90, 'a'}));
  EXPECT_EQ(cuda_coverage(91, both).arch, (CudaArch{90}));
  // Arch-specific PTX is compiled for its own compute capability only.
  const CudaTargets ptx = *parse_cuda_architectures("90a-virtual");
  EXPECT_EQ(cuda_coverage(90, ptx).kind, CudaCoverage::Kind::Ptx);
  EXPECT_NE(cuda_coverage(90, ptx).text.find("PTX for compute_90a"), std::string::npos);
  EXPECT_EQ(cuda_coverage(100, ptx).kind, CudaCoverage::Kind::None);
}

TEST(CudaTargets, FamilySpecificCodeStaysWithinItsMajorVersion) {
  const CudaTargets f = *parse_cuda_architectures("100f");
  // Machine code for the family: sm_100 and sm_103 (B300), not sm_110 or sm_120.
  EXPECT_EQ(cuda_coverage(100, f).kind, CudaCoverage::Kind::MachineCode);
  EXPECT_EQ(cuda_coverage(103, f).text, "machine code for sm_100f, which runs on sm_103");
  EXPECT_EQ(cuda_coverage(120, f).kind, CudaCoverage::Kind::None);
  // Its PTX is family-specific too, where plain PTX would be compiled for any later card.
  EXPECT_EQ(cuda_coverage(110, *parse_cuda_architectures("100f-virtual")).kind,
            CudaCoverage::Kind::None);
  EXPECT_EQ(cuda_coverage(110, *parse_cuda_architectures("100-virtual")).kind,
            CudaCoverage::Kind::Ptx);
}

TEST(CudaTargets, MachineCodeRunsWithinItsMajorVersionOnly) {
  const CudaTargets t = release_targets();
  CudaCoverage c = cuda_coverage(90, t);
  EXPECT_EQ(c.kind, CudaCoverage::Kind::MachineCode);
  EXPECT_EQ(c.arch, CudaArch{90});
  EXPECT_EQ(c.text, "machine code for sm_90");
  // An RTX A2000 (8.6) and an Orin (8.7): the sm_86 code; an L4 (8.9) its own.
  c = cuda_coverage(87, t);
  EXPECT_EQ(c.kind, CudaCoverage::Kind::MachineCode);
  EXPECT_EQ(c.arch, CudaArch{86});
  EXPECT_EQ(c.text, "machine code for sm_86, which runs on sm_87");
  EXPECT_EQ(cuda_coverage(89, t).arch, CudaArch{89});
  // sm_103 (B300) runs sm_100 code; sm_121 (DGX Spark) runs sm_120 code.
  EXPECT_EQ(cuda_coverage(103, t).arch, CudaArch{100});
  EXPECT_EQ(cuda_coverage(121, t).arch, CudaArch{120});
  // sm_110 (Thor): no machine code of its major version, and PTX for compute_120 runs on sm_120
  // and newer only.
  c = cuda_coverage(110, t);
  EXPECT_EQ(c.kind, CudaCoverage::Kind::None);
}

TEST(CudaTargets, PtxCoversNewerArchitecturesWithTheFix) {
  const CudaTargets t = release_targets();
  // A future sm_130 card: only the compute_120 PTX runs, JIT-compiled.
  const CudaCoverage c = cuda_coverage(130, t);
  EXPECT_EQ(c.kind, CudaCoverage::Kind::Ptx);
  EXPECT_EQ(c.arch, CudaArch{120});
  EXPECT_NE(c.text.find("compiles for sm_130 on first use"), std::string::npos) << c.text;
  EXPECT_NE(c.text.find("-DPOLYSTACK_CUDA_ARCHITECTURES=130"), std::string::npos) << c.text;
}

TEST(CudaTargets, AnUncoveredCardIsExplainedWithTheFix) {
  // A CI-style build for sm_90 only, on an RTX 4090 (8.9).
  const CudaCoverage c = cuda_coverage(89, *parse_cuda_architectures("90-real"));
  EXPECT_EQ(c.kind, CudaCoverage::Kind::None);
  EXPECT_EQ(c.text,
            "this card is sm_89 but this build has machine code for sm_90; rebuild with "
            "-DPOLYSTACK_CUDA_ARCHITECTURES=89");
  // A Volta card: no CUDA 13 build can cover it, and the report says so.
  const CudaCoverage v = cuda_coverage(70, release_targets());
  EXPECT_EQ(v.kind, CudaCoverage::Kind::None);
  EXPECT_NE(v.text.find("machine code for sm_75, sm_80, sm_86, sm_89, sm_90, sm_100 and sm_120 "
                        "and PTX for compute_120"),
            std::string::npos)
      << v.text;
  EXPECT_NE(v.text.find("needs a build with CUDA 12"), std::string::npos) << v.text;
}

TEST(CudaVersions, FormatAndCompare) {
  EXPECT_EQ(cuda_version_string(13000), "13.0");
  EXPECT_EQ(cuda_version_string(12040), "12.4");
  EXPECT_EQ(cuda_version_string(12090), "12.9");
  EXPECT_EQ(min_driver_for_cuda(13000), "580");
  EXPECT_EQ(min_driver_for_cuda(12080), "525.60.13");
  EXPECT_EQ(min_driver_for_cuda(99000), "");
  // Minor version compatibility: a 13.0 driver runs a 13.1 runtime; 12.x does not run 13.x.
  EXPECT_EQ(cuda_driver_too_old(13000, 13010, "580.65.06"), "");
  EXPECT_EQ(cuda_driver_too_old(13020, 13000, ""), "");
  EXPECT_EQ(cuda_driver_too_old(12040, 13000, "550.54.14"),
            "the NVIDIA driver 550.54.14 supports CUDA 12.4, older than this build's CUDA 13.0 "
            "runtime needs (driver 580 or newer); update the NVIDIA driver");
}

TEST(CudaVersions, ReadsTheKernelModuleVersion) {
  EXPECT_EQ(parse_nvidia_driver_version(
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 07:09:28 "
                "UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"),
            "580.65.06");
  EXPECT_EQ(parse_nvidia_driver_version(
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release "
                "Build  (dvs-builder@U16-I3-B03-4-3)  Fri Mar 14 2025\n"),
            "570.133.20");
  EXPECT_EQ(parse_nvidia_driver_version("garbage"), "");
  EXPECT_EQ(parse_nvidia_driver_version(""), "");
}

TEST(CudaProbeReport, DescribesADeviceFromItsFacts) {
  CudaDeviceFacts f;
  f.index = 1;
  f.name = "NVIDIA H200";
  f.cc_major = 9;
  f.cc_minor = 0;
  f.memory_total = 150ull << 30;
  f.memory_free = 149ull << 30;
  f.uuid = std::array<uint8_t, 16>{0x5a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f, 0x60, 0x71,
                                   0x82, 0x93, 0xa4, 0xb5, 0xc6, 0xd7, 0xe8, 0xf9};
  f.pci_bus_id = "0000:4E:00.0";
  f.multiprocessors = 132;
  DeviceInfo d = describe_cuda_device(f, release_targets(), "580.65.06", 13000, 13000);
  EXPECT_EQ(d.id, "cuda:1");
  EXPECT_EQ(d.api, Api::Cuda);
  EXPECT_EQ(d.kind, DeviceKind::DiscreteGpu);
  EXPECT_EQ(d.architecture, "sm_90");
  EXPECT_EQ(d.uuid, "GPU-5a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9");
  EXPECT_EQ(d.driver_version, "580.65.06, CUDA 13.0");
  EXPECT_EQ(d.runtime_version, "CUDA 13.0");
  EXPECT_TRUE(d.unusable.empty());
  auto fact = [&](const std::string& k) {
    for (const auto& [key, v] : d.facts)
      if (key == k) return v;
    return std::string("(missing)");
  };
  EXPECT_EQ(fact("driver needed"), "580 or newer (CUDA 13.0 runtime)");
  EXPECT_EQ(fact("compute capability"), "9.0");
  EXPECT_EQ(d.pci_bus_id, "0000:4E:00.0");
  EXPECT_EQ(fact("multiprocessors"), "132");
  EXPECT_EQ(fact("kernels in this build"), "machine code for sm_90");

  // The same card against a build without its architecture: unusable, with the fix.
  d = describe_cuda_device(f, *parse_cuda_architectures("75-real;80-real"), "", 13000, 13000);
  EXPECT_EQ(d.driver_version, "CUDA 13.0");
  EXPECT_EQ(d.unusable.find("this card is sm_90"), 0u) << d.unusable;
  EXPECT_EQ(fact("kernels in this build"), "none for this card");
  // With PTX for compute_80 as well, the driver compiles it for the card.
  d = describe_cuda_device(f, *parse_cuda_architectures("75-real;80"), "", 13000, 13000);
  EXPECT_TRUE(d.unusable.empty()) << d.unusable;
  EXPECT_EQ(fact("kernels in this build").find("PTX for compute_80"), 0u);
}

TEST(HipTargets, ExactTargetsOnly) {
  const std::vector<std::string> built = parse_hip_targets("gfx906;gfx90a; gfx1030");
  ASSERT_EQ(built.size(), 3u);
  EXPECT_EQ(hip_base_arch("gfx90a:sramecc+:xnack-"), "gfx90a");
  EXPECT_EQ(hip_base_arch("gfx1030"), "gfx1030");
  EXPECT_EQ(hip_uncovered("gfx90a:sramecc+:xnack-", built), "");
  EXPECT_EQ(hip_uncovered("gfx1100", built),
            "this GPU is gfx1100 but this build has kernels for gfx906, gfx90a and gfx1030 only; "
            "rebuild with -DPOLYSTACK_HIP_ARCHITECTURES=gfx1100");
  // gfx1031 (RX 6700) cannot run gfx1030 code objects.
  EXPECT_NE(hip_uncovered("gfx1031", built), "");
}

TEST(HipProbeReport, DescribesADeviceFromItsFacts) {
  HipDeviceFacts f;
  f.index = 0;
  f.name = "AMD Instinct MI210";
  f.gcn_arch_name = "gfx90a:sramecc+:xnack-";
  f.memory_total = 64ull << 30;
  f.warp_size = 64;
  f.multiprocessors = 104;
  f.pci_bus_id = "0000:c1:00.0";
  DeviceInfo d = describe_hip_device(f, parse_hip_targets("gfx906;gfx90a"), "HIP 5.2");
  EXPECT_EQ(d.id, "hip:0");
  EXPECT_EQ(d.api, Api::Hip);
  EXPECT_EQ(d.architecture, "gfx90a");
  EXPECT_TRUE(d.unusable.empty()) << d.unusable;
  bool saw_wave = false;
  for (const auto& [k, v] : d.facts)
    if (k == "wavefront size") saw_wave = v == "64";
  EXPECT_TRUE(saw_wave);
  d = describe_hip_device(f, parse_hip_targets("gfx1030"), "HIP 5.2");
  EXPECT_NE(d.unusable.find("this GPU is gfx90a"), std::string::npos);
}

}  // namespace
}  // namespace ps::gpu
