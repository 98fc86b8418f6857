// `polystack doctor`: every API's stack checked bottom-up, the first failure with its evidence and
// fix, then what `run` would use. The file-level checks are doctor/doctor.cpp's; the API probes,
// self-checks and memory checks are added here on the real system (not under a sysroot).
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "backend/device_choice.h"
#include "backend/physical_device.h"
#include "cli/commands.h"
#include "cluster/cluster.h"
#include "core/error.h"
#include "doctor/doctor.h"
#include "gguf/gguf.h"
#include "model/model.h"

#ifndef POLYSTACK_DOCTOR_HIP_TARGETS
#define POLYSTACK_DOCTOR_HIP_TARGETS "gfx900,gfx906,gfx908,gfx90a,gfx1030"
#endif
#ifndef POLYSTACK_DOCTOR_CUDA_DRIVER
#define POLYSTACK_DOCTOR_CUDA_DRIVER 580
#endif

namespace ps::cli {
namespace {

using doctor::Check;
using doctor::Status;

const char* const kApis[] = {"cuda", "hip", "vulkan", "opencl", "cpu"};

std::string gib(uint64_t b) {
  return b >= (1ull << 30) ? fmt::format("{:.2f} GiB", double(b) / double(1ull << 30))
                           : fmt::format("{:.1f} MiB", double(b) / double(1ull << 20));
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t next = s.find(sep, at);
    const std::string item =
        s.substr(at, next == std::string::npos ? std::string::npos : next - at);
    if (!item.empty()) out.push_back(item);
    if (next == std::string::npos) break;
    at = next + 1;
  }
  return out;
}

// What -m's model costs per unit, and the plans made for it: one per device, by id.
struct ModelCost {
  std::vector<UnitCost> units;
  uint64_t compute = 0;
  std::vector<std::pair<std::string, PlacementPlan>> plans;
};

// Where -ngl auto would put the model with `gpu` (nullptr: the CPU alone) beside the CPU: a
// memory check ("vulkan.memory") whose summary is the plan's line.
Check placement_check(const std::string& api_text, const DeviceInfo* gpu, const DeviceInfo& cpu,
                      ModelCost& mc) {
  Check m{api_text + ".memory", api_text, "memory", Status::Ok, "", {}, ""};
  std::vector<PlacementDevice> devs;
  if (gpu) devs.push_back(placement_device(*gpu));
  devs.push_back(placement_device(cpu));
  for (const PlacementDevice& d : devs)
    m.evidence.push_back(fmt::format("{}: {} free{}", d.id, d.free ? gib(d.free) : "unknown",
                                     d.capped ? " (POLYSTACK_DEVICE_MEMORY)" : ""));
  try {
    PlacementPlan plan = plan_placement(mc.units, mc.compute, devs, LayerRequest{});
    m.summary = plan.summary;
    if (gpu && !plan.single_device()) {
      m.status = Status::Warn;
      m.fix =
          "a smaller quantization (polystack quantize ... Q4_K_M) or a shorter context (-c) "
          "puts more of it on the GPU";
    } else if (gpu && !plan.experts_text().empty()) {
      m.status = Status::Warn;
      m.fix =
          "every layer is on the GPU but some routed experts run on the CPU (few run per "
          "token); a smaller quantization or a shorter context (-c) brings more of them over";
    }
    if (gpu && devs[0].free == 0) m.status = Status::Warn;
    mc.plans.emplace_back(gpu ? gpu->id : cpu.id, std::move(plan));
  } catch (const UsageError& e) {
    m.status = Status::Fail;
    m.summary = e.what();
    m.fix = "a smaller quantization (polystack quantize ... Q4_K_M) or a shorter context (-c)";
  }
  return m;
}

// The API layer, the self-check and the memory check of one GPU API on the real system.
void device_checks(std::vector<Check>& checks, const std::string& api_text, const ProbeReport& r,
                   const std::vector<doctor::PciGpu>& gpus, ModelCost* model,
                   const DeviceInfo& cpu) {
  const std::string id = api_text + ".api";
  if (doctor::skip_after_failure(checks, api_text, id, "API")) {
    doctor::skip_after_failure(checks, api_text, api_text + ".self-check", "self-check");
    return;
  }
  Check c{id, api_text, "API", Status::Ok, "", {}, ""};
  const bool vendor_gpu = std::any_of(gpus.begin(), gpus.end(), [&](const doctor::PciGpu& g) {
    return api_text == "vulkan" || (api_text == "cuda" && g.vendor == 0x10de) ||
           (api_text == "hip" && g.vendor == 0x1002);
  });
  c.evidence.push_back(fmt::format("probe: built {}, {} device(s), reason '{}'",
                                   r.built ? "yes" : "no", r.devices.size(), r.reason));
  if (r.devices.empty()) {
    c.status = r.failed || (vendor_gpu && r.built) ? Status::Fail : Status::Info;
    c.summary = fmt::format("no device: {}", r.reason);
    if (!r.built && vendor_gpu) c.status = Status::Warn;
    checks.push_back(c);
    return;
  }
  std::vector<std::string> names;
  for (const DeviceInfo& d : r.devices) names.push_back(fmt::format("{} ({})", d.id, d.name));
  c.summary = fmt::format("{} device(s): {}", r.devices.size(), fmt::join(names, ", "));
  for (const DeviceInfo& d : r.devices)
    if (!d.unusable.empty()) {
      c.status = Status::Fail;
      c.summary = fmt::format("{} cannot run models: {}", d.id, d.unusable);
    }
  checks.push_back(c);
  Registry& reg = Registry::global();
  for (const DeviceInfo& d : r.devices) {
    if (!d.unusable.empty()) continue;
    Check s{api_text + ".self-check", api_text, "self-check", Status::Ok, "", {}, ""};
    if (d.kind == DeviceKind::Cpu) {
      s.status = Status::Info;
      s.summary = fmt::format("{} is a CPU driver: not checked, never chosen by default", d.id);
    } else {
      ChoiceOptions co;
      std::vector<std::string> notes;
      const DeviceCheck k = self_check_device(reg, d, co, &notes);
      s.evidence = notes;
      if (k.passed) {
        s.summary = fmt::format(
            "{} passed{}{}", d.id, k.from_cache ? " (cached)" : "",
            k.speedup > 0 ? fmt::format(", {:.2g}x the CPU on the timed matmul", k.speedup) : "");
      } else {
        s.status = Status::Fail;
        s.summary = fmt::format("{} failed: {}", d.id, k.failure);
        s.fix = fmt::format(
            "polystack devices --recheck (after a driver update); meanwhile "
            "the default policy passes {} over",
            d.id);
      }
    }
    checks.push_back(s);
    if (model) checks.push_back(placement_check(api_text, &d, cpu, *model));
  }
}

// The MPI job this runs in (--mpi; main started MPI): the transport, and with a model the plan
// of its units over the ranks, made as `run --mpi` makes it.
void mpi_checks(std::vector<Check>& checks, const std::string& model_path) {
  const cluster::Cluster* job = cluster::current();
  Check m{"mpi.module", "mpi", "transport", Status::Ok, "", {}, ""};
  if (!job) {
    m.status = Status::Fail;
    m.summary = cluster::mpi_module_problem();
  } else {
    m.summary = fmt::format("{}: {} rank(s), this is rank {} on {}", job->library(), job->size(),
                            job->rank(), job->host());
  }
  checks.push_back(m);
  Check r{"mpi.ranks", "mpi", "ranks", Status::Ok, "", {}, ""};
  if (model_path.empty()) {
    r.status = Status::Skip;
    r.summary = "-m MODEL: the model whose layers the ranks would hold";
  } else if (job) {
    try {
      ContextOptions co;
      co.mpi = true;
      ModelContext ctx(LoadedModel::load(model_path, /*with_tokenizer=*/false), co);
      const PlacementPlan& p = ctx.plan();
      if (p.ranks.empty()) {
        r.status = Status::Warn;
        r.summary = "a job of one rank: the whole model runs in it";
        r.fix = "mpirun -np N polystack doctor -m MODEL --mpi (N ranks, one or more per host)";
      } else {
        std::vector<std::string> parts;
        for (size_t k = 0; k < p.ranks.size(); ++k) {
          const PlacementRank& pr = p.ranks[k];
          parts.push_back(fmt::format("rank {} on {}: {}", k, pr.host, p.rank_units_text(int(k))));
          r.evidence.push_back(p.rank_text(int(k)));
          r.evidence.push_back(fmt::format("rank {}'s plan: {}", k, pr.summary));
        }
        r.summary = fmt::format("{} ranks: {}", p.ranks.size(), fmt::join(parts, "; "));
      }
    } catch (const std::exception& e) {
      r.status = Status::Fail;
      r.summary = e.what();
    }
  } else {
    r.status = Status::Skip;
    r.summary = "no MPI transport";
  }
  checks.push_back(r);
}

}  // namespace

