#include "backend/physical_device.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <numeric>

#include "core/error.h"

namespace ps {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool all_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
}

// A hex field of at most `digits` digits; -1 when it is not one.
long hex_field(std::string_view s, size_t digits) {
  if (s.empty() || s.size() > digits || !all_hex(s)) return -1;
  return std::strtol(std::string(s).c_str(), nullptr, 16);
}

}  // namespace

std::string normalized_uuid(std::string_view uuid) {
  std::string s = lower(uuid);
  if (s.starts_with("gpu-")) s.erase(0, 4);
  std::string hex;
  for (char c : s)
    if (c != '-') hex += c;
  if (hex.empty() || hex.find_first_not_of('0') == std::string::npos) return "";
  return hex;
}

std::string normalized_pci_bus_id(std::string_view id) {
  // [domain:]bus:device.function
  std::string s = lower(id);
  const size_t dot = s.rfind('.');
  if (dot == std::string::npos) return "";
  const size_t c2 = s.rfind(':', dot);
  if (c2 == std::string::npos) return "";
  const size_t c1 = c2 == 0 ? std::string::npos : s.rfind(':', c2 - 1);
  const std::string_view v(s);
  const long domain = c1 == std::string::npos ? 0 : hex_field(v.substr(0, c1), 8);
  const long bus = hex_field(
      v.substr(c1 == std::string::npos ? 0 : c1 + 1, c2 - (c1 == std::string::npos ? 0 : c1 + 1)),
      2);
  const long dev = hex_field(v.substr(c2 + 1, dot - c2 - 1), 2);
  const long fn = hex_field(v.substr(dot + 1), 1);
  if (domain < 0 || bus < 0 || dev < 0 || dev > 0x1f || fn < 0 || fn > 7) return "";
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", domain, bus, dev, fn);
}

SameHardware same_hardware(const DeviceInfo& a, const DeviceInfo& b) {
  if (a.api == b.api) return SameHardware::No;
  const std::string ua = normalized_uuid(a.uuid), ub = normalized_uuid(b.uuid);
  if (!ua.empty() && ua == ub) return SameHardware::ByUuid;
  // AMD's HIP and Vulkan drivers report different UUIDs for one GPU: the PCI address decides.
  const std::string pa = normalized_pci_bus_id(a.pci_bus_id),
                    pb = normalized_pci_bus_id(b.pci_bus_id);
  if (!pa.empty() && pa == pb) return SameHardware::ByPciBusId;
  return SameHardware::No;
}

int api_rank(Api a) {
  switch (a) {
    case Api::Cuda:
    case Api::Hip:
    case Api::Metal:
      return 0;
    case Api::Vulkan:
      return 1;
    case Api::DirectML:
      return 2;
    case Api::OpenCL:
      return 3;
    case Api::Cpu:
      return 4;
    case Api::Null:
      return 5;
  }
  return 5;
}

std::vector<PhysicalDevice> group_physical_devices(const std::vector<ProbeReport>& reports) {
  std::vector<const DeviceInfo*> all;
  for (const auto& r : reports)
    for (const auto& d : r.devices) all.push_back(&d);
  // Union-find over the views; a group never holds two views through one API.
  std::vector<size_t> parent(all.size());
  std::iota(parent.begin(), parent.end(), size_t(0));
  const auto root = [&](size_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  const auto apis_of = [&](size_t r) {
    std::vector<Api> apis;
    for (size_t k = 0; k < all.size(); ++k)
      if (root(k) == r) apis.push_back(all[k]->api);
    return apis;
  };
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = i + 1; j < all.size(); ++j) {
      if (same_hardware(*all[i], *all[j]) == SameHardware::No) continue;
      const size_t ri = root(i), rj = root(j);
      if (ri == rj) continue;
      const std::vector<Api> a = apis_of(ri), b = apis_of(rj);
      const bool clash = std::any_of(
          a.begin(), a.end(), [&](Api x) { return std::find(b.begin(), b.end(), x) != b.end(); });
      if (!clash) parent[rj] = ri;
    }
  std::vector<PhysicalDevice> out;
  std::vector<size_t> group_of(all.size(), SIZE_MAX);
  for (size_t i = 0; i < all.size(); ++i) {
    const size_t r = root(i);
    if (group_of[r] == SIZE_MAX) {
      group_of[r] = out.size();
      out.emplace_back();
    }
    out[group_of[r]].views.push_back(all[i]);
  }
  for (PhysicalDevice& p : out)
    std::stable_sort(p.views.begin(), p.views.end(), [](const DeviceInfo* a, const DeviceInfo* b) {
      return api_rank(a->api) < api_rank(b->api);
    });
  return out;
}

