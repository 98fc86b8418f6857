#include "backend/policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/error.h"

namespace ps {
namespace {

// Discrete before integrated before the rest; a CPU (or a GPU API's CPU driver) last.
int kind_rank(DeviceKind k) {
  switch (k) {
    case DeviceKind::DiscreteGpu:
      return 0;
    case DeviceKind::IntegratedGpu:
      return 1;
    case DeviceKind::Accelerator:
      return 2;
    case DeviceKind::VirtualGpu:
      return 3;
    case DeviceKind::Cpu:
      return 4;
  }
  return 5;
}

std::string label(const DeviceInfo& d) { return fmt::format("{} ({})", d.id, d.name); }

std::string speed_text(double speedup) {
  return speedup >= 10 ? fmt::format("{:.0f}x", speedup) : fmt::format("{:.2g}x", speedup);
}

std::string check_text(const DeviceCheck& c) {
  if (!c.checked) return "self-check skipped (--no-self-check)";
  std::string s = c.from_cache ? "self-check passed (cached)" : "self-check passed";
  if (c.speedup > 0) s += fmt::format(", {} the CPU on the timed matmul", speed_text(c.speedup));
  return s;
}

struct Candidate {
  const DeviceInfo* info = nullptr;
  const PhysicalDevice* group = nullptr;
  DeviceCheck check;
};

// Better of two candidates that passed: measured speed (within 10 % is a tie), then memory.
bool better(const Candidate& a, const Candidate& b) {
  const double sa = a.check.speedup, sb = b.check.speedup;
  if (sa > 0 && sb > 0 && std::max(sa, sb) > 1.1 * std::min(sa, sb)) return sa > sb;
  const uint64_t ma = a.info->memory_free ? a.info->memory_free : a.info->memory_total;
  const uint64_t mb = b.info->memory_free ? b.info->memory_free : b.info->memory_total;
  return ma > mb;
}

}  // namespace

std::string describe_device(const DeviceInfo& d) {
  std::string s = d.name;
  if (!d.driver_version.empty())
    s += d.driver_version.find_first_of("0123456789") == 0
             ? fmt::format(", driver {}", d.driver_version)
             : fmt::format(", {}", d.driver_version);
  if (!d.runtime_version.empty() && d.driver_version.find(d.runtime_version) == std::string::npos)
    s += fmt::format(", {}", d.runtime_version);
  return s;
}

DeviceChoice choose_device(const std::vector<ProbeReport>& reports, const PolicyOptions& opts,
                           const CheckFn& check_fn) {
  using Kind = DeviceSpec::Kind;
  const DeviceSpec& spec = opts.spec;
  const auto run_check = [&](const DeviceInfo& d) {
    if (!opts.self_check || d.api == Api::Cpu) {
      DeviceCheck c;
      c.passed = true;
      return c;
    }
    return check_fn(d);
  };
  const DeviceInfo* cpu = nullptr;
  for (const auto& r : reports)
    for (const auto& d : r.devices)
      if (d.api == Api::Cpu) cpu = &d;

  // --- a device named by id, UUID or PCI address ----------------------------------------------
  if (spec.kind == Kind::Id || spec.kind == Kind::Uuid || spec.kind == Kind::PciBus ||
      spec.kind == Kind::Cpu) {
    const DeviceInfo* d = find_named_device(reports, spec);
    if (!d) {
      if (spec.kind == Kind::Id || spec.kind == Kind::Cpu) {
        for (const auto& r : reports) {
          if (r.api != spec.api && !(spec.kind == Kind::Cpu && r.api == Api::Cpu)) continue;
          if (r.devices.empty())
            throw BackendError(
                fmt::format("device '{}' is not available: {}", spec.text, r.reason));
          throw BackendError(fmt::format("device '{}' does not exist: {} has {} device(s)",
                                         spec.text, api_name(r.api), r.devices.size()));
        }
      }
      throw BackendError(
          fmt::format("no device has {} {} (see 'polystack devices' for every device's ids)",
                      spec.kind == Kind::Uuid ? "the UUID" : "the PCI address", spec.text));
    }
    if (!d->unusable.empty())
      throw BackendError(fmt::format("{} cannot run models: {}", label(*d), d->unusable));
    const DeviceCheck c = run_check(*d);
    if (!c.passed)
      throw BackendError(
          fmt::format("{} failed its self-check: {} (--no-self-check runs on it "
                      "anyway)",
                      label(*d), c.failure));
    DeviceChoice out;
    out.device_id = d->id;
    out.reason = fmt::format("named with {}", opts.named_by);
    if (d->api != Api::Cpu) out.reason += "; " + check_text(c);
    return out;
  }

  // --- auto, gpu, or one API: rank, check, choose ---------------------------------------------
  DeviceChoice out;
  std::vector<std::string> failures;  // passed over for a failure (for --strict)
  if (spec.kind == Kind::OneApi)
    for (const auto& r : reports)
      if (r.api == spec.api && r.devices.empty())
        throw BackendError(fmt::format("no {} device: {}", api_display_name(r.api), r.reason));
  for (const auto& r : reports)
    if (r.api != Api::Cpu && r.devices.empty() && (r.built || r.no_hardware) &&
        (spec.kind != Kind::OneApi || r.api == spec.api)) {
      std::vector<std::string>& list = r.no_hardware ? out.absent : out.passed;
      list.push_back(fmt::format("{}: {}", api_name(r.api), r.reason));
      if (r.failed) failures.push_back(list.back());
    }
  const std::vector<PhysicalDevice> groups = group_physical_devices(reports);
  // Per physical device: its views that may run models, in API order.
  struct Group {
    const PhysicalDevice* physical;
    std::vector<const DeviceInfo*> views;
    int rank;
  };
  std::vector<Group> ranked;
  for (const PhysicalDevice& p : groups) {
    Group g{&p, {}, 0};
    for (const DeviceInfo* v : p.views) {
      if (v->api == Api::Cpu) continue;
      if (spec.kind == Kind::OneApi && v->api != spec.api) continue;
      if (!v->unusable.empty()) {
        out.passed.push_back(fmt::format("{}: {}", label(*v), v->unusable));
        continue;
      }
      g.views.push_back(v);
    }
    if (g.views.empty()) continue;
    g.rank = kind_rank(g.views.front()->kind);
    if (g.views.front()->kind == DeviceKind::Cpu && spec.kind != Kind::OneApi) {
      out.passed.push_back(fmt::format(
          "{}: a CPU driver of {} (it runs on this CPU, which the CPU backend uses directly); "
          "never chosen by default",
          label(*g.views.front()), api_name(g.views.front()->api)));
      continue;
    }
    ranked.push_back(g);
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const Group& a, const Group& b) { return a.rank < b.rank; });

