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

// The SIMD level the CPU kernels dispatch on.
enum class IsaLevel { Scalar = 0, Avx2 = 1, Avx512 = 2 };
IsaLevel best_isa_level();
// POLYSTACK_ISA=scalar|avx2|avx512 caps the level (for tests and comparisons).
IsaLevel active_isa_level();
const char* isa_level_name(IsaLevel l);

}  // namespace ps
