#include "backends/cuda/targets.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>

namespace ps::gpu {

namespace {

std::optional<int> parse_int(std::string_view s) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// Parts of s between any of the separators, trimmed, empty ones dropped.
std::vector<std::string_view> split(std::string_view s, std::string_view seps) {
  std::vector<std::string_view> out;
  while (!s.empty()) {
    const size_t at = s.find_first_of(seps);
    std::string_view part = s.substr(0, at);
    while (!part.empty() && std::isspace(static_cast<unsigned char>(part.front())))
      part.remove_prefix(1);
    while (!part.empty() && std::isspace(static_cast<unsigned char>(part.back())))
      part.remove_suffix(1);
    if (!part.empty()) out.push_back(part);
    if (at == std::string_view::npos) break;
    s.remove_prefix(at + 1);
  }
  return out;
}

void add_sorted(std::vector<CudaArch>& v, CudaArch x) {
  if (std::find(v.begin(), v.end(), x) == v.end())
    v.insert(std::upper_bound(v.begin(), v.end(), x), x);
}

std::string arch_name(CudaArch a, std::string_view prefix) {
  return a.variant ? fmt::format("{}{}{}", prefix, a.cc, a.variant)
                   : fmt::format("{}{}", prefix, a.cc);
}
std::string sm(CudaArch a) { return arch_name(a, "sm_"); }
std::string sm(int cc) { return fmt::format("sm_{}", cc); }

// Whether code for `a` runs on compute capability cc: machine code (sass) or PTX.
bool runs_on(CudaArch a, int cc, bool sass) {
  if (a.variant == 'a') return a.cc == cc;
  if (sass || a.variant == 'f') return a.cc / 10 == cc / 10 && a.cc <= cc;
  return a.cc <= cc;
}

// The newest architecture of `archs` whose code runs on cc, the most specific of one
// architecture ('a' before 'f' before none); nullopt when none runs.
std::optional<CudaArch> best_for(const std::vector<CudaArch>& archs, int cc, bool sass) {
  std::optional<CudaArch> best;
  auto rank = [](char v) { return v == 'a' ? 2 : v == 'f' ? 1 : 0; };
  for (CudaArch a : archs) {
    if (!runs_on(a, cc, sass)) continue;
    if (!best || a.cc > best->cc || (a.cc == best->cc && rank(a.variant) > rank(best->variant)))
      best = a;
  }
  return best;
}

// What every GPU's report starts with.
DeviceInfo gpu_device(Api api, int index, const char* vendor, const std::string& name,
                      bool integrated, uint64_t total, uint64_t free) {
  DeviceInfo d;
  d.id = fmt::format("{}:{}", api_name(api), index);
  d.api = api;
  d.kind = integrated ? DeviceKind::IntegratedGpu : DeviceKind::DiscreteGpu;
  d.name = name;
  d.vendor = vendor;
  d.memory_total = total;
  d.memory_free = free;
  d.unified_memory = integrated;
  return d;
}

}  // namespace

std::optional<CudaTargets> parse_cuda_architectures(std::string_view list) {
  CudaTargets t;
  for (std::string_view e : split(list, ";,")) {
    bool real = true, virt = true;
    if (e.ends_with("-real")) {
      virt = false;
      e.remove_suffix(5);
    } else if (e.ends_with("-virtual")) {
      real = false;
      e.remove_suffix(8);
    }
    CudaArch a;
    if (e.ends_with('a') || e.ends_with('f')) {
      a.variant = e.back();
      e.remove_suffix(1);
    }
    const std::optional<int> cc = parse_int(e);
    if (!cc || *cc < 10 || *cc > 1000) return std::nullopt;
    a.cc = *cc;
    if (real) add_sorted(t.sass, a);
    if (virt) add_sorted(t.ptx, a);
  }
  return t;
}

std::string format_archs(const std::vector<CudaArch>& archs, std::string_view prefix) {
  std::string out;
  for (size_t i = 0; i < archs.size(); ++i) {
    if (i > 0) out += i + 1 == archs.size() ? " and " : ", ";
    out += arch_name(archs[i], prefix);
  }
  return out;
}

CudaCoverage cuda_coverage(int cc, const CudaTargets& built) {
  CudaCoverage c;
  if (const std::optional<CudaArch> a = best_for(built.sass, cc, true)) {
    c.kind = CudaCoverage::Kind::MachineCode;
    c.arch = *a;
    c.text = a->cc == cc ? "machine code for " + sm(*a)
                         : fmt::format("machine code for {}, which runs on {}", sm(*a), sm(cc));
    return c;
  }
  if (const std::optional<CudaArch> a = best_for(built.ptx, cc, false)) {
    c.kind = CudaCoverage::Kind::Ptx;
    c.arch = *a;
    c.text = fmt::format(
        "PTX for {}, which the driver compiles for {} on first use (slower start; "
        "rebuild with -DPOLYSTACK_CUDA_ARCHITECTURES={} for machine code)",
        arch_name(*a, "compute_"), sm(cc), cc);
    return c;
  }
  std::string have;
  if (!built.sass.empty()) have = "machine code for " + format_archs(built.sass, "sm_");
  if (!built.ptx.empty())
    have += fmt::format("{}PTX for {} (runs on that architecture and newer)",
                        have.empty() ? "" : " and ", format_archs(built.ptx, "compute_"));
  if (have.empty()) have = "no GPU code at all";
  c.text = fmt::format(
      "this card is {} but this build has {}; rebuild with "
      "-DPOLYSTACK_CUDA_ARCHITECTURES={}",
      sm(cc), have, cc);
  if (cc < 75)
    c.text +=
        " (CUDA 13 compiles for Turing, sm_75, and newer only: an older card needs a "
        "build with CUDA 12)";
  return c;
}

std::string cuda_version_string(int version) {
  return fmt::format("{}.{}", version / 1000, (version % 1000) / 10);
}

std::string parse_nvidia_driver_version(std::string_view text) {
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 ..." or "... Open
  // Kernel Module for x86_64  570.133.20  Release Build ...": the first token after "Module"
  // on that line made of digits with at least one dot.
  const size_t at = text.find("Module");
  if (at == std::string_view::npos) return {};
  std::string_view line = text.substr(at + 6);
  line = line.substr(0, line.find('\n'));
  for (std::string_view tok : split(line, " ")) {
    const bool version = std::isdigit(static_cast<unsigned char>(tok.front())) &&
                         tok.find('.') != std::string_view::npos &&
                         std::all_of(tok.begin(), tok.end(), [](char ch) {
                           return std::isdigit(static_cast<unsigned char>(ch)) || ch == '.';
                         });
    if (version) return std::string(tok);
  }
  return {};
}

std::string min_driver_for_cuda(int runtime_version) {
  switch (runtime_version / 1000) {
    case 11:
      return "450.80.02";
    case 12:
      return "525.60.13";
    case 13:
      return "580";
    default:
      return {};
  }
}

std::string cuda_driver_too_old(int driver_cuda, int runtime, const std::string& driver) {
  // Minor version compatibility: a driver for CUDA X.0 runs any X.y runtime.
  if (driver_cuda >= runtime / 1000 * 1000) return {};
  const std::string need = min_driver_for_cuda(runtime);
  return fmt::format(
      "the NVIDIA driver{} supports CUDA {}, older than this build's CUDA {} runtime needs "
      "(driver {}or newer); update the NVIDIA driver",
      driver.empty() ? "" : " " + driver, cuda_version_string(driver_cuda),
      cuda_version_string(runtime), need.empty() ? "" : need + " ");
}

std::string format_cuda_uuid(const std::array<uint8_t, 16>& u) {
  std::string hex;
  for (size_t i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) hex += '-';
    hex += fmt::format("{:02x}", u[i]);
  }
  return "GPU-" + hex;
}

