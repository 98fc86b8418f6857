#include "scheduler/placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace ps {
namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;

std::string unit_name(int unit, int n_units) {
  if (unit == 0) return "input";
  if (unit == n_units - 1) return "output";
  return fmt::format("layer {}", unit - 1);
}

// The bytes units put on one device: weights (a tied embedding once), KV caches, and the
// compute buffer when it runs anything; routed experts kept on the CPU (experts_on_cpu, device
// `cpu`) count there instead of on their unit's GPU.
uint64_t device_need(const std::vector<UnitCost>& units, const std::vector<int>& unit_device,
                     const std::vector<bool>& experts_on_cpu, int cpu, int d, uint64_t compute) {
  uint64_t n = 0;
  bool any = false;
  const int last = int(units.size()) - 1;
  for (int u = 0; u <= last; ++u) {
    const UnitCost& c = units[size_t(u)];
    const bool apart = experts_on_cpu[size_t(u)] && unit_device[size_t(u)] != cpu;
    if (apart && d == cpu) {
      n += c.experts;
      any = true;
    }
    if (unit_device[size_t(u)] != d) continue;
    any = true;
    n += c.weights + c.kv - (apart ? c.experts : 0);
  }
  if (unit_device[0] == d && unit_device[size_t(last)] == d) n -= units[0].shared_with_output;
  return any ? n + compute : 0;
}

// Assigns the units in `on_gpu` (a flag per unit) to the GPUs 0..g-1: the repeating layers in
// order, in proportion to `share`; the input to the first GPU, the output to the last. The
// rest to the CPU (index g).
std::vector<int> assign(const std::vector<bool>& on_gpu, const std::vector<double>& share) {
  const int n = int(on_gpu.size());
  const int g = int(share.size());
  std::vector<int> out(size_t(n), g);
  std::vector<int> layers;
  for (int u = 1; u + 1 < n; ++u)
    if (on_gpu[size_t(u)]) layers.push_back(u);
  double total = 0;
  for (double s : share) total += s;
  const int m = int(layers.size());
  int at = 0;
  double cum = 0;
  for (int k = 0; k < g; ++k) {
    cum += share[size_t(k)];
    const int end = k == g - 1 ? m : int(std::lround(double(m) * cum / total));
    for (; at < end; ++at) out[size_t(layers[size_t(at)])] = k;
  }
  // The input on the first GPU with a share, the output on the last.
  int first = 0, last = g - 1;
  while (first < g - 1 && share[size_t(first)] == 0) ++first;
  while (last > 0 && share[size_t(last)] == 0) --last;
  if (on_gpu[0]) out[0] = first;
  if (on_gpu[size_t(n - 1)]) out[size_t(n - 1)] = last;
  return out;
}

}  // namespace

uint64_t placement_headroom(uint64_t free) { return std::min<uint64_t>(free / 10, 512 * kMiB); }

std::string human_bytes(uint64_t n) {
  if (n >= (uint64_t(1) << 30)) return fmt::format("{:.1f} GiB", double(n) / double(1 << 30));
  if (n >= kMiB) return fmt::format("{:.1f} MiB", double(n) / double(kMiB));
  if (n >= 1024) return fmt::format("{:.0f} KiB", double(n) / 1024.0);
  return fmt::format("{} B", n);
}

bool PlacementPlan::single_device() const {
  return std::all_of(unit_device.begin(), unit_device.end(), [](int d) { return d == 0; });
}

std::vector<int> PlacementPlan::expert_devices() const {
  std::vector<int> out = unit_device;
  const int cpu = int(devices.size()) - 1;
  for (size_t u = 0; u < out.size(); ++u)
    if (u < experts_on_cpu.size() && experts_on_cpu[u]) out[u] = cpu;
  return out;
}

