// libFuzzer target for what device choice parses: --device specs and PCI addresses from the
// user, probe reports from a child process (which a broken plugin could garble), the
// POLYSTACK_DEVICE_MEMORY list, the placement plan over sizes and requests from the bytes, and
// a CUDA architecture list with the coverage of devices by it.
// The first byte picks the parser; none may crash, hang or leak, whatever the rest holds.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/physical_device.h"
#include "backend/probe_json.h"
#include "backends/cuda/targets.h"
#include "core/error.h"
#include "scheduler/placement.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 6) {
    case 0:
      try {
        const ps::DeviceSpec s = ps::parse_device_spec(text);
        (void)s;
      } catch (const ps::UsageError&) {
      }
      break;
    case 1:
      (void)ps::normalized_pci_bus_id(text);
      (void)ps::normalized_uuid(text);
      break;
    case 3:
      try {
        (void)ps::device_memory_cap(text, "cpu");
      } catch (const ps::UsageError&) {
      }
      break;
    case 4: {
      // Units, devices and a request from 8-byte words of the input.
      std::vector<uint64_t> w;
      for (size_t i = 0; i + 8 <= text.size(); i += 8) {
        uint64_t v = 0;
        for (size_t k = 0; k < 8; ++k) v = v << 8 | uint8_t(text[i + k]);
        w.push_back(v >> (v & 31));  // mostly large values, some small
      }
      if (w.size() < 4) break;
      const size_t n_gpu = w[0] % 3, n_units = 2 + w[1] % 12;
      size_t at = 2;
      const auto next = [&] { return at < w.size() ? w[at++] : 0; };
      std::vector<ps::UnitCost> units(n_units);
      for (auto& u : units) {
        u.weights = next() >> 20;
        u.kv = next() >> 20;
        u.experts = std::min(u.weights, next() >> 21);  // a mixture of experts' routed part
      }
      units.front().experts = units.back().experts = 0;  // only layers hold experts
      units[0].shared_with_output = std::min(units[0].weights, next() >> 20);
      std::vector<ps::PlacementDevice> devs;
      for (size_t g = 0; g < n_gpu; ++g) devs.push_back({"g", true, next(), false});
      devs.push_back({"cpu", false, next(), false});
      ps::LayerRequest r;
      r.mode = ps::LayerRequest::Mode(next() % 3);
      r.count = int(next() % 40);
      r.strict = next() & 1;
      r.n_cpu_moe = int(next() % 16) - 2;  // none (-1), or the first 0..13 layers' experts
      if (r.n_cpu_moe < -1) r.n_cpu_moe = ps::LayerRequest::kAllLayers;
      if (next() & 1)
        for (size_t g = 0; g < n_gpu; ++g) r.tensor_split.push_back(double(next() % 5));
      try {
        const ps::PlacementPlan p = ps::plan_placement(units, next() >> 20, devs, r);
        (void)p.to_json().dump();
      } catch (const ps::UsageError&) {
      }
      break;
    }
    case 5:
      if (const auto t = ps::gpu::parse_cuda_architectures(text))
        for (int cc : {35, 75, 86, 90, 100, 103, 120, 130}) (void)ps::gpu::cuda_coverage(cc, *t);
      break;
    default: {
      const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
      try {
        std::vector<ps::ProbeReport> reports{ps::probe_report_from_json(j)};
        (void)ps::group_physical_devices(reports);
      } catch (const ps::BackendError&) {
      }
      break;
    }
  }
  return 0;
}
