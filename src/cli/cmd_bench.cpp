// Prompt-processing (pp) and generation (tg) throughput, reported like llama-bench: each test
// runs on a fresh context after a warm-up, repeated -r times, mean and standard deviation.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/commands.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/quantize.h"

namespace ps::cli {
namespace {

struct Result {
  std::string device, device_name;
  std::string ngl;  // -ngl as given ("auto", "all", "8")
  std::string test;
  int threads;
  int n_tokens;
  std::vector<double> seconds;
  double mean_tps() const {
    double s = 0;
    for (double x : seconds) s += n_tokens / x;
    return s / double(seconds.size());
  }
  double stddev_tps() const {
    if (seconds.size() < 2) return 0;
    const double m = mean_tps();
    double s = 0;
    for (double x : seconds) s += (n_tokens / x - m) * (n_tokens / x - m);
    return std::sqrt(s / double(seconds.size() - 1));
  }
};

std::string size_text(uint64_t b) {
  return b >= (1ull << 30) ? fmt::format("{:.2f} GiB", double(b) / double(1ull << 30))
                           : fmt::format("{:.2f} MiB", double(b) / double(1ull << 20));
}

std::string params_text(uint64_t n) {
  return n >= 1000000000ull ? fmt::format("{:.2f} B", double(n) / 1e9)
                            : fmt::format("{:.2f} M", double(n) / 1e6);
}

// The file's mix (general.file_type) when it names a known one, else the type that holds most
// of the weight bytes.
std::string main_type(const gguf::File& f) {
  if (const gguf::Value* v = f.find("general.file_type"); v && v->is_integer())
    if (v->type != gguf::ValueType::U64 || v->u <= UINT32_MAX)
      if (auto name = file_type_name(uint32_t(v->as_int()))) return *name;
  std::map<DType, uint64_t> bytes;
  for (const auto& t : f.tensors()) bytes[t.type] += t.nbytes;
  DType best = DType::F32;
  uint64_t most = 0;
  for (auto [t, b] : bytes)
    if (b > most) most = b, best = t;
  return std::string(dtype_name(best));
}

}  // namespace

Action add_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Measure prompt processing and generation speed");
  struct Opts {
    ModelFlags mf;
    std::vector<int> pp{512}, tg{128}, threads;
    std::vector<std::string> devices, ngl;
    int reps = 3;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  add_model_flags(cmd, o->mf, false);
  cmd->remove_option(cmd->get_option("--threads"));
  cmd->remove_option(cmd->get_option("--device"));
  cmd->remove_option(cmd->get_option("--n-gpu-layers"));
  cmd->add_option("--n-gpu-layers", o->ngl,
                  "Layers on the GPU to test (comma-separated: auto, all or counts, like "
                  "0,8,all; default auto); the device column shows each split")
      ->delimiter(',')
      ->check([](const std::string& v) {
        parse_gpu_layers(v);
        return std::string();
      });
  cmd->add_option("--device", o->devices,
                  "Devices to test (comma-separated specs, e.g. cpu,vulkan:0; default: the one "
                  "the policy chooses); each row's speed is also given as a ratio to the first row "
                  "of its test")
      ->delimiter(',');
  cmd->add_option("-p,--n-prompt", o->pp, "Prompt lengths to test (comma-separated; 0: skip)")
      ->delimiter(',')
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-n,--n-gen", o->tg, "Generation lengths to test (comma-separated; 0: skip)")
      ->delimiter(',')
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-t,--threads", o->threads,
                  "Thread counts to test (comma-separated; 0: the physical cores, as run; "
                  "default 0)")
      ->delimiter(',')
      ->check(CLI::Range(0, 1024));
  cmd->add_option("-r,--repetitions", o->reps, "Repetitions of each test")
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--json", o->json, "Machine-readable output");