std::string PlacementPlan::experts_text() const {
  const int n = n_units(), cpu = int(devices.size()) - 1;
  std::vector<std::string> parts;
  for (int u = 1; u + 1 < n; ++u) {
    const auto apart = [&](int v) {
      return experts_on_cpu[size_t(v)] && unit_device[size_t(v)] != cpu;
    };
    if (!apart(u)) continue;
    int v = u;
    while (v + 2 < n && apart(v + 1)) ++v;
    parts.push_back(v == u ? fmt::format("layer {}", u - 1)
                           : fmt::format("layers {}-{}", u - 1, v - 1));
    u = v;
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

namespace {

// The units whose owner is `who` in words: "input + layers 0-3 + output".
std::vector<std::string> owned_units(const std::vector<int>& owner, int who) {
  const int n = int(owner.size());
  std::vector<std::string> parts;
  if (owner[0] == who) parts.push_back("input");
  for (int u = 1; u + 1 < n; ++u) {
    if (owner[size_t(u)] != who) continue;
    int v = u;
    while (v + 2 < n && owner[size_t(v + 1)] == who) ++v;
    parts.push_back(v == u ? fmt::format("layer {}", u - 1)
                           : fmt::format("layers {}-{}", u - 1, v - 1));
    u = v;
  }
  if (n > 1 && owner[size_t(n - 1)] == who) parts.push_back("output");
  return parts;
}

}  // namespace

std::vector<uint64_t> rank_needs(const std::vector<UnitCost>& units,
                                 const std::vector<int>& unit_rank, int n_ranks) {
  std::vector<uint64_t> need(static_cast<size_t>(n_ranks), 0);
  for (size_t u = 0; u < units.size(); ++u)
    need[size_t(unit_rank[u])] += units[u].weights + units[u].kv;
  if (unit_rank.front() == unit_rank.back())
    need[size_t(unit_rank[0])] -= units[0].shared_with_output;
  return need;
}

std::vector<int> plan_ranks(const std::vector<UnitCost>& units,
                            const std::vector<PlacementRank>& ranks,
                            const std::vector<double>& split) {
  const int n = int(units.size()), R = int(ranks.size());
  const int L = n - 2;
  if (R < 1) throw BackendError("placement: an MPI job has at least one rank");
  if (L < R)
    throw UsageError(fmt::format(
        "{} ranks for a model of {} layers: each rank holds at least one layer (mpirun -np {} "
        "at most)",
        R, L, std::max(L, 1)));
  std::vector<double> share(static_cast<size_t>(R), 1.0);
  if (!split.empty()) {
    if (int(split.size()) != R)
      throw UsageError(
          fmt::format("--rank-split has {} proportions for {} ranks", split.size(), R));
    for (size_t r = 0; r < split.size(); ++r) {
      if (!(split[r] > 0) || !std::isfinite(split[r]))
        throw UsageError("--rank-split takes a positive proportion for every rank");
      share[r] = split[r];
    }
  } else if (std::all_of(ranks.begin(), ranks.end(),
                         [](const PlacementRank& r) { return r.free > 0; })) {
    for (int r = 0; r < R; ++r) share[size_t(r)] = double(ranks[size_t(r)].free);
  }
  std::vector<double> cost(static_cast<size_t>(n));
  double total = 0, total_share = 0;
  for (int u = 0; u < n; ++u)
    total += cost[size_t(u)] = double(units[size_t(u)].weights + units[size_t(u)].kv);
  for (double s : share) total_share += s;
  std::vector<int> out(static_cast<size_t>(n), 0);
  int r = 0;
  bool has_layer = false;
  double cum = 0, target = total * share[0] / total_share;
  for (int u = 0; u < n; ++u) {
    // Layers left from here for the ranks after r, each of which needs one.
    const int layers_left = u <= L ? L - std::max(u, 1) + 1 : 0;
    const bool must = layers_left <= R - 1 - r;
    if (r < R - 1 && has_layer && (must || cum + cost[size_t(u)] / 2 > target)) {
      ++r;
      has_layer = false;
      target += total * share[size_t(r)] / total_share;
    }
    out[size_t(u)] = r;
    cum += cost[size_t(u)];
    if (u >= 1 && u <= L) has_layer = true;
  }
  // What each rank holds, against what it has.
  const std::vector<uint64_t> need = rank_needs(units, out, R);
  for (int k = 0; k < R; ++k)
    if (ranks[size_t(k)].free > 0 && need[size_t(k)] > ranks[size_t(k)].free)
      throw UsageError(fmt::format("rank {} ({}) would hold {} of the model but has {} free{}", k,
                                   ranks[size_t(k)].host, human_bytes(need[size_t(k)]),
                                   human_bytes(ranks[size_t(k)].free),
                                   split.empty() ? ": the model needs more ranks or memory"
                                                 : ": give it a smaller --rank-split share"));
  return out;
}

std::string PlacementPlan::rank_units_text(int r) const {
  const std::vector<std::string> parts = owned_units(unit_rank, r);
  return parts.empty() ? "nothing" : fmt::format("{}", fmt::join(parts, " + "));
}

std::string PlacementPlan::rank_text(int r) const {
  const PlacementRank& pr = ranks.at(size_t(r));
  return fmt::format("rank {} on {}: {} on {}, needs {}, free {}, resident {}{}", r, pr.host,
                     rank_units_text(r), pr.devices, human_bytes(pr.need),
                     pr.free ? human_bytes(pr.free) : "unknown", human_bytes(pr.rss),
                     r ? fmt::format(", hop from rank 0 {:.1f} us", pr.hop_seconds * 1e6) : "");
}

std::string PlacementPlan::units_text(int device) const {
  const int n = n_units();
  std::vector<int> owner = unit_device;
  for (int u = 0; u < n; ++u)
    if (!local(u)) owner[size_t(u)] = -1;
  int count = 0;
  for (int u = 0; u < n; ++u) count += owner[size_t(u)] == device;
  // The CPU also runs the routed experts its GPUs' layers leave to it.
  const bool cpu = device == int(devices.size()) - 1;
  const std::string apart = experts_on_cpu.empty() ? std::string() : experts_text();
  const std::string experts =
      cpu && !apart.empty() ? fmt::format("the routed experts of {}", apart) : std::string();
  if (count == n) return !cpu && !apart.empty() ? "everything but routed experts" : "everything";
  if (count == 0) return experts.empty() ? "nothing" : experts;
  std::vector<std::string> parts = owned_units(owner, device);
  if (!experts.empty()) parts.push_back(experts);
  return fmt::format("{}", fmt::join(parts, " + "));
}

nlohmann::json PlacementPlan::to_json() const {
  nlohmann::json j;
  j["mode"] = mode;
  j["summary"] = summary;
  j["compute_bytes"] = compute;
  j["whole_model_bytes"] = whole_model;
  j["devices"] = nlohmann::json::array();
  for (size_t d = 0; d < devices.size(); ++d)
    j["devices"].push_back({{"id", devices[d].id},
                            {"gpu", devices[d].gpu},
                            {"free_bytes", devices[d].free},
                            {"free_capped", devices[d].capped},
                            {"headroom_bytes", headroom[d]},
                            {"need_bytes", need[d]},
                            {"units", units_text(int(d))}});
  j["units"] = nlohmann::json::array();
  const std::vector<int> expert_device = expert_devices();
  for (int u = 0; u < n_units(); ++u) {
    nlohmann::json unit = {
        {"unit", unit_name(u, n_units())},
        {"layer", u - 1},
        {"device", local(u) ? nlohmann::json(devices[size_t(unit_device[size_t(u)])].id)
                            : nlohmann::json(nullptr)},
        {"weights_bytes", units[size_t(u)].weights},
        {"kv_bytes", units[size_t(u)].kv},
        {"shared_with_output_bytes", units[size_t(u)].shared_with_output}};
    if (units[size_t(u)].experts > 0) {
      unit["experts_bytes"] = units[size_t(u)].experts;
      unit["experts_device"] = devices[size_t(expert_device[size_t(u)])].id;
    }
    j["units"].push_back(unit);
  }
  if (!experts_note.empty()) j["experts_note"] = experts_note;
  j["fallbacks"] = fallbacks;
  if (!unit_rank.empty()) {
    for (int u = 0; u < n_units(); ++u) j["units"][size_t(u)]["rank"] = unit_rank[size_t(u)];
    j["rank"] = rank;
    j["ranks"] = nlohmann::json::array();
    for (size_t r = 0; r < ranks.size(); ++r)
      j["ranks"].push_back({{"rank", r},
                            {"host", ranks[r].host},
                            {"devices", ranks[r].devices},
                            {"free_bytes", ranks[r].free},
                            {"need_bytes", ranks[r].need},
                            {"resident_bytes", ranks[r].rss},
                            {"hop_seconds", ranks[r].hop_seconds},
                            {"units", rank_units_text(int(r))},
                            {"summary", ranks[r].summary}});
  }
  return j;
}

PlacementPlan plan_placement(const std::vector<UnitCost>& units, uint64_t compute,
                             const std::vector<PlacementDevice>& devices, const LayerRequest& req) {
  using Mode = LayerRequest::Mode;
  const int n = int(units.size());
  if (n < 2) throw BackendError("placement: a model has at least an input and an output");
  if (devices.empty() || devices.back().gpu)
    throw BackendError("placement: the CPU comes last in the device list");
  const int g = int(devices.size()) - 1;  // GPUs
  const int L = n - 2;
  PlacementPlan plan;
  plan.unit_rank = req.unit_rank;
  plan.rank = req.rank;
  plan.devices = devices;
  plan.units = units;
  plan.compute = compute;
  for (const UnitCost& u : units) plan.whole_model += u.weights + u.kv;
  plan.whole_model += compute;
  plan.whole_model -= units[0].shared_with_output;
  for (const PlacementDevice& d : devices) plan.headroom.push_back(placement_headroom(d.free));
  plan.mode = req.mode == Mode::Auto  ? "-ngl auto"
              : req.mode == Mode::All ? "-ngl all"
                                      : fmt::format("-ngl {}", req.count);
  if (!req.tensor_split.empty() && int(req.tensor_split.size()) != g)
    throw UsageError(
        fmt::format("--tensor-split has {} proportions for {} GPU(s)", req.tensor_split.size(), g));
  for (double s : req.tensor_split)
    if (!(s >= 0) || !std::isfinite(s))
      throw UsageError("--tensor-split takes proportions of zero or more");
  if (!req.tensor_split.empty() && std::all_of(req.tensor_split.begin(), req.tensor_split.end(),
                                               [](double s) { return s == 0; }))
    throw UsageError("--tensor-split gives every GPU a share of zero");

  // The order in which units go to the GPUs: for -ngl N the last N layers, then (N above the
  // layer count) everything; auto fit takes the output first, as it sits after the last layer
  // and holds the largest matmul.
  std::vector<int> order;
  if (req.mode == Mode::Auto) order.push_back(n - 1);
  for (int u = n - 2; u >= 1; --u) order.push_back(u);
  if (req.mode != Mode::Auto) order.push_back(n - 1);
  order.push_back(0);
  // In an MPI job, -ngl counts this rank's own layers: its units first, in the same order (the
  // other ranks' cost nothing here).
  int L_here = L;
  if (!req.unit_rank.empty()) {
    std::stable_partition(order.begin(), order.end(),
                          [&](int u) { return req.unit_rank[size_t(u)] == req.rank; });
    L_here = 0;
    for (int u = 1; u <= L; ++u) L_here += req.unit_rank[size_t(u)] == req.rank;
  }
  const auto budget = [&](int d) -> uint64_t {
    const PlacementDevice& dev = devices[size_t(d)];
    return dev.free - plan.headroom[size_t(d)];
  };
  std::vector<double> share = req.tensor_split;
  if (share.empty()) share.assign(size_t(g), 1.0);
  const auto plan_for = [&](int k) {
    std::vector<bool> on_gpu(size_t(n), false);
    for (int i = 0; i < k; ++i) on_gpu[size_t(order[size_t(i)])] = true;
    return g == 0 ? std::vector<int>(size_t(n), 0) : assign(on_gpu, share);
  };
  // Routed experts apart on the CPU: all of them when no GPU runs them, the first n_cpu_moe
  // layers' when asked; auto fit may add more below.
  std::vector<bool>& apart = plan.experts_on_cpu;
  apart.assign(size_t(n), false);
  // What --cpu-moe / --n-cpu-moe ask for (--strict refuses only the rest).
  std::vector<bool> asked(size_t(n), false);
  for (int u = 1; u + 1 < n && u <= req.n_cpu_moe; ++u) asked[size_t(u)] = true;
  const bool has_experts =
      std::any_of(units.begin(), units.end(), [](const UnitCost& u) { return u.experts > 0; });
  if (has_experts && g > 0) {
    if (!req.experts_cpu_reason.empty()) {
      apart.assign(size_t(n), true);
      plan.experts_note = req.experts_cpu_reason;
    } else if (req.n_cpu_moe >= 0) {
      apart = asked;
      plan.experts_note = req.n_cpu_moe == LayerRequest::kAllLayers
                              ? std::string("--cpu-moe")
                              : fmt::format("--n-cpu-moe {}", req.n_cpu_moe);
    }
  }
  const auto over = [&](const std::vector<int>& ud, int d) {
    return devices[size_t(d)].free != 0 && device_need(units, ud, apart, g, d, compute) > budget(d);
  };
  const bool all_known = std::all_of(devices.begin(), devices.end() - 1,
                                     [](const PlacementDevice& d) { return d.free != 0; });
  // Auto fit packs the GPUs from the last: each takes units in order while they fit, then the
  // one before it takes over, so that every GPU holds one run of layers. True when every unit
  // found a GPU.
  const auto pack = [&] {
    plan.unit_device.assign(size_t(n), g);
    int d = g - 1;
    for (int u : order) {
      for (; d >= 0; --d) {
        plan.unit_device[size_t(u)] = d;
        if (!over(plan.unit_device, d)) break;
        plan.unit_device[size_t(u)] = g;
      }
      if (d < 0) return false;
    }
    return true;
  };
  if (g > 0 && req.mode == Mode::Auto && req.tensor_split.empty() && all_known) {
    if (!pack() && has_experts && req.n_cpu_moe < 0 && req.experts_cpu_reason.empty()) {
      // Not everything fits: the experts go to the CPU first, then come back to the GPUs from
      // the last layer down while they fit (the first layers' stay, as with --n-cpu-moe).
      for (int u = 1; u + 1 < n; ++u) apart[size_t(u)] = units[size_t(u)].experts > 0;
      pack();
      for (int u = n - 2; u >= 1; --u) {
        if (!apart[size_t(u)] || plan.unit_device[size_t(u)] == g) continue;
        apart[size_t(u)] = false;
        if (over(plan.unit_device, plan.unit_device[size_t(u)])) {
          apart[size_t(u)] = true;
          break;
        }
      }
      if (!plan.experts_text().empty())
        plan.experts_note =
            "auto fit: the GPUs cannot hold every layer whole, and attention "
            "gains more from them than experts of which few run per token";
    }
  } else {
    int k = 0;
    if (g > 0) {
      if (req.mode == Mode::All)
        k = n;
      else if (req.mode == Mode::Count)
        k = req.count <= L_here ? std::max(req.count, 0) : n;
      else  // the most units that fit when shared in proportion
        for (k = n; k > 0; --k) {
          const std::vector<int> ud = plan_for(k);
          bool fits = true;
          for (int d = 0; d < g; ++d) fits = fits && !over(ud, d);
          if (fits) break;
        }
    }
    plan.unit_device = plan_for(k);
  }
  for (int d = 0; d <= g; ++d)
    plan.need.push_back(device_need(units, plan.unit_device, apart, g, d, compute));

  const auto free_text = [&](int d) {
    const PlacementDevice& dev = devices[size_t(d)];
    if (!dev.free) return fmt::format("{}, free memory unknown", human_bytes(plan.need[size_t(d)]));
    return fmt::format("{} of {} free{}", human_bytes(plan.need[size_t(d)]), human_bytes(dev.free),
                       dev.capped ? " by POLYSTACK_DEVICE_MEMORY" : "");
  };
  std::vector<std::string> parts;
  for (int d = 0; d <= g; ++d)
    if (plan.need[size_t(d)] > 0)
      parts.push_back(
          fmt::format("{} on {} ({})", plan.units_text(d), devices[size_t(d)].id, free_text(d)));
  plan.summary =
      plan.unit_rank.empty()
          ? fmt::format("{}: the whole model needs {}", fmt::join(parts, ", "),
                        human_bytes(plan.whole_model))
          : fmt::format("{}: rank {}'s share of the model needs {}", fmt::join(parts, ", "),
                        plan.rank, human_bytes(plan.whole_model));
  if (g > 0) plan.summary += fmt::format(" ({})", plan.mode);

  // What cannot be met.
  for (int d = 0; d < g; ++d)
    if (over(plan.unit_device, d))
      throw UsageError(fmt::format(
          "{} puts {} on {}, more than its {} free less {} of headroom ({}); lower -ngl or use "
          "-ngl auto",
          plan.mode, human_bytes(plan.need[size_t(d)]), devices[size_t(d)].id,
          human_bytes(devices[size_t(d)].free), human_bytes(plan.headroom[size_t(d)]),
          plan.units_text(d)));
  const auto gpus_text = [&] {
    std::vector<std::string> parts;
    for (int d = 0; d < g; ++d)
      parts.push_back(
          fmt::format("{} holds {} ({} of {} free less {} of headroom)", devices[size_t(d)].id,
                      plan.units_text(d), human_bytes(plan.need[size_t(d)]),
                      human_bytes(devices[size_t(d)].free), human_bytes(plan.headroom[size_t(d)])));
    return fmt::format("{}", fmt::join(parts, ", "));
  };
  if (over(plan.unit_device, g)) {
    const PlacementDevice& cpu = devices[size_t(g)];
    if (g == 0)
      throw UsageError(fmt::format(
          "the model does not fit: it needs {}, more than the {} free on {} less {} of headroom",
          human_bytes(plan.whole_model), human_bytes(cpu.free), cpu.id,
          human_bytes(plan.headroom[size_t(g)])));
    throw UsageError(fmt::format(
        "the model does not fit: it needs {}; {}; the rest ({}) needs {}, more than the {} free "
        "on {} less {} of headroom",
        human_bytes(plan.whole_model), gpus_text(), plan.units_text(g),
        human_bytes(plan.need[size_t(g)]), human_bytes(cpu.free), cpu.id,
        human_bytes(plan.headroom[size_t(g)])));
  }
  // --strict refuses what auto fit leaves on the CPU: whole units, or routed experts that
  // --cpu-moe / --n-cpu-moe did not ask for there.
  bool left_on_cpu = false;
  for (int u = 0; u < n; ++u)
    left_on_cpu |= plan.unit_device[size_t(u)] == g ||
                   (apart[size_t(u)] && !asked[size_t(u)] && units[size_t(u)].experts > 0);
  if (req.strict && req.mode == Mode::Auto && g > 0 && left_on_cpu)
    throw UsageError(fmt::format(
        "--strict: auto fit leaves {} on {}: {}; the whole model needs {} (without --strict "
        "the rest runs on the CPU)",
        plan.units_text(g), devices[size_t(g)].id, gpus_text(), human_bytes(plan.whole_model)));
  return plan;
}

uint64_t device_memory_cap(const std::string& list, const std::string& id) {
  uint64_t found = 0;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = list.find(',', at);
    const std::string item = list.substr(at, comma == std::string::npos ? comma : comma - at);
    at = comma == std::string::npos ? list.size() + 1 : comma + 1;
    if (item.empty()) continue;
    const auto bad = [&] {
      return UsageError(fmt::format(
          "POLYSTACK_DEVICE_MEMORY: '{}' is not DEVICE=SIZE (sizes in B, KiB, MiB or GiB)", item));
    };
    const size_t eq = item.rfind('=');
    if (eq == std::string::npos || eq == 0) throw bad();
    const std::string size = item.substr(eq + 1);
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(size, &used);
    } catch (const std::exception&) {
      throw bad();
    }
    const std::string unit = size.substr(used);
    double mult = 0;
    if (unit.empty() || unit == "B") mult = 1;
    if (unit == "KiB") mult = 1024;
    if (unit == "MiB") mult = double(kMiB);
    if (unit == "GiB") mult = double(uint64_t(1) << 30);
    if (mult == 0 || !(v >= 0) || v * mult > 1.8e19 || size[0] == '-' || size[0] == '+')
      throw bad();
    if (item.substr(0, eq) == id) found = std::max<uint64_t>(uint64_t(v * mult), 1);
  }
  return found;
}

}  // namespace ps
