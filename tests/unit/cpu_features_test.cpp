// Run-time CPU feature detection: internal consistency, agreement with the kernel's own view in
// /proc/cpuinfo where there is one, and the POLYSTACK_ISA cap.
#include "core/cpu_features.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace {

using ps::CpuFeatures;
using ps::IsaLevel;

// Every flag with the name names() gives it, in names()'s documented order.
std::vector<std::pair<bool, std::string>> all_flags(const CpuFeatures& f) {
  return {{f.sse3, "sse3"},
          {f.ssse3, "ssse3"},
          {f.avx, "avx"},
          {f.avx2, "avx2"},
          {f.fma, "fma"},
          {f.f16c, "f16c"},
          {f.avx512f, "avx512f"},
          {f.avx512bw, "avx512bw"},
          {f.avx512vl, "avx512vl"},
          {f.avx512dq, "avx512dq"},
          {f.avx512_vnni, "avx512_vnni"},
          {f.avx512_bf16, "avx512_bf16"},
          {f.avx_vnni, "avx_vnni"},
          {f.amx_tile, "amx_tile"},
          {f.amx_int8, "amx_int8"},
          {f.amx_bf16, "amx_bf16"}};
}

// Sets POLYSTACK_ISA for one scope and restores what was there before.
class ScopedIsaEnv {
 public:
  explicit ScopedIsaEnv(const char* value) {
    if (const char* old = std::getenv("POLYSTACK_ISA")) saved_ = old;
    if (value) {
      setenv("POLYSTACK_ISA", value, 1);
    } else {
      unsetenv("POLYSTACK_ISA");
    }
  }
  ~ScopedIsaEnv() {
    if (saved_) {
      setenv("POLYSTACK_ISA", saved_->c_str(), 1);
    } else {
      unsetenv("POLYSTACK_ISA");
    }
  }
  ScopedIsaEnv(const ScopedIsaEnv&) = delete;
  ScopedIsaEnv& operator=(const ScopedIsaEnv&) = delete;

 private:
  std::optional<std::string> saved_;
};

TEST(CpuFeatures, FlagsAreConsistent) {
  const CpuFeatures& f = ps::cpu_features();
  EXPECT_EQ(&f, &ps::cpu_features()) << "detected once and cached";
  // Extensions imply what they extend (the OS-support checks must not break that).
  for (bool ext : {f.avx512bw, f.avx512vl, f.avx512dq, f.avx512_vnni, f.avx512_bf16}) {
    EXPECT_TRUE(!ext || f.avx512f);
  }
  EXPECT_TRUE(!(f.avx512f || f.avx2 || f.fma || f.f16c) || f.avx);
  EXPECT_TRUE(!f.avx_vnni || f.avx2);
  EXPECT_TRUE(!(f.amx_int8 || f.amx_bf16) || f.amx_tile);
  EXPECT_TRUE(!f.ssse3 || f.sse3);
#if defined(__x86_64__)
  EXPECT_FALSE(f.vendor.empty());
  EXPECT_EQ(f.vendor.size(), 12u) << f.vendor;
#else
  EXPECT_TRUE(f.names().empty());
#endif
  if (!f.brand.empty()) {
    EXPECT_NE(f.brand.front(), ' ');
    EXPECT_NE(f.brand.back(), ' ');
    EXPECT_EQ(f.brand.find('\0'), std::string::npos);
  }
}

TEST(CpuFeatures, NamesListExactlyTheSetFlagsInOrder) {
  const CpuFeatures& f = ps::cpu_features();
  std::vector<std::string> want;
  for (const auto& [set, name] : all_flags(f))
    if (set) want.push_back(name);
  EXPECT_EQ(f.names(), want);

  CpuFeatures custom;
  custom.avx2 = custom.amx_bf16 = custom.sse3 = true;
  EXPECT_EQ(custom.names(), (std::vector<std::string>{"sse3", "avx2", "amx_bf16"}));
  EXPECT_TRUE(CpuFeatures{}.names().empty());
}