  return [o] {
    std::vector<std::string> devices = o->devices;
    if (devices.empty()) devices.push_back(o->mf.context.device);
    std::vector<std::string> ngls = o->ngl;
    if (ngls.empty()) ngls.push_back("auto");
    for (const std::string& d : devices) {
      ModelFlags one = o->mf;
      one.context.device = d;
      check_device_flag(one);
    }
    const ModelChoice choice = resolve_model_path(o->mf);
    if (choice.origin != "-m") fmt::print(stderr, "polystack: model: {}\n", choice.origin);
    auto model = LoadedModel::load(choice.path, /*with_tokenizer=*/false);
    const ModelParams& p = model->model->params();
    std::vector<int> threads = o->threads;
    if (threads.empty()) threads.push_back(0);
    std::vector<Result> results;
    int max_needed = 1;
    for (int n : o->pp) max_needed = std::max(max_needed, n + 1);
    for (int n : o->tg) max_needed = std::max(max_needed, n + 1);

    for (const std::string& spec : devices)
      for (const std::string& ngl : ngls)
        for (int t : threads) {
          // The same token ids on every device and thread count.
          std::mt19937 rng(1234);
          std::uniform_int_distribution<int32_t> tok(0, int32_t(p.n_vocab - 1));
          ContextOptions so = o->mf.context;
          so.device = spec;
          so.n_threads = t;
          so.n_gpu_layers = parse_gpu_layers(ngl);
          if (so.n_ctx == 0) so.n_ctx = max_needed;
          if (so.n_ctx < max_needed)
            throw UsageError(fmt::format("context {} is smaller than the longest test ({} tokens)",
                                         so.n_ctx, max_needed - 1));
          int batch = 1;
          for (int n : o->pp) batch = std::max(batch, n);
          so.n_batch = batch;
          ModelContext s(model, so);
          print_device_choice(s);
          // The device, or the devices of a split ("vulkan:0+cpu").
          std::string device_id;
          for (size_t d = 0; d < s.plan().devices.size(); ++d)
            if (s.plan().need[d] > 0)
              device_id += (device_id.empty() ? "" : "+") + s.plan().devices[d].id;
          const std::string device_name = s.device().info().name;
          // The CPU's threads when it runs any layer (beside a GPU too), else the device's.
          int used_threads = s.device().threads();
          if (s.plan().need.back() > 0) used_threads = s.devices().back()->threads();
          {  // warm-up: page in the weights, grow the arenas
            std::vector<int32_t> w(static_cast<size_t>(std::min(batch, 16)));
            for (auto& x : w) x = tok(rng);
            s.eval(w);
            s.eval(std::span<const int32_t>(w.data(), 1));
            s.reset();
          }
          for (int n : o->pp) {
            if (n == 0) continue;
            Result r{device_id, device_name, ngl, fmt::format("pp{}", n), used_threads, n, {}};
            for (int rep = 0; rep < o->reps; ++rep) {
              std::vector<int32_t> ids(static_cast<size_t>(n));
              for (auto& x : ids) x = tok(rng);
              s.reset();
              const auto t0 = std::chrono::steady_clock::now();
              s.eval(ids);
              r.seconds.push_back(
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            }
            results.push_back(r);
          }
          for (int n : o->tg) {
            if (n == 0) continue;
            Result r{device_id, device_name, ngl, fmt::format("tg{}", n), used_threads, n, {}};
            for (int rep = 0; rep < o->reps; ++rep) {
              s.reset();
              int32_t id = tok(rng);
              const auto t0 = std::chrono::steady_clock::now();
              for (int i = 0; i < n; ++i) {
                const int32_t one[1] = {id};
                s.eval(one);
                id = tok(rng);
              }
              r.seconds.push_back(
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            }
            results.push_back(r);
          }
        }
    // Each row against the first row of the same test (pp512 against pp512): the first
    // device, -ngl and thread count, whose ratio is 1.00.
    const std::string first = results.empty() ? std::string() : results.front().device;
    const std::string first_ngl = results.empty() ? std::string() : results.front().ngl;
    const int first_threads = results.empty() ? 0 : results.front().threads;
    const auto ratio = [&](const Result& r) {
      for (const Result& b : results)
        if (b.test == r.test) return b.mean_tps() > 0 ? r.mean_tps() / b.mean_tps() : 0.0;
      return 0.0;
    };

    const std::string mname =
        fmt::format("{} {} {}", p.architecture, params_text(p.n_params), main_type(*model->file));
    if (o->json) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& r : results)
        out.push_back({{"model", mname},
                       {"model_file", choice.path},
                       {"model_bytes", p.weight_bytes},
                       {"n_params", p.n_params},
                       {"device", r.device},
                       {"device_name", r.device_name},
                       {"n_gpu_layers", r.ngl},
                       {"threads", r.threads},
                       {"test", r.test},
                       {"n_tokens", r.n_tokens},
                       {"repetitions", r.seconds.size()},
                       {"seconds", r.seconds},
                       {"avg_ts", r.mean_tps()},
                       {"stddev_ts", r.stddev_tps()},
                       {"ratio", ratio(r)},
                       {"ratio_to", first},
                       {"ratio_to_n_gpu_layers", first_ngl},
                       {"ratio_to_threads", first_threads}});
      fmt::print("{}\n", out.dump(2));
      return 0;
    }
    std::string vs = fmt::format("vs {}", first);
    if (ngls.size() > 1) vs += " ngl " + first_ngl;
    if (threads.size() > 1) vs += fmt::format(" t{}", first_threads);
    const int w = std::max<int>(9, int(vs.size()));
    fmt::print("| {:<28} | {:>10} | {:>9} | {:<12} | {:>4} | {:>7} | {:>7} | {:>20} | {:>{}} |\n",
               "model", "size", "params", "device", "ngl", "threads", "test", "t/s", vs, w);
    fmt::print(
        "| {:-<28} | {:->10} | {:->9} | {:-<12} | {:->4} | {:->7} | {:->7} | {:->20} | {:->{}} |\n",
        "", "", "", "", "", "", "", "", "", w);
    for (const auto& r : results)
      fmt::print("| {:<28} | {:>10} | {:>9} | {:<12} | {:>4} | {:>7} | {:>7} | {:>20} | {:>{}} |\n",
                 mname, size_text(p.weight_bytes), params_text(p.n_params), r.device, r.ngl,
                 r.threads, r.test, fmt::format("{:.2f} ± {:.2f}", r.mean_tps(), r.stddev_tps()),
                 fmt::format("{:.2f}x", ratio(r)), w);
    return 0;
  };
}

}  // namespace ps::cli
