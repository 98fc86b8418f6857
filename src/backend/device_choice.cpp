#include "backend/device_choice.h"

#include <fmt/format.h>
#include <sys/prctl.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <nlohmann/json.hpp>

#include "backend/child_process.h"
#include "core/dtype.h"
#include "core/error.h"

namespace ps {
namespace {

// The weight types a check covers when no model says (`devices`): the common file types.
std::vector<DType> default_types() {
  return {DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K};
}

}  // namespace

DeviceCheck self_check_device(Registry& registry, const DeviceInfo& d, const ChoiceOptions& opts,
                              std::vector<std::string>* notes) {
  const std::vector<DType> types = opts.weight_types.empty() ? default_types() : opts.weight_types;
  const DType timed = opts.timed_type ? *opts.timed_type : types.front();
  const std::vector<std::string> names = selfcheck_case_names(types);
  const std::string plugin = registry.plugin_file(d.api);
  const std::string key = selfcheck_cache_key(d, plugin);
  SelfCheckCache cache = SelfCheckCache::load(key);
  if (opts.recheck) cache = SelfCheckCache{cache.path, {}, {}};  // only where it goes

  DeviceCheck out;
  out.checked = true;
  const auto finish = [&](bool from_cache) {
    out.from_cache = from_cache;
    for (const std::string& n : names)
      if (const SelfCheckCase* c = cache.find(n); c && !c->passed) {
        out.failure = c->failure();
        return out;
      }
    out.passed = true;
    if (const SelfCheckTiming* t = cache.find_timing(timed_matmul_name(timed));
        t && t->device_ms > 0)
      out.speedup = t->cpu_ms / t->device_ms;
    return out;
  };
  std::vector<std::string> missing;
  for (const std::string& n : names) {
    const SelfCheckCase* c = cache.find(n);
    if (c && !c->passed) return finish(true);  // a cached failure stands
    if (!c) missing.push_back(n);
  }
  const bool need_timing = cache.find_timing(timed_matmul_name(timed)) == nullptr;
  if (missing.empty() && !need_timing) return finish(true);

  // What is missing runs now: in a child process for a plugin's device, in this process for a
  // backend built into this binary (tests add them), which has no plugin to isolate.
  SelfCheckResult r;
  if (plugin.empty()) {
    try {
      std::unique_ptr<Device> dev = registry.open(d.id, DeviceOptions{});
      std::unique_ptr<Device> cpu = registry.open("cpu", DeviceOptions{});
      r = run_selfcheck(*dev, *cpu, missing, need_timing ? &timed : nullptr);
    } catch (const std::exception& e) {
      r.error = e.what();
    }
  } else {
    std::vector<std::string> args = {"__selfcheck", plugin, d.id,
                                     need_timing ? std::string(dtype_name(timed)) : "-"};
    args.insert(args.end(), missing.begin(), missing.end());
    const double timeout = seconds_from_env("POLYSTACK_SELFCHECK_TIMEOUT", 60);
    const ChildResult c = run_children(self_executable(), {args}, timeout)[0];
    std::string stage = "while opening the device";
    std::optional<SelfCheckResult> result;
    for (const std::string& line : c.lines) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_object()) continue;
      if (j.contains("stage") && j.value("stage", "") == "case")
        stage = fmt::format("in the case {}", j.value("name", std::string("?")));
      if (j.contains("result")) result = selfcheck_result_from_json(j["result"].dump());
    }
    if (!result || !c.exited_cleanly()) {
      out.failure = fmt::format("the self-check {}",
                                c.failure(timeout, result ? "after it finished" : stage));
      return out;
    }
    r = std::move(*result);
  }
  if (!r.error.empty()) {
    // The device could not run the check (it failed to open, a kernel threw): not cached, as
    // the cause may be passing (memory taken by another program).
    out.failure = r.error;
    // "cuda:0 (NAME): cannot select the device": the caller names the device already.
    if (const std::string self = fmt::format("{} ({}): ", d.id, d.name);
        out.failure.starts_with(self))
      out.failure.erase(0, self.size());
    return out;
  }
  cache.merge(r);
  const std::string not_saved = cache.save(key);
  if (notes) {
    const auto unsupported =
        std::count_if(r.cases.begin(), r.cases.end(),
                      [](const SelfCheckCase& c) { return !c.not_supported.empty(); });
    notes->push_back(fmt::format(
        "self-check of {}: {} cases in {:.2f} s{}{}", d.id, r.cases.size(), r.seconds,
        unsupported ? fmt::format(" ({} not supported by the device: run on the CPU)", unsupported)
                    : "",
        r.device_ms > 0 ? fmt::format("; timed matmul {:.3f} ms here, {:.3f} ms on the CPU",
                                      r.device_ms, r.cpu_ms)
                        : ""));
    if (!not_saved.empty())
      notes->push_back(fmt::format("self-check results not cached: {}", not_saved));
  }
  return finish(false);
}

ChosenDevice choose_device(Registry& registry, const ChoiceOptions& opts) {
  PolicyOptions po;
  po.named_by =
      opts.spec.empty() && std::getenv("POLYSTACK_DEVICE") ? "POLYSTACK_DEVICE" : "--device";
  po.spec = parse_device_spec(device_spec_text(opts.spec));
  po.self_check = opts.self_check;
  po.strict = opts.strict;
  ChosenDevice out;
  // The CPU needs no plugin probed.
  std::vector<ProbeReport> reports;
  if (po.spec.kind == DeviceSpec::Kind::Cpu)
    reports.push_back(registry.probe(Api::Cpu));
  else if (po.spec.kind == DeviceSpec::Kind::Id || po.spec.kind == DeviceSpec::Kind::OneApi)
    reports = {registry.probe(Api::Cpu), registry.probe(po.spec.api)};
  else
    reports = registry.probe_all();
  DeviceChoice c = choose_device(reports, po, [&](const DeviceInfo& d) {
    return self_check_device(registry, d, opts, &out.notes);
  });
  static_cast<DeviceChoice&>(out) = std::move(c);
  return out;
}

std::optional<int> run_child_command(int argc, char** argv) {
  if (argc < 2) return std::nullopt;
  const std::string cmd = argv[1];
  if (cmd != "__probe" && cmd != "__selfcheck") return std::nullopt;
  // A child never outlives the parent it reports to.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  try {
    if (cmd == "__probe") {
      if (argc != 3) throw UsageError("usage: __probe PLUGIN");
      return probe_child_main(argv[2]);
    }
    return selfcheck_child_main(std::vector<std::string>(argv + 2, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "polystack: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace ps
