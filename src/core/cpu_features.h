#pragma once
// Run-time x86-64 feature detection (cpuid + xgetbv), so one binary picks its SIMD kernels on
// any CPU. On other architectures every flag is false.
#include <string>
#include <vector>

namespace ps {

struct CpuFeatures {
  bool sse3 = false, ssse3 = false, avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_vnni = false, avx512_bf16 = false, avx_vnni = false;
  bool amx_tile = false, amx_int8 = false, amx_bf16 = false;
  std::string vendor;                      // "GenuineIntel", "AuthenticAMD", ...
  std::string brand;                       // "Intel(R) Xeon(R) Platinum ..."
  std::vector<std::string> names() const;  // the set flags, in a fixed order
};

// Detected once, cached.
const CpuFeatures& cpu_features();

// The SIMD level the CPU kernels dispatch on. AvxVnni is the AVX2 kernels with AVX-VNNI's
// 256-bit vpdpbusd where they have a variant for it (Alder Lake and later, Zen 5); an AVX-512
// CPU may lack AVX-VNNI, so a level below the best is not always one the CPU runs:
// isa_level_runs says.
enum class IsaLevel { Scalar = 0, Avx2 = 1, AvxVnni = 2, Avx512 = 3 };
IsaLevel best_isa_level();
bool isa_level_runs(IsaLevel l);
// POLYSTACK_ISA=scalar|avx2|avxvnni|avx512 caps the level (for tests and comparisons); avxvnni
// on a CPU without AVX-VNNI gives avx2.
IsaLevel active_isa_level();
const char* isa_level_name(IsaLevel l);

}  // namespace ps
