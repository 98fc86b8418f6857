#include "backend/selfcheck.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/cache_dir.h"
#include "backend/child_process.h"
#include "backend/physical_device.h"
#include "backend/registry.h"
#include "backends/builtin.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/version.h"

namespace ps {

namespace {

// Model-like sizes: a hidden size of 2048 (a multiple of every block), 515 weight rows (no
// multiple of any tile), a prompt batch of 67 (a partial tile after a full one), head size 128
// with 8 query heads over 2 KV heads.
constexpr int64_t kK = 2048, kRows = 515, kPrompt = 67, kHead = 128, kHeads = 8, kKvHeads = 2;
// The timed matmul: rows of 4096 and 64 MiB of weights whatever their type, more than a CPU's
// last-level cache, so that both sides are timed at memory speed as in decoding.
constexpr int64_t kTimedK = 4096;
constexpr size_t kTimedBytes = size_t(64) << 20;
int64_t timed_rows(DType t) { return int64_t(kTimedBytes / row_bytes(t, kTimedK)); }

const char* const kFixedCases[] = {"attention decode",
                                   "attention prompt",
                                   "attention sliding window",
                                   "rms_norm",
                                   "rope normal",
                                   "rope neox",
                                   "softmax",
                                   "copy into an F16 cache",
                                   "add",
                                   "mul",
                                   "silu",
                                   "gelu",
                                   "swiglu",
                                   "scale"};

std::unique_ptr<OpCase> build_case(const std::string& name, std::mt19937& rng) {
  auto c = std::make_unique<OpCase>();
  c->name = name;
  OpCase& k = *c;
  std::istringstream words(name);
  std::string op, arg, shape;
  words >> op >> arg >> shape;
  const float attn_scale = 1.0f / std::sqrt(float(kHead));
  if (op == "matmul" || op == "get_rows") {
    const std::optional<DType> t = dtype_from_name(arg);
    if (!t) throw UsageError(fmt::format("self-check case '{}': unknown weight type", name));
    if (op == "get_rows") {
      Tensor* table = k.random_leaf("table", *t, {kK, 300, 1, 1}, rng);
      Tensor* ids = k.int_leaf("ids", {299, 0, 17, 150, 299, 3, 88, 0, 241});
      k.out = k.graph.get_rows(table, ids);
      return c;
    }
    const int64_t m = shape == "decode" ? 1 : shape == "prompt" ? kPrompt : 0;
    if (m == 0) throw UsageError(fmt::format("self-check case '{}': unknown shape", name));
    Tensor* w = k.random_leaf("w", *t, {kK, kRows, 1, 1}, rng);
    Tensor* x = k.random_leaf("x", DType::F32, {kK, m, 1, 1}, rng);
    k.out = k.graph.matmul(w, x);
    k.tolerance = OpCase::matmul_tolerance(*t);
    return c;
  }
  if (op == "attention") {
    // decode: one query after 513 positions; prompt: 13 queries after 40; a sliding window of
    // 32 over a ring cache of window + batch - 1 slots.
    const bool decode = arg == "decode", window = arg == "sliding";
    const int64_t T = decode ? 1 : 13, slots = decode ? 640 : window ? 32 + 13 - 1 : 128;
    const int32_t n_past = decode ? 513 : window ? 200 : 40;
    Tensor* q = k.random_leaf("q", DType::F32, {kHead, kHeads, T, 1}, rng);
    Tensor* kc = k.random_leaf("k", DType::F16, {kHead, kKvHeads, slots, 1}, rng);
    Tensor* vc = k.random_leaf("v", DType::F16, {kHead, kKvHeads, slots, 1}, rng);
    k.out = k.graph.attention(q, kc, vc, n_past, attn_scale, window ? 32 : 0);
    k.tolerance = 1e-4;
    return c;
  }
  if (op == "rope") {
    Tensor* x = k.random_leaf("x", DType::F32, {kHead, kHeads, 13, 1}, rng);
    std::vector<int32_t> pos;
    // Positions of a long prompt, but not so far that float angles (as GPUs compute them)
    // lose the 1e-4 the conformance suite allows against the CPU's double ones.
    for (int i = 0; i < 13; ++i) pos.push_back(500 + 7 * i);
    k.out = k.graph.rope(x, k.int_leaf("pos", pos), int(kHead), 10000.0f, 1.0f,
                         arg == "neox" ? RopeMode::NeoX : RopeMode::Normal);
    k.tolerance = 1e-4;
    return c;
  }
  const std::array<int64_t, 4> act{kK, 13, 1, 1};
  if (name == "rms_norm") {
    k.out = k.graph.rms_norm(k.random_leaf("a", DType::F32, act, rng), 1e-6f);
  } else if (name == "softmax") {
    k.out = k.graph.softmax(k.random_leaf("a", DType::F32, {640, 13, 1, 1}, rng), attn_scale, 600);
  } else if (name == "copy into an F16 cache") {
    Tensor* src = k.random_leaf("src", DType::F32, {kHead, kKvHeads, 13, 1}, rng);
    Tensor* cache = k.random_leaf("cache", DType::F16, {kHead, kKvHeads, 64, 1}, rng);
    const size_t e = 2, row = size_t(kHead * kKvHeads) * e;
    Tensor* view =
        k.graph.view(cache, {kHead, kKvHeads, 13, 1}, {e, kHead * e, row, 64 * row}, 40 * row);
    k.graph.copy(src, view);
    k.out =
        k.graph.view(cache, {kHead * kKvHeads * 64, 1, 1, 1}, {e, 64 * row, 64 * row, 64 * row}, 0);
    k.out_type = DType::F16;
    k.tolerance = 1e-3;
  } else if (name == "add" || name == "mul" || name == "swiglu") {
    Tensor* a = k.random_leaf("a", DType::F32, act, rng);
    // add and mul broadcast one row (a norm weight, a bias) as models do.
    Tensor* b = k.random_leaf("b", DType::F32,
                              name == "swiglu" ? act : std::array<int64_t, 4>{kK, 1, 1, 1}, rng);
    k.out = name == "add"   ? k.graph.add(a, b)
            : name == "mul" ? k.graph.mul(a, b)
                            : k.graph.swiglu(a, b);
  } else if (name == "silu" || name == "gelu" || name == "scale") {
    Tensor* a = k.random_leaf("a", DType::F32, act, rng);
    k.out = name == "silu"   ? k.graph.silu(a)
            : name == "gelu" ? k.graph.gelu(a)
                             : k.graph.scale(a, 0.125f);
  } else {
    throw UsageError(fmt::format("unknown self-check case '{}'", name));
  }
  return c;
}

// A decode-shaped matmul for timing: timed_rows(t) rows of kTimedK, 16 random rows repeated
// (the values do not matter to the time; quantizing tens of millions of them would).
std::unique_ptr<OpCase> build_timed_case(DType t, std::mt19937& rng) {
  auto c = std::make_unique<OpCase>();
  c->name = timed_matmul_name(t);
  std::normal_distribution<float> d;
  std::vector<float> f(size_t(kTimedK * 16));
  for (float& x : f) x = d(rng);
  const size_t rb = row_bytes(t, kTimedK);
  const int64_t rows = timed_rows(t);
  std::vector<uint8_t>& bytes = c->leaf_bytes.emplace_back(rb * size_t(rows));
  for (int64_t r = 0; r < 16; ++r)
    quantize_row(t, f.data() + r * kTimedK, bytes.data() + size_t(r) * rb, kTimedK);
  for (int64_t r = 16; r < rows; ++r)
    std::memcpy(bytes.data() + size_t(r) * rb, bytes.data() + size_t(r % 16) * rb, rb);
  Tensor* w = c->graph.leaf("w", t, {kTimedK, rows, 1, 1}, bytes.data());
  Tensor* x = c->random_leaf("x", DType::F32, {kTimedK, 1, 1, 1}, rng);
  c->out = c->graph.matmul(w, x);
  return c;
}

// The median of up to 7 runs after a warm-up, fewer where the runs are slow: once a second has
// been timed the answer (a device hundreds of times slower than the CPU) is clear, and a slow
// kernel on a CPU driver would otherwise hold the check for tens of seconds.
double time_ms(Device& dev, OpCase& c) {
  PreparedCase p(dev, c);
  p.run();  // warm-up: pipelines, caches, clocks
  std::vector<double> ms;
  double total = 0;
  while (ms.size() < 7 && total < 1000) {
    const auto t0 = std::chrono::steady_clock::now();
    p.run();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    total += ms.back();
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

nlohmann::json cases_to_json(const std::vector<SelfCheckCase>& cases) {
  nlohmann::json out = nlohmann::json::array();
  for (const SelfCheckCase& c : cases)
    out.push_back({{"name", c.name},
                   {"passed", c.passed},
                   {"error", c.error},
                   {"tolerance", c.tolerance},
                   {"not_supported", c.not_supported}});
  return out;
}

// nlohmann::json::exception when j is not what cases_to_json writes.
std::vector<SelfCheckCase> cases_from_json(const nlohmann::json& j) {
  std::vector<SelfCheckCase> out;
  for (const auto& e : j)
    out.push_back({e.at("name").get<std::string>(), e.at("passed").get<bool>(),
                   e.at("error").get<double>(), e.at("tolerance").get<double>(),
                   e.value("not_supported", std::string())});
  return out;
}

}  // namespace

std::string selfcheck_result_to_json(const SelfCheckResult& r) {
  return nlohmann::json{{"cases", cases_to_json(r.cases)},
                        {"timed", r.timed},
                        {"device_ms", r.device_ms},
                        {"cpu_ms", r.cpu_ms},
                        {"error", r.error},
                        {"seconds", r.seconds}}
      .dump();
}

std::optional<SelfCheckResult> selfcheck_result_from_json(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  try {
    SelfCheckResult r;
    r.cases = cases_from_json(j.at("cases"));
    r.timed = j.at("timed").get<std::string>();
    r.device_ms = j.at("device_ms").get<double>();
    r.cpu_ms = j.at("cpu_ms").get<double>();
    r.error = j.at("error").get<std::string>();
    r.seconds = j.at("seconds").get<double>();
    return r;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

bool SelfCheckResult::passed() const {
  return error.empty() &&
         std::all_of(cases.begin(), cases.end(), [](const SelfCheckCase& c) { return c.passed; });
}

std::string SelfCheckCase::failure() const {
  // Errors are kept finite for JSON: a NaN or inf is stored as 1e30.
  if (error >= 1e30) return fmt::format("computed {} with NaN or inf", name);
  return fmt::format("computed {} {:.1e} away from the CPU (tolerance {:.0e})", name, error,
                     tolerance);
}

std::string SelfCheckResult::failure() const {
  if (!error.empty()) return error;
  for (const SelfCheckCase& c : cases)
    if (!c.passed) return c.failure();
  return "";
}

std::vector<std::string> selfcheck_case_names(const std::vector<DType>& weight_types) {
  std::vector<std::string> names;
  for (DType t : weight_types) {
    const std::string n(dtype_name(t));
    for (const char* what : {"matmul {} decode", "matmul {} prompt", "get_rows {}"}) {
      std::string name = fmt::format(fmt::runtime(what), n);
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  for (const char* f : kFixedCases) names.emplace_back(f);
  return names;
}

std::string timed_matmul_name(DType t) {
  return fmt::format("matmul {} {}x{} decode", dtype_name(t), kTimedK, timed_rows(t));
}

SelfCheckResult run_selfcheck(Device& dev, Device& cpu, const std::vector<std::string>& names,
                              const DType* timed, void (*progress)(const std::string&)) {
  const auto t0 = std::chrono::steady_clock::now();
  SelfCheckResult r;
  std::mt19937 rng(20261201);
  for (const std::string& name : names) {
    if (progress) progress(name);
    std::unique_ptr<OpCase> c = build_case(name, rng);
    SelfCheckCase out;
    out.name = name;
    out.tolerance = c->tolerance;
    std::string why;
    for (Tensor* n : c->graph.nodes())
      if (why.empty()) why = dev.unsupported_reason(*n);
    if (!why.empty()) {
      out.passed = true;
      out.not_supported = why;
      r.cases.push_back(out);
      continue;
    }
    try {
      const std::vector<float> want = run_case(cpu, *c);
      const std::vector<float> got = run_case(dev, *c);
      out.error = std::min(relative_error(want, got), 1e30);  // JSON has no inf
      out.passed = mismatches(*c, want, got).empty();
    } catch (const std::exception& e) {
      r.error = fmt::format("failed to run {}: {}", name, e.what());
      break;
    }
    r.cases.push_back(out);
  }
  if (timed && r.error.empty()) {
    if (progress) progress(timed_matmul_name(*timed));
    std::unique_ptr<OpCase> c = build_timed_case(*timed, rng);
    try {
      r.timed = c->name;
      r.device_ms = time_ms(dev, *c);
      r.cpu_ms = time_ms(cpu, *c);
    } catch (const std::exception& e) {
      r.error = fmt::format("failed to run the timed {}: {}", c->name, e.what());
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// --- the cache --------------------------------------------------------------------------------

std::string selfcheck_cache_dir() { return polystack_cache_dir(); }

std::string selfcheck_cache_key(const DeviceInfo& d, const std::string& plugin_file) {
  std::string identity = normalized_uuid(d.uuid);
  if (identity.empty()) identity = normalized_pci_bus_id(d.pci_bus_id);
  if (identity.empty()) identity = d.id + " " + d.name;
  std::string plugin = "built in";
  std::error_code ec;
  if (!plugin_file.empty()) {
    const auto size = std::filesystem::file_size(plugin_file, ec);
    const auto time = std::filesystem::last_write_time(plugin_file, ec);
    plugin =
        fmt::format("{} bytes, time {}", ec ? 0 : size, ec ? 0 : time.time_since_epoch().count());
  }
  return fmt::format("{} | {} | driver {} | runtime {} | polystack {} | plugin {}", api_name(d.api),
                     identity, d.driver_version, d.runtime_version, kVersion, plugin);
}

namespace {

std::string cache_file(const std::string& key) {
  const std::string dir = selfcheck_cache_dir();
  if (dir.empty()) return "";
  uint64_t h = 1469598103934665603ull;  // FNV-1a: a short, stable file name for the key
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  return (std::filesystem::path(dir) / fmt::format("selfcheck-{:016x}.json", h)).string();
}

}  // namespace

const SelfCheckCase* SelfCheckCache::find(const std::string& name) const {
  for (const SelfCheckCase& c : cases)
    if (c.name == name) return &c;
  return nullptr;
}

const SelfCheckTiming* SelfCheckCache::find_timing(const std::string& name) const {
  for (const SelfCheckTiming& t : timings)
    if (t.name == name) return &t;
  return nullptr;
}

SelfCheckCache SelfCheckCache::load(const std::string& key) {
  SelfCheckCache c;
  c.path = cache_file(key);
  if (c.path.empty()) return c;
  std::ifstream in(c.path);
  if (!in) return c;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  // A file for another key (a hash collision), or damaged: nothing is cached.
  if (!j.is_object() || j.value("key", std::string()) != key) return c;
  try {
    c.cases = cases_from_json(j.at("cases"));
    if (j.contains("timings"))
      for (const nlohmann::json& t : j["timings"])
        c.timings.push_back({t.at("name").get<std::string>(), t.at("device_ms").get<double>(),
                             t.at("cpu_ms").get<double>()});
  } catch (const nlohmann::json::exception&) {
    return SelfCheckCache{c.path, {}, {}};
  }
  return c;
}

namespace {

// Puts item in place of the entry of the same name, or after the others.
template <class T>
void merge_named(std::vector<T>& into, const T& item) {
  auto it = std::find_if(into.begin(), into.end(), [&](const T& e) { return e.name == item.name; });
  if (it != into.end())
    *it = item;
  else
    into.push_back(item);
}

// An exclusive advisory lock on a file, released when it goes out of scope.
class FileLock {
 public:
  explicit FileLock(const std::string& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT, 0644)) {
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

}  // namespace

void SelfCheckCache::merge(const SelfCheckResult& r) {
  for (const SelfCheckCase& nc : r.cases) merge_named(cases, nc);
  if (!r.timed.empty()) merge_named(timings, SelfCheckTiming{r.timed, r.device_ms, r.cpu_ms});
}

std::string SelfCheckCache::save(const std::string& key) const {
  if (path.empty()) return "no cache folder (neither XDG_CACHE_HOME nor HOME is set)";
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  // Without the lock (a read-only folder) the write below reports why.
  const FileLock lock(path + ".lock");
  SelfCheckCache now = load(key);
  for (const SelfCheckCase& c : cases) merge_named(now.cases, c);
  for (const SelfCheckTiming& t : timings) merge_named(now.timings, t);
  nlohmann::json j = {{"key", key}, {"cases", cases_to_json(now.cases)}};
  nlohmann::json timed = nlohmann::json::array();
  for (const SelfCheckTiming& t : now.timings)
    timed.push_back({{"name", t.name}, {"device_ms", t.device_ms}, {"cpu_ms", t.cpu_ms}});
  j["timings"] = timed;
  const std::string tmp = fmt::format("{}.{}.tmp", path, getpid());
  {
    std::ofstream out(tmp);
    out << j.dump(1) << "\n";
    if (!out) {
      std::filesystem::remove(tmp, ec);
      return fmt::format("cannot write {}", tmp);
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return fmt::format("cannot write {}: {}", path, ec.message());
  }
  return "";
}

// --- the child's side ---------------------------------------------------------------------------

namespace {

void report_stage(const std::string& name) {
  write_report_line(nlohmann::json{{"stage", "case"}, {"name", name}}.dump());
}

}  // namespace

int selfcheck_child_main(const std::vector<std::string>& args) {
  if (args.size() < 3) throw UsageError("__selfcheck PLUGIN DEVICE_ID TIMED_TYPE|- CASE...");
  const std::string& plugin = args[0];
  const std::string& id = args[1];
  std::optional<DType> timed;
  if (args[2] != "-") {
    timed = dtype_from_name(args[2]);
    if (!timed) throw UsageError(fmt::format("__selfcheck: unknown type {}", args[2]));
  }
  const std::vector<std::string> names(args.begin() + 3, args.end());
  write_report_line(nlohmann::json{{"stage", "opening"}}.dump());
  SelfCheckResult r;
  try {
    Registry reg;
    register_builtin_backends(reg);
    reg.add(load_backend_plugin(plugin));
    std::unique_ptr<Device> cpu = reg.open("cpu", DeviceOptions{});
    std::unique_ptr<Device> dev = reg.open(id, DeviceOptions{});
    r = run_selfcheck(*dev, *cpu, names, timed ? &*timed : nullptr, report_stage);
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  write_report_line("{\"result\": " + selfcheck_result_to_json(r) + "}");
  return 0;
}

}  // namespace ps