DeviceSpec parse_device_spec(std::string_view text) {
  DeviceSpec s;
  s.text = std::string(text);
  const std::string t = lower(text);
  if (t.empty() || t == "auto") return s;
  if (t == "cpu" || t == "cpu:0") {
    s.kind = DeviceSpec::Kind::Cpu;
    s.value = "cpu";
    return s;
  }
  if (t == "gpu") {
    s.kind = DeviceSpec::Kind::Gpu;
    return s;
  }
  if (t.starts_with("pci:")) {
    s.kind = DeviceSpec::Kind::PciBus;
    s.value = normalized_pci_bus_id(t.substr(4));
    if (s.value.empty())
      throw UsageError(
          fmt::format("device '{}': '{}' is not a PCI address (expected the form pci:0000:41:00.0)",
                      text, text.substr(4)));
    return s;
  }
  const size_t colon = t.find(':');
  const std::string api_part = t.substr(0, colon);
  for (Api a : kAllApis) {
    if (api_name(a) != api_part) continue;
    s.api = a;
    if (colon == std::string::npos) {
      s.kind = DeviceSpec::Kind::OneApi;
      return s;
    }
    const std::string idx = t.substr(colon + 1);
    char* end = nullptr;
    const long v = std::strtol(idx.c_str(), &end, 10);
    if (idx.empty() || *end != '\0' || !std::isdigit(static_cast<unsigned char>(idx[0])) ||
        v > 1024)
      throw UsageError(fmt::format("device '{}': '{}' is not a device index", text, idx));
    s.kind = DeviceSpec::Kind::Id;
    s.value = a == Api::Cpu && v == 0 ? "cpu" : fmt::format("{}:{}", api_part, v);
    return s;
  }
  // A UUID: 32 hex digits, with or without dashes and nvidia-smi's "GPU-" prefix.
  const std::string u = normalized_uuid(t);
  if (u.size() == 32 && all_hex(u) &&
      (t.starts_with("gpu-") || t.find_first_not_of("0123456789abcdef-") == std::string::npos)) {
    s.kind = DeviceSpec::Kind::Uuid;
    s.value = u;
    return s;
  }
  throw UsageError(fmt::format(
      "unknown device '{}' (expected auto, cpu, gpu, an API such as cuda, an id such as "
      "vulkan:0, a UUID or pci:0000:41:00.0; see 'polystack devices')",
      text));
}

std::string device_spec_text(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* env = std::getenv("POLYSTACK_DEVICE");
  return env ? std::string(env) : std::string();
}

const DeviceInfo* find_named_device(const std::vector<ProbeReport>& reports,
                                    const DeviceSpec& spec) {
  const DeviceInfo* best = nullptr;
  for (const auto& r : reports)
    for (const auto& d : r.devices) {
      bool match = false;
      switch (spec.kind) {
        case DeviceSpec::Kind::Id:
        case DeviceSpec::Kind::Cpu:
          match = d.id == spec.value;
          break;
        case DeviceSpec::Kind::Uuid:
          match = normalized_uuid(d.uuid) == spec.value;
          break;
        case DeviceSpec::Kind::PciBus:
          match = normalized_pci_bus_id(d.pci_bus_id) == spec.value;
          break;
        default:
          break;
      }
      if (match && (!best || api_rank(d.api) < api_rank(best->api))) best = &d;
    }
  return best;
}

}  // namespace ps