  std::optional<Candidate> best;
  std::vector<Candidate> also_passed;
  int best_rank = -1;
  for (const Group& g : ranked) {
    if (best && g.rank > best_rank) {
      // A lower kind than what was chosen: not checked.
      out.passed.push_back(fmt::format("{}: a {}, ranked below the {} {}", label(*g.views.front()),
                                       device_kind_name(g.views.front()->kind),
                                       device_kind_name(best->info->kind), best->info->id));
      continue;
    }
    std::optional<Candidate> chosen_view;
    for (const DeviceInfo* v : g.views) {
      if (chosen_view) {
        out.passed.push_back(fmt::format("{}: the same device as {}, used through {}", label(*v),
                                         chosen_view->info->id, api_name(chosen_view->info->api)));
        continue;
      }
      const DeviceCheck c = run_check(*v);
      if (!c.passed) {
        out.passed.push_back(
            fmt::format("{}: self-check failed: {}; passed over", label(*v), c.failure));
        failures.push_back(out.passed.back());
        continue;
      }
      if (spec.kind == Kind::Auto && c.checked && c.speedup > 0 && c.speedup <= 1) {
        out.passed.push_back(
            fmt::format("{}: {}, no faster than the CPU; passed over", label(*v), check_text(c)));
        break;
      }
      chosen_view = Candidate{v, g.physical, c};
    }
    if (!chosen_view) continue;
    if (!best || better(*chosen_view, *best)) {
      if (best) also_passed.push_back(*best);
      best = chosen_view;
      best_rank = g.rank;
    } else {
      also_passed.push_back(*chosen_view);
    }
  }
  if (opts.strict && !failures.empty())
    throw BackendError(
        fmt::format("--strict: {} (without --strict it is passed over)", failures.front()));
  if (best) {
    for (const Candidate& c : also_passed) out.also_usable.push_back(c.info->id);
    for (const Candidate& c : also_passed)
      out.passed.push_back(fmt::format("{}: {}, but {} ranks higher", label(*c.info),
                                       check_text(c.check), best->info->id));
    out.device_id = best->info->id;
    const std::string kind(device_kind_name(best->info->kind));
    out.reason = spec.kind == Kind::Auto
                     ? fmt::format("{}; the best {} found", check_text(best->check), kind)
                 : spec.kind == Kind::Gpu
                     ? fmt::format("the best GPU found (--device gpu); {}", check_text(best->check))
                     : fmt::format("the best {} device found (--device {}); {}", api_name(spec.api),
                                   spec.text, check_text(best->check));
    return out;
  }
  if (spec.kind != Kind::Auto) {
    std::string why;
    for (const std::string& p : out.passed) why += (why.empty() ? "" : "; ") + p;
    const std::string what =
        spec.kind == Kind::Gpu ? "GPU" : fmt::format("{} device", api_name(spec.api));
    throw BackendError(
        fmt::format("no {} passed ({}): {}", what,
                    spec.kind == Kind::Gpu ? "--device gpu" : "--device " + spec.text,
                    why.empty() ? "none was found" : why));
  }
  if (!cpu) throw BackendError("no usable device found at all (not even the CPU)");
  out.device_id = cpu->id;
  out.reason = ranked.empty() && out.passed.empty() ? "no GPU found"
               : ranked.empty()                     ? "no GPU found that can run models"
                                                    : "no GPU passed its checks";
  return out;
}

}  // namespace ps
