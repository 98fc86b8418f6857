#include "core/cpu_features.h"

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include "core/error.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace ps {
namespace {

#if defined(__x86_64__)

struct CpuidRegs {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};

// Leaves above the CPU's maximum are reported as all zero, so absent leaves read as "no feature".
CpuidRegs cpuid(uint32_t leaf, uint32_t subleaf = 0) {
  CpuidRegs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx)) return CpuidRegs{};
  return r;
}

bool bit(uint32_t reg, int n) { return (reg >> n) & 1u; }

// xgetbv is only legal once the OS has set CR4.OSXSAVE, which cpuid leaf 1 reports.
uint64_t read_xcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}

std::string trimmed(std::string s) {
  const auto not_space = [](unsigned char c) { return c != 0 && !std::isspace(c); };
  size_t end = s.size();
  while (end > 0 && !not_space(static_cast<unsigned char>(s[end - 1]))) --end;
  size_t begin = 0;
  while (begin < end && !not_space(static_cast<unsigned char>(s[begin]))) ++begin;
  return s.substr(begin, end - begin);
}

CpuFeatures detect() {
  CpuFeatures f;
  const CpuidRegs leaf0 = cpuid(0);
  const uint32_t max_leaf = leaf0.eax;
  char vendor[13] = {};
  std::memcpy(vendor + 0, &leaf0.ebx, 4);
  std::memcpy(vendor + 4, &leaf0.edx, 4);
  std::memcpy(vendor + 8, &leaf0.ecx, 4);
  f.vendor = vendor;

  const CpuidRegs leaf1 = cpuid(1);
  const bool osxsave = bit(leaf1.ecx, 27);
  const uint64_t xcr0 = osxsave ? read_xcr0() : 0;
  // The CPU having an instruction set is not enough: the OS must save the register state it
  // uses on context switches, or the registers are silently corrupted (or the instruction
  // faults). XCR0 says which state components the OS manages.
  const bool os_ymm = (xcr0 & 0x6) == 0x6;                      // SSE + AVX state
  const bool os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0;          // opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_tiles = (xcr0 & (3ull << 17)) == (3ull << 17);  // XTILECFG + XTILEDATA

  f.sse3 = bit(leaf1.ecx, 0);
  f.ssse3 = bit(leaf1.ecx, 9);
  f.fma = os_ymm && bit(leaf1.ecx, 12);
  f.avx = os_ymm && bit(leaf1.ecx, 28);
  f.f16c = os_ymm && bit(leaf1.ecx, 29);

  if (max_leaf >= 7) {
    const CpuidRegs leaf7 = cpuid(7, 0);
    f.avx2 = os_ymm && bit(leaf7.ebx, 5);
    f.avx512f = os_zmm && bit(leaf7.ebx, 16);
    // Every AVX-512 extension is an extension of AVX-512F: a hypervisor that masks F but
    // passes the others through must not make them look usable.
    f.avx512dq = f.avx512f && bit(leaf7.ebx, 17);
    f.avx512bw = f.avx512f && bit(leaf7.ebx, 30);
    f.avx512vl = f.avx512f && bit(leaf7.ebx, 31);
    f.avx512_vnni = f.avx512f && bit(leaf7.ecx, 11);
    // Linux additionally wants arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) before a
    // process touches tile data; that request belongs to whoever runs AMX code, so here AMX
    // means "the CPU has it and the OS manages its state".
    f.amx_bf16 = os_tiles && bit(leaf7.edx, 22);
    f.amx_tile = os_tiles && bit(leaf7.edx, 24);
    f.amx_int8 = os_tiles && bit(leaf7.edx, 25);
    if (leaf7.eax >= 1) {
      const CpuidRegs leaf7_1 = cpuid(7, 1);
      f.avx_vnni = os_ymm && bit(leaf7_1.eax, 4);
      f.avx512_bf16 = f.avx512f && bit(leaf7_1.eax, 5);
    }
  }

  if (cpuid(0x80000000).eax >= 0x80000004) {
    char brand[49] = {};
    for (uint32_t i = 0; i < 3; ++i) {
      const CpuidRegs r = cpuid(0x80000002 + i);
      std::memcpy(brand + 16 * i + 0, &r.eax, 4);
      std::memcpy(brand + 16 * i + 4, &r.ebx, 4);
      std::memcpy(brand + 16 * i + 8, &r.ecx, 4);
      std::memcpy(brand + 16 * i + 12, &r.edx, 4);
    }
    f.brand = trimmed(brand);
  }
  return f;
}