// Linux lists a flag only when the CPU has it and the kernel enabled its register state, which
// is what detection checks through cpuid and XCR0; the two must agree.
TEST(CpuFeatures, AgreeWithProcCpuinfo) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, flags_line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) == 0) {
      flags_line = line.substr(line.find(':') + 1);
      break;
    }
  }
#if !defined(__x86_64__)
  GTEST_SKIP() << "feature detection covers x86-64 only";
#endif
  if (flags_line.empty()) GTEST_SKIP() << "no x86 flags line in /proc/cpuinfo on this system";
  std::set<std::string> listed;
  std::istringstream words(flags_line);
  for (std::string w; words >> w;) listed.insert(w);
  for (const auto& [set, name] : all_flags(ps::cpu_features())) {
    const std::string linux_name = name == "sse3" ? "pni" : name;
    EXPECT_EQ(set, listed.count(linux_name) == 1) << name;
  }
}

TEST(CpuFeatures, BestLevelFollowsTheFlags) {
  const CpuFeatures& f = ps::cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512_vnni;
  const IsaLevel want = avx512               ? IsaLevel::Avx512
                        : avx2 && f.avx_vnni ? IsaLevel::AvxVnni
                        : avx2               ? IsaLevel::Avx2
                                             : IsaLevel::Scalar;
  EXPECT_EQ(ps::best_isa_level(), want) << "flags: " << ::testing::PrintToString(f.names());
  EXPECT_TRUE(ps::isa_level_runs(IsaLevel::Scalar));
  EXPECT_EQ(ps::isa_level_runs(IsaLevel::Avx2), avx2);
  EXPECT_EQ(ps::isa_level_runs(IsaLevel::AvxVnni), avx2 && f.avx_vnni);
  EXPECT_EQ(ps::isa_level_runs(IsaLevel::Avx512), avx512);
}

TEST(CpuFeatures, PolystackIsaCapsTheLevel) {
  const IsaLevel best = ps::best_isa_level();
  const auto capped = [&](IsaLevel l) { return std::min(l, best); };
  {
    ScopedIsaEnv env(nullptr);
    EXPECT_EQ(ps::active_isa_level(), best);
  }
  {
    ScopedIsaEnv env("");
    EXPECT_EQ(ps::active_isa_level(), best);
  }
  {
    ScopedIsaEnv env("scalar");
    EXPECT_EQ(ps::active_isa_level(), IsaLevel::Scalar);
  }
  {
    ScopedIsaEnv env("AVX2");
    EXPECT_EQ(ps::active_isa_level(), capped(IsaLevel::Avx2));
  }
  {
    // An AVX-512 CPU without AVX-VNNI runs the plain AVX2 kernels at this level.
    ScopedIsaEnv env("avxvnni");
    const IsaLevel got = ps::active_isa_level();
    EXPECT_EQ(got,
              ps::isa_level_runs(IsaLevel::AvxVnni) ? IsaLevel::AvxVnni : capped(IsaLevel::Avx2));
    EXPECT_TRUE(ps::isa_level_runs(got));
  }
  {
    ScopedIsaEnv env("avx512");
    EXPECT_EQ(ps::active_isa_level(), capped(IsaLevel::Avx512));
  }
  {
    ScopedIsaEnv env("avx3");
    EXPECT_THROW(ps::active_isa_level(), ps::UsageError);
  }
}

TEST(CpuFeatures, LevelNames) {
  EXPECT_STREQ(ps::isa_level_name(IsaLevel::Scalar), "scalar");
  EXPECT_STREQ(ps::isa_level_name(IsaLevel::Avx2), "avx2");
  EXPECT_STREQ(ps::isa_level_name(IsaLevel::AvxVnni), "avxvnni");
  EXPECT_STREQ(ps::isa_level_name(IsaLevel::Avx512), "avx512");
}

}  // namespace