Action add_doctor(CLI::App& app) {
  auto* cmd = app.add_subcommand("doctor", "Why a GPU is or is not used: every layer checked");
  struct Opts {
    std::string model;
    std::vector<std::string> apis;
    bool json = false, verbose = false, mpi = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-m,--model", o->model,
                  "Also check where this model's layers would run on each device (-ngl auto)");
  cmd->add_option("--api", o->apis, "Check only these APIs (cuda, hip, vulkan, opencl, cpu)")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(kApis), std::end(kApis))));
  cmd->add_flag("--json", o->json, "Machine-readable output");
  cmd->add_flag("-v,--verbose", o->verbose, "Show the evidence of every check");
  cmd->add_flag("--mpi", o->mpi,
                "Also check the MPI job this runs in (mpirun -np N polystack doctor -m MODEL "
                "--mpi): which rank would hold which of the model's layers");
  return [o] {
    const doctor::Sysroot root = doctor::Sysroot::from_env();
    doctor::Options opts;
    opts.apis = o->apis;
    opts.hip_targets = split(POLYSTACK_DOCTOR_HIP_TARGETS, ',');
    opts.cuda_driver_needed = POLYSTACK_DOCTOR_CUDA_DRIVER;
    const auto wanted = [&](const std::string& api) {
      return o->apis.empty() || std::find(o->apis.begin(), o->apis.end(), api) != o->apis.end();
    };
    std::optional<ModelCost> model;
    std::unique_ptr<Device> cpu_device;
    if (!o->model.empty()) {
      auto m = LoadedModel::load(o->model, /*with_tokenizer=*/false);
      const ModelParams& p = m->model->params();
      // The context and batch run uses by default.
      const ContextShape shape = resolve_shape(p, ContextOptions{});
      cpu_device = Registry::global().open("cpu", DeviceOptions{});
      model.emplace();
      model->units = model_unit_costs(*m, shape, *cpu_device, model->compute);
    }
    std::vector<Check> checks = doctor::file_checks(root, opts);
    const std::vector<doctor::PciGpu> gpus = doctor::find_gpus(root);
    const bool gpu_present = !gpus.empty() || root.exists("/dev/dxg");
    std::string verdict_device, verdict_reason;
    bool gpu_usable = false;
    if (root.real()) {
      Registry& reg = Registry::global();
      const auto& reports = reg.probe_all();
      for (const ProbeReport& r : reports) {
        const std::string api(api_name(r.api));
        if (r.api == Api::Cpu || r.api == Api::Metal || r.api == Api::DirectML || !wanted(api))
          continue;
        if (r.api == Api::OpenCL && !r.built)
          continue;  // no plugin: the file checks say what is there
        device_checks(checks, api, r, gpus, model ? &*model : nullptr,
                      cpu_device ? cpu_device->info() : reg.probe(Api::Cpu).devices.at(0));
        for (const DeviceInfo& d : r.devices)
          if (d.unusable.empty() && d.kind != DeviceKind::Cpu) gpu_usable = true;
      }
      if (wanted("cpu")) {
        const ProbeReport& cpu = reg.probe(Api::Cpu);
        for (const DeviceInfo& d : cpu.devices) {
          Check c{"cpu.device", "cpu", "hardware", Status::Ok, d.name, {}, ""};
          for (const auto& [k, v] : d.facts) c.evidence.push_back(fmt::format("{} = {}", k, v));
          checks.push_back(c);
          if (model) checks.push_back(placement_check("cpu", nullptr, d, *model));
        }
      }
      ChoiceOptions co;
      co.spec = "auto";
      const ChosenDevice choice = choose_device(reg, co);
      verdict_device = choice.device_id;
      verdict_reason = choice.reason;
    } else {
      for (const char* api : {"cuda", "hip", "vulkan"})
        if (wanted(api) &&
            !doctor::skip_after_failure(checks, api, std::string(api) + ".api", "API"))
          checks.push_back({std::string(api) + ".api",
                            api,
                            "API",
                            Status::Skip,
                            "(sysroot: the API is not probed)",
                            {},
                            ""});
      // Usable as far as files tell: a chain that reached its end without a failure.
      for (const char* api : {"cuda", "hip", "vulkan"}) {
        bool fail = false, ok = false;
        for (const Check& c : checks) {
          if (c.api != api) continue;
          fail |= c.status == Status::Fail;
          ok |= (c.status == Status::Ok || c.status == Status::Warn) &&
                (c.layer == "hardware" || c.id == "vulkan.drivers");
        }
        if (ok && !fail && (std::string(api) != "vulkan" || gpu_present)) gpu_usable = true;
      }
      verdict_device = "";
      verdict_reason = "not probed under a sysroot";
    }
    if (o->mpi) mpi_checks(checks, o->model);
    // Grouped by API in one order, each API's checks bottom-up as they were added.
    const auto api_order = [](const std::string& a) {
      if (a == "system") return -1;
      return int(std::find(std::begin(kApis), std::end(kApis), a) - std::begin(kApis));
    };
    std::stable_sort(checks.begin(), checks.end(), [&](const Check& a, const Check& b) {
      return api_order(a.api) < api_order(b.api);
    });
    const Check* first_fail = nullptr;
    int fails = 0, warns = 0;
    for (const Check& c : checks) {
      if (c.status == Status::Fail && !first_fail) first_fail = &c;
      fails += c.status == Status::Fail;
      warns += c.status == Status::Warn;
    }
    const int rc = gpu_present && !gpu_usable ? 1 : 0;
    if (o->json) {
      nlohmann::json out = {{"checks", nlohmann::json::array()}};
      for (const Check& c : checks)
        out["checks"].push_back({{"id", c.id},
                                 {"api", c.api},
                                 {"layer", c.layer},
                                 {"status", doctor::status_name(c.status)},
                                 {"summary", c.summary},
                                 {"evidence", c.evidence},
                                 {"fix", c.fix}});
      if (model) {
        out["placement"] = nlohmann::json::object();
        for (const auto& [id, plan] : model->plans) out["placement"][id] = plan.to_json();
      }
      out["verdict"] = {{"device", verdict_device},
                        {"reason", verdict_reason},
                        {"gpu_present", gpu_present},
                        {"gpu_usable", gpu_usable},
                        {"first_failure", first_fail ? first_fail->id : ""},
                        {"sysroot", root.root()}};
      fmt::print("{}\n", out.dump(2));
      return rc;
    }
    if (!root.real()) fmt::print("(reading the machine under the sysroot {})\n", root.root());
    std::string api;
    for (const Check& c : checks) {
      if (c.api != api) fmt::print("{}\n", api = c.api);
      std::string tag = doctor::status_name(c.status);
      if (c.status == Status::Fail) tag = "FAIL";
      fmt::print("  [{}]{:<{}} {}: {}\n", tag, "", 5 - int(tag.size()), c.layer, c.summary);
      const bool detail = o->verbose || c.status == Status::Fail || c.status == Status::Warn;
      if (detail)
        for (const std::string& e : c.evidence) fmt::print("          {}\n", e);
      if (!c.fix.empty() && (detail || c.status == Status::Info))
        fmt::print("          fix: {}\n", c.fix);
    }
    fmt::print("\nsummary: {} failure(s), {} warning(s){}\n", fails, warns,
               first_fail ? fmt::format("; the first: {} {}: {}", first_fail->api,
                                        first_fail->layer, first_fail->summary)
                          : "");
    if (!gpu_present)
      fmt::print("no GPU on this machine\n");
    else if (!gpu_usable)
      fmt::print("a GPU is present, but no API can use it\n");
    if (root.real())
      fmt::print("run would use: {} ({})\n", verdict_device, verdict_reason);
    else
      fmt::print("run would use: {}\n", verdict_reason);
    return rc;
  };
}

}  // namespace ps::cli