#else

CpuFeatures detect() { return CpuFeatures{}; }

#endif

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

}  // namespace

std::vector<std::string> CpuFeatures::names() const {
  const std::pair<bool, const char*> flags[] = {
      {sse3, "sse3"},
      {ssse3, "ssse3"},
      {avx, "avx"},
      {avx2, "avx2"},
      {fma, "fma"},
      {f16c, "f16c"},
      {avx512f, "avx512f"},
      {avx512bw, "avx512bw"},
      {avx512vl, "avx512vl"},
      {avx512dq, "avx512dq"},
      {avx512_vnni, "avx512_vnni"},
      {avx512_bf16, "avx512_bf16"},
      {avx_vnni, "avx_vnni"},
      {amx_tile, "amx_tile"},
      {amx_int8, "amx_int8"},
      {amx_bf16, "amx_bf16"},
  };
  std::vector<std::string> out;
  for (const auto& [set, name] : flags)
    if (set) out.emplace_back(name);
  return out;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

// The AVX-512 kernels are one translation unit compiled with VNNI enabled, so the compiler may
// use VNNI anywhere in it: the level therefore requires VNNI as well. CPUs with AVX-512 but no
// VNNI (Skylake-SP and Skylake-X) run the AVX2 kernels instead of a second AVX-512 variant;
// every later AVX-512 CPU (Cascade Lake on, Ice Lake on, Zen 4 on) has it.
IsaLevel best_isa_level() {
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  if (avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512_vnni)
    return IsaLevel::Avx512;
  if (avx2 && f.avx_vnni) return IsaLevel::AvxVnni;
  if (avx2) return IsaLevel::Avx2;
  return IsaLevel::Scalar;
}

bool isa_level_runs(IsaLevel l) {
  if (l > best_isa_level()) return false;
  return l != IsaLevel::AvxVnni || cpu_features().avx_vnni;
}

IsaLevel active_isa_level() {
  const IsaLevel best = best_isa_level();
  const char* env = std::getenv("POLYSTACK_ISA");
  if (env == nullptr || *env == '\0') return best;
  IsaLevel requested;
  if (equals_ignoring_case(env, "scalar")) {
    requested = IsaLevel::Scalar;
  } else if (equals_ignoring_case(env, "avx2")) {
    requested = IsaLevel::Avx2;
  } else if (equals_ignoring_case(env, "avxvnni")) {
    requested = IsaLevel::AvxVnni;
  } else if (equals_ignoring_case(env, "avx512")) {
    requested = IsaLevel::Avx512;
  } else {
    throw UsageError(std::string("POLYSTACK_ISA=") + env +
                     " is not an ISA level (expected scalar, avx2, avxvnni or avx512)");
  }
  // A level above what the CPU runs would fault on the first kernel; it can only lower it.
  if (requested >= best) return best;
  return isa_level_runs(requested) ? requested : IsaLevel::Avx2;
}

const char* isa_level_name(IsaLevel l) {
  switch (l) {
    case IsaLevel::Scalar:
      return "scalar";
    case IsaLevel::Avx2:
      return "avx2";
    case IsaLevel::AvxVnni:
      return "avxvnni";
    case IsaLevel::Avx512:
      return "avx512";
  }
  return "unknown";
}

}  // namespace ps