DeviceInfo describe_cuda_device(const CudaDeviceFacts& f, const CudaTargets& built,
                                const std::string& driver, int driver_cuda, int runtime) {
  DeviceInfo d =
      gpu_device(Api::Cuda, f.index, "NVIDIA", f.name, f.integrated, f.memory_total, f.memory_free);
  d.driver_version = fmt::format("{}{}CUDA {}", driver, driver.empty() ? "" : ", ",
                                 cuda_version_string(driver_cuda));
  d.runtime_version = fmt::format("CUDA {}", cuda_version_string(runtime));
  if (const std::string need = min_driver_for_cuda(runtime); !need.empty())
    d.facts.emplace_back("driver needed", fmt::format("{} or newer (CUDA {} runtime)", need,
                                                      cuda_version_string(runtime / 1000 * 1000)));
  const int cc = f.cc_major * 10 + f.cc_minor;
  d.architecture = sm(cc);
  if (f.uuid) d.uuid = format_cuda_uuid(*f.uuid);
  d.facts.emplace_back("compute capability", fmt::format("{}.{}", f.cc_major, f.cc_minor));
  d.pci_bus_id = f.pci_bus_id;
  if (f.multiprocessors > 0)
    d.facts.emplace_back("multiprocessors", fmt::format("{}", f.multiprocessors));
  const CudaCoverage cov = cuda_coverage(cc, built);
  d.facts.emplace_back("kernels in this build",
                       cov.kind == CudaCoverage::Kind::None ? "none for this card" : cov.text);
  if (cov.kind == CudaCoverage::Kind::None) d.unusable = cov.text;
  return d;
}

std::vector<std::string> parse_hip_targets(std::string_view list) {
  std::vector<std::string> out;
  for (std::string_view e : split(list, ";,")) out.emplace_back(e);
  return out;
}

std::string hip_base_arch(std::string_view name) {
  return std::string(name.substr(0, name.find(':')));
}

std::string hip_uncovered(std::string_view gcn_arch_name, const std::vector<std::string>& built) {
  const std::string arch = hip_base_arch(gcn_arch_name);
  if (std::find(built.begin(), built.end(), arch) != built.end()) return {};
  std::string have;
  for (size_t i = 0; i < built.size(); ++i)
    have += (i == 0 ? "" : i + 1 == built.size() ? " and " : ", ") + built[i];
  return fmt::format(
      "this GPU is {} but this build has kernels for {} only; rebuild with "
      "-DPOLYSTACK_HIP_ARCHITECTURES={}",
      arch, have.empty() ? "no target" : have, arch);
}

DeviceInfo describe_hip_device(const HipDeviceFacts& f, const std::vector<std::string>& built,
                               const std::string& runtime) {
  DeviceInfo d =
      gpu_device(Api::Hip, f.index, "AMD", f.name, f.integrated, f.memory_total, f.memory_free);
  d.runtime_version = runtime;
  d.architecture = hip_base_arch(f.gcn_arch_name);
  d.uuid = f.uuid;
  d.pci_bus_id = f.pci_bus_id;
  if (f.warp_size > 0) d.facts.emplace_back("wavefront size", fmt::format("{}", f.warp_size));
  if (f.multiprocessors > 0)
    d.facts.emplace_back("compute units", fmt::format("{}", f.multiprocessors));
  d.unusable = hip_uncovered(f.gcn_arch_name, built);
  d.facts.emplace_back("kernels in this build", d.unusable.empty()
                                                    ? "machine code for " + d.architecture
                                                    : "none for this GPU");
  return d;
}

}  // namespace ps::gpu
