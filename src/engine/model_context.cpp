#include "engine/model_context.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "backend/registry.h"
#include "cluster/cluster.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "core/version.h"
#include "gguf/gguf.h"
#include "graph/ops.h"

namespace ps {

namespace {

// A test hook: the rank that ends itself (SIGKILL) at its first pass, as a crashed host would.
const int POLYSTACK_TEST_MPI_EXIT_RANK = [] {
  const char* v = std::getenv("POLYSTACK_TEST_MPI_EXIT_RANK");
  return v && *v ? std::atoi(v) : -1;
}();

}  // namespace

std::shared_ptr<LoadedModel> LoadedModel::load(const std::string& path, bool with_tokenizer) {
  const auto t0 = std::chrono::steady_clock::now();
  auto m = std::make_shared<LoadedModel>();
  m->file = gguf::File::open(path);
  m->model = Model::load(*m->file);
  // What the loader could run without but the user should know, for every command and the
  // server alike.
  for (const std::string& w : m->model->params().warnings)
    fmt::print(stderr, "polystack: warning: {}: {}\n", path, w);
  if (with_tokenizer) {
    m->tokenizer = Tokenizer::from_gguf(*m->file);
    if (m->tokenizer->n_vocab() != m->model->params().n_vocab)
      throw ModelError(
          fmt::format("{}: the tokenizer has {} tokens but the model's vocabulary "
                      "is {}",
                      path, m->tokenizer->n_vocab(), m->model->params().n_vocab));
  }
  m->load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

ChoiceOptions device_choice_options(const LoadedModel& model, const ContextOptions& opts) {
  ChoiceOptions c;
  c.spec = opts.device;
  c.strict = opts.strict;
  c.self_check = opts.self_check;
  c.recheck = opts.recheck;
  std::map<DType, uint64_t> bytes;
  for (const auto& t : model.file->tensors())
    if (t.dims.size() >= 2 && t.dims[1] > 1) bytes[t.type] += t.nbytes;
  uint64_t most = 0;
  for (auto [t, b] : bytes) {
    c.weight_types.push_back(t);
    if (b > most) most = b, c.timed_type = t;
  }
  return c;
}

PlacementRank placement_rank(const OpenedDevices& opened) {
  PlacementRank r;
  std::vector<std::string> ids;
  for (const auto& d : opened.devices) {
    r.free += placement_device(d->info()).free;
    ids.push_back(d->info().id);
  }
  r.devices = fmt::format("{}", fmt::join(ids, " + "));
  return r;
}

PlacementDevice placement_device(const DeviceInfo& d) {
  PlacementDevice pd;
  pd.id = d.id;
  pd.gpu = d.api != Api::Cpu;
  pd.free = d.memory_free ? d.memory_free : d.memory_total;
  const char* caps = std::getenv("POLYSTACK_DEVICE_MEMORY");
  if (const uint64_t cap = device_memory_cap(caps ? caps : "", d.id); cap) {
    pd.free = pd.free ? std::min(pd.free, cap) : cap;
    pd.capped = true;
  }
  return pd;
}

ContextShape resolve_shape(const ModelParams& p, const ContextOptions& opts) {
  if (opts.n_ctx < 0) throw UsageError(fmt::format("context size {} is negative", opts.n_ctx));
  if (opts.n_ctx_per_seq < 0)
    throw UsageError(fmt::format("--ctx-per-seq {} is negative", opts.n_ctx_per_seq));
  if (opts.n_batch <= 0)
    throw UsageError(fmt::format("batch size {} must be positive", opts.n_batch));
  if (opts.n_seq <= 0 || opts.n_seq > 1024)
    throw UsageError(fmt::format("{} sequences: 1 to 1024 are possible", opts.n_seq));
  if (opts.n_seq_cached < 0 || opts.n_seq_cached > 4096)
    throw UsageError(fmt::format("{} cached sequences: 0 to 4096 are possible", opts.n_seq_cached));
  ContextShape s;
  s.n_cells = opts.n_ctx > 0 ? opts.n_ctx : int(std::min<int64_t>(p.n_ctx_train, 4096));
  if (s.n_cells > (1 << 20))
    throw UsageError(fmt::format("context size {} is too large", s.n_cells));
  if (s.n_cells < 1) throw ModelError(fmt::format("context size {} is not positive", s.n_cells));
  s.n_ctx = opts.n_ctx_per_seq > 0 ? opts.n_ctx_per_seq : s.n_cells;
  if (s.n_ctx > s.n_cells)
    throw UsageError(fmt::format("--ctx-per-seq {} is more than the {} cells of the pool (-c)",
                                 s.n_ctx, s.n_cells));
  s.n_batch = opts.n_batch;
  s.n_seq = opts.n_seq;
  s.n_seq_cached = opts.n_seq_cached;
  return s;
}

KvGroups kv_groups(const ModelParams& p, const ContextShape& shape) {
  const int64_t pool_blocks = (int64_t(shape.n_cells) + kKvBlock - 1) / kKvBlock;
  KvGroups out;
  for (int64_t l = 0; l < p.n_layer; ++l) {
    const int64_t slots = kv_slots(p, l, shape.n_ctx, shape.n_batch);
    size_t g = 0;
    while (g < out.groups.size() && out.groups[g].slots != slots) ++g;
    if (g == out.groups.size()) {
      // Every position's group takes the whole pool; a ring's, no more than the rings of the
      // sequences that run at once need (idle ones give theirs up when they are short).
      const int64_t ring_blocks = (slots + kKvBlock - 1) / kKvBlock;
      out.groups.push_back({slots, slots >= shape.n_ctx
                                       ? pool_blocks
                                       : std::min(pool_blocks, shape.n_seq * ring_blocks)});
    }
    out.layer_group.push_back(int(g));
  }
  return out;
}

OpenedDevices open_devices(const LoadedModel& model, const ContextOptions& opts) {
  Registry& reg = Registry::global();
  DeviceOptions dopts;
  dopts.n_threads = opts.n_threads;
  // Ranks of an MPI job on one host share its cores: by default each takes its share, as
  // threads that outnumber the cores spin against each other.
  if (const cluster::Cluster* job = cluster::current();
      opts.mpi && job && opts.n_threads == 0 && job->local_size() > 1)
    dopts.n_threads = std::max(1, physical_core_count() / job->local_size());
  dopts.batch_invariant = opts.deterministic;
  OpenedDevices out;
  out.choice = choose_device(reg, device_choice_options(model, opts));
  ChosenDevice& choice = out.choice;
  const bool on_gpu = choice.device_id != "cpu";
  if (!on_gpu && (opts.main_gpu >= 0 || opts.split_layers || !opts.tensor_split.empty())) {
    const std::string flag = opts.main_gpu >= 0           ? "--main-gpu"
                             : !opts.tensor_split.empty() ? "--tensor-split"
                                                          : "--split-mode layer";
    // As llama.cpp: a GPU flag on a machine that runs the model on the CPU changes nothing.
    if (opts.strict)
      throw UsageError(fmt::format("{} needs a GPU, but the model runs on the CPU ({}; --strict)",
                                   flag, choice.reason));
    choice.notes.push_back(
        fmt::format("note: {} has no effect: the model runs on the CPU ({})", flag, choice.reason));
  }
  // The GPUs: the chosen one, or with --split-mode layer / --main-gpu every GPU that passed.
  bool have_main = false;
  if (on_gpu) {
    std::vector<std::string> all = choice.also_usable;
    all.push_back(choice.device_id);
    std::sort(all.begin(), all.end());
    std::string main_id = choice.device_id;
    if (opts.main_gpu >= 0) {
      if (size_t(opts.main_gpu) >= all.size())
        throw UsageError(fmt::format("--main-gpu {}: {} GPU(s) passed their checks: {}",
                                     opts.main_gpu, all.size(), fmt::join(all, ", ")));
      main_id = all[size_t(opts.main_gpu)];
      if (main_id != choice.device_id)
        choice.reason = fmt::format("--main-gpu {} of {}", opts.main_gpu, fmt::join(all, ", "));
    }
    for (const std::string& id : opts.split_layers ? all : std::vector<std::string>{main_id}) {
      out.devices.push_back(reg.open(id, dopts));
      if (id == main_id) out.main = out.devices.size() - 1, have_main = true;
    }
  }
  out.devices.push_back(reg.open("cpu", dopts));
  if (!have_main) out.main = out.devices.size() - 1;
  for (const auto& d : out.devices)
    if (const DeviceInfo& di = d->info(); !di.unusable.empty())
      throw BackendError(fmt::format("{} cannot run models: {}", di.id, di.unusable));
  return out;
}

PlacementPlan plan_layers(const LoadedModel& model, const ContextShape& shape,
                          const std::vector<Device*>& devices, const ContextOptions& opts,
                          const std::vector<int>& unit_rank, int rank) {
  uint64_t compute = 0;
  std::string experts_why;
  std::vector<UnitCost> units =
      model_unit_costs(model, shape, *devices.back(), compute,
                       std::vector<Device*>(devices.begin(), devices.end() - 1), &experts_why);
  for (size_t u = 0; u < unit_rank.size() && u < units.size(); ++u)
    if (unit_rank[u] != rank) units[u] = UnitCost{};
  std::vector<PlacementDevice> pdevs;
  for (const Device* d : devices) pdevs.push_back(placement_device(d->info()));
  LayerRequest req;
  req.mode = opts.n_gpu_layers == ContextOptions::kNglAuto  ? LayerRequest::Mode::Auto
             : opts.n_gpu_layers == ContextOptions::kNglAll ? LayerRequest::Mode::All
                                                            : LayerRequest::Mode::Count;
  req.count = std::max(opts.n_gpu_layers, 0);
  // Without a GPU, --tensor-split is a no-op (open_devices noted it).
  if (devices.size() > 1) req.tensor_split = opts.tensor_split;
  req.strict = opts.strict;
  req.n_cpu_moe = opts.n_cpu_moe;
  req.experts_cpu_reason = experts_why;
  req.unit_rank = unit_rank;
  req.rank = rank;
  return plan_placement(units, compute, pdevs, req);
}

// What the user asked for that the model or the machine will not do well: a context beyond what
// the model was trained for (or its RoPE scaling extends it to), threads beyond the CPUs.
std::vector<std::string> context_warnings(const ModelParams& p, const ContextOptions& opts,
                                          const ContextShape& shape) {
  std::vector<std::string> out;
  const int64_t usable = std::max(p.n_ctx_usable, p.n_ctx_train);
  if (p.n_ctx_train > 0 && shape.n_ctx > usable)
    out.push_back(fmt::format(
        "a context of {} positions (-c) is beyond the {} the model was trained for{}; text past "
        "{} may lose coherence",
        shape.n_ctx, usable,
        usable != p.n_ctx_train
            ? fmt::format(" (its context_length {}, extended by its RoPE scaling)", p.n_ctx_train)
            : std::string(),
        usable));
  const int cores = physical_core_count();
  const unsigned cpus = std::thread::hardware_concurrency();
  if (opts.n_threads > cores)
    out.push_back(fmt::format(
        "-t {} is more threads than this machine's {} cores ({} logical CPUs): threads that "
        "share a core, or wait for one, add little or slow the rest",
        opts.n_threads, cores, cpus));
  return out;
}

ModelContext::ModelContext(std::shared_ptr<const LoadedModel> model, const ContextOptions& opts)
    : model_(std::move(model)) {
  const ContextShape shape = resolve_shape(model_->model->params(), opts);
  if (opts.mpi) {
    cluster::Cluster* c = cluster::current();
    if (!c) throw UsageError("--mpi: MPI was not started for this process");
    if (c->rank() != 0) throw std::logic_error("a worker rank makes its context from rank 0's");
    if (c->size() > 1) cluster_ = c;
  }
  if (!cluster_) {
    init(shape, opts, open_devices(*model_, opts), {}, 0);
    if (opts.mpi)
      warnings_.push_back(
          "--mpi in a job of one rank: the whole model runs here (start it with mpirun -np N)");
    return;
  }
  // The workers load the model and open their devices while this rank opens its own.
  const std::string fingerprint = model_fingerprint(model_->file->path());
  const nlohmann::json start = {{"model", model_->file->path()},
                                {"fingerprint", fingerprint},
                                {"version", kVersion},
                                {"options", context_options_json(opts)}};
  tell_workers(*cluster_, command_message(PipelineCommand::Start, &start));
  try {
    OpenedDevices opened = open_devices(*model_, opts);
    std::vector<PlacementRank> ranks;
    std::vector<int> unit_rank = plan_job(shape, opts, opened, fingerprint, ranks);
    init(shape, opts, std::move(opened), std::move(unit_rank), 0);
    gather_ready(std::move(ranks));
  } catch (...) {
    tell_workers(*cluster_, command_message(PipelineCommand::End));
    throw;
  }
}

ModelContext::ModelContext(std::shared_ptr<const LoadedModel> model, const ContextOptions& opts,
                           OpenedDevices opened, std::vector<int> unit_rank, int rank)
    : model_(std::move(model)) {
  cluster_ = cluster::current();
  init(resolve_shape(model_->model->params(), opts), opts, std::move(opened), std::move(unit_rank),
       rank);
}

void ModelContext::init(const ContextShape& shape, const ContextOptions& opts, OpenedDevices opened,
                        std::vector<int> unit_rank, int rank) {
  n_ctx_ = shape.n_ctx;
  n_cells_ = shape.n_cells;
  n_batch_ = shape.n_batch;
  choice_ = std::move(opened.choice);
  devices_ = std::move(opened.devices);
  device_ = devices_[opened.main].get();
  std::vector<Device*> devices;
  for (const auto& d : devices_) devices.push_back(d.get());
  plan_ = plan_layers(*model_, shape, devices, opts, unit_rank, rank);
  scheduler_ =
      std::make_unique<Scheduler>(devices, opts.strict, plan_.unit_device, plan_.expert_devices());
  allocate_kv(shape);
  upload_weights();
  for (std::string& w : context_warnings(model_->model->params(), opts, shape))
    warnings_.push_back(std::move(w));
}

std::vector<int> ModelContext::plan_job(const ContextShape& shape, const ContextOptions& opts,
                                        const OpenedDevices& opened, const std::string& fingerprint,
                                        std::vector<PlacementRank>& ranks) {
  const int R = cluster_->size();
  ranks.assign(static_cast<size_t>(R), PlacementRank{});
  ranks[0] = placement_rank(opened);
  ranks[0].host = cluster_->host();
  std::vector<std::string> problems;
  for (int r = 1; r < R; ++r) {
    cluster_->set_waiting_for(fmt::format("rank {} (loading the model)", r));
    const nlohmann::json j = recv_reply(*cluster_, r);
    PlacementRank& pr = ranks[size_t(r)];
    pr.host = j.value("host", std::string("?"));
    if (j.contains("error")) {
      problems.push_back(
          fmt::format("rank {} ({}): {}", r, pr.host, j["error"].get<std::string>()));
      continue;
    }
    if (j.value("version", std::string()) != kVersion)
      problems.push_back(fmt::format(
          "rank {} ({}) runs polystack {} and rank 0 runs {}: every rank must run the same "
          "version",
          r, pr.host, j.value("version", std::string("?")), kVersion));
    else if (j.value("fingerprint", std::string()) != fingerprint)
      problems.push_back(fmt::format(
          "rank {} ({}) has a different model at {} than rank 0 ({} there, {} here): every rank "
          "must have the same file",
          r, pr.host, model_->file->path(), j.value("fingerprint", std::string("?")), fingerprint));
    pr.free = j.value("free", uint64_t(0));
    pr.devices = j.value("devices", std::string());
  }
  cluster_->set_waiting_for("");
  if (!problems.empty()) throw UsageError(fmt::format("{}", fmt::join(problems, "; ")));
  uint64_t compute = 0;
  const std::vector<UnitCost> units =
      model_unit_costs(*model_, shape, *opened.devices.back(), compute);
  std::vector<int> unit_rank = plan_ranks(units, ranks, opts.rank_split);
  const std::vector<uint64_t> need = rank_needs(units, unit_rank, R);
  for (int r = 0; r < R; ++r) ranks[size_t(r)].need = need[size_t(r)];
  const nlohmann::json plan = unit_rank;
  tell_workers(*cluster_, command_message(PipelineCommand::Plan, &plan));
  return unit_rank;
}

void ModelContext::gather_ready(std::vector<PlacementRank> ranks) {
  ranks[0].summary = plan_.summary;
  ranks[0].rss = resident_bytes();
  std::vector<std::string> problems;
  for (int r = 1; r < cluster_->size(); ++r) {
    cluster_->set_waiting_for(
        fmt::format("rank {} ({}: loading layers)", r, ranks[size_t(r)].host));
    const nlohmann::json j = recv_reply(*cluster_, r);
    if (j.contains("error"))
      problems.push_back(
          fmt::format("rank {} ({}): {}", r, ranks[size_t(r)].host, j["error"].get<std::string>()));
    ranks[size_t(r)].summary = j.value("summary", std::string());
    ranks[size_t(r)].rss = j.value("rss", uint64_t(0));
  }
  cluster_->set_waiting_for("");
  if (!problems.empty()) throw BackendError(fmt::format("{}", fmt::join(problems, "; ")));
  // The hop to each rank: round trips of one token's activation.
  std::vector<uint8_t> ping = command_message(PipelineCommand::Ping);
  ping.resize(1 + size_t(model_->model->params().n_embd) * sizeof(float));
  for (int r = 1; r < cluster_->size(); ++r) {
    cluster_->set_waiting_for(fmt::format("rank {} ({})", r, ranks[size_t(r)].host));
    std::vector<double> rtt;
    for (int i = 0; i < 21; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      cluster_->send(r, cluster::kCommand, ping);
      (void)cluster_->recv(r, cluster::kReply);
      rtt.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::nth_element(rtt.begin(), rtt.begin() + 10, rtt.end());
    ranks[size_t(r)].hop_seconds = rtt[10] / 2;
  }
  cluster_->set_waiting_for("");
  plan_.ranks = std::move(ranks);
}

double ModelContext::warm_up() {
  const auto t0 = std::chrono::steady_clock::now();
  const Tokenizer* tok = model_->tokenizer.get();
  const int32_t id = tok && tok->bos() >= 0 ? tok->bos() : 0;
  eval(std::span<const int32_t>(&id, 1), false, 0);
  reset(0);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void ModelContext::allocate_kv(const ContextShape& shape) {
  const ModelParams& p = model_->model->params();
  kv_groups_ = kv_groups(p, shape);
  const int ids = shape.n_seq + shape.n_seq_cached;
  pool_ = std::make_unique<KvPool>(kv_groups_.groups, kKvBlock, ids);
  n_past_.assign(size_t(ids), 0);
  live_.assign(size_t(ids), false);
  const size_t row = kv_row_bytes(p);
  for (int64_t l = 0; l < p.n_layer; ++l) {
    if (!plan_.local(int(l + 1))) {  // another rank's layer: its cells are there
      k_cache_.push_back(nullptr);
      v_cache_.push_back(nullptr);
      continue;
    }
    Device& dev = *devices_[size_t(plan_.unit_device[size_t(l + 1)])];
    const KvPool::Group& g = pool_->group(kv_groups_.layer_group[size_t(l)]);
    const size_t bytes = row * size_t(g.n_blocks * kKvBlock);
    k_cache_.push_back(dev.alloc(bytes));
    v_cache_.push_back(dev.alloc(bytes));
  }
  // Tokens of several sequences go through one forward pass where every device that runs a
  // layer has paged attention; elsewhere one pass per sequence.
  batched_ = true;
  Graph probe;
  std::vector<int32_t> info = {1, int32_t(kKvBlock), 0, 4, 0};
  Tensor* q = probe.leaf("q", DType::F32, {p.head_dim, p.n_head, 1, 1});
  Tensor* kc = probe.leaf("k", DType::F16, {p.head_dim, p.n_head_kv, kKvBlock, 1});
  Tensor* vc = probe.leaf("v", DType::F16, {p.head_dim, p.n_head_kv, kKvBlock, 1});
  Tensor* it = probe.leaf("info", DType::I32, {5, 1, 1, 1}, info.data());
  Tensor* att = probe.attention_paged(q, kc, vc, it, 1.0f);
  for (size_t d = 0; d < devices_.size(); ++d)
    if (plan_.need[d] > 0 && !devices_[d]->supports(*att)) batched_ = false;
}

void ModelContext::upload_weights() {
  // A pass's graph for one token of sequence 0, placed but not run.
  if (!pool_->reserve(0, 1)) throw BackendError("the KV pool has no block for one token");
  const int32_t first = 0;
  const SeqTokens run{0, std::span<const int32_t>(&first, 1)};
  PassData data;
  Graph g;
  build_pass(g, describe(std::span<const SeqTokens>(&run, 1), false), data);
  // In an MPI job, this rank's nodes alone, over stand-ins for what other ranks compute.
  std::vector<std::vector<uint8_t>> stand_ins;
  if (!plan_.unit_rank.empty())
    for (const Crossing& x : cut_for_rank(g))
      if (x.to == plan_.rank && x.t->op != OpKind::None) {
        stand_ins.emplace_back(x.t->n_bytes());
        g.make_leaf(x.t, stand_ins.back().data());
      }
  scheduler_->upload_constants(g);
  plan_.fallbacks = scheduler_->report().fallbacks;
  pool_->release(0);
}

int ModelContext::acquire_sequence() {
  for (size_t i = 0; i < live_.size(); ++i)
    if (!live_[i]) {
      live_[i] = true;
      return int(i);
    }
  return -1;
}

void ModelContext::release_sequence(int seq) {
  live_.at(size_t(seq)) = false;
  reset(seq);
}

void ModelContext::reset(int seq) {
  n_past_.at(size_t(seq)) = 0;
  pool_->release(seq);
}

bool ModelContext::reserve(int seq, int n_positions) {
  if (seq < 0 || seq >= n_seq())
    throw UsageError(fmt::format("sequence {} does not exist ({} sequences)", seq, n_seq()));
  return pool_->reserve(seq, n_positions);
}

int ModelContext::live_sequences() const {
  return int(std::count(live_.begin(), live_.end(), true));
}

std::vector<const Device*> ModelContext::devices() const {
  std::vector<const Device*> out;
  for (const auto& d : devices_) out.push_back(d.get());
  return out;
}

ModelContext::~ModelContext() {
  if (!cluster_) return;
  try {
    finish_passes();
    if (cluster_->rank() == 0) tell_workers(*cluster_, command_message(PipelineCommand::End));
  } catch (const std::exception& e) {
    fmt::print(stderr, "polystack: error: {}\n", e.what());
  }
}

size_t ModelContext::kv_cache_bytes() const {
  size_t n = 0;
  for (const auto& b : k_cache_) n += b ? b->size() : 0;
  for (const auto& b : v_cache_) n += b ? b->size() : 0;
  return n;
}

bool ModelContext::rewind(int seq, int n) {
  const ModelParams& p = model_->model->params();
  int& past = n_past_.at(size_t(seq));
  if (n < 0 || n > past) return false;
  // A ring of `slots` holds positions [past - slots, past); position n attends back to
  // n - window + 1.
  for (int64_t l = 0; l < p.n_layer; ++l) {
    const int64_t slots = kv_slots(p, l, n_ctx_, n_batch_);
    if (slots >= n_ctx_) continue;
    const int64_t window = p.layer_window.empty() ? 0 : p.layer_window[size_t(l)];
    if (n > 0 && n - window + 1 < past - slots) return false;
  }
  past = n;
  pool_->shrink(seq, n);
  return true;
}

void ModelContext::prepare(std::span<const SeqTokens> runs) {
  const int64_t n_vocab = model_->model->params().n_vocab;
  std::vector<bool> seen(size_t(n_seq()), false);
  for (const SeqTokens& r : runs) {
    if (r.seq < 0 || r.seq >= n_seq())
      throw UsageError(fmt::format("sequence {} does not exist ({} sequences)", r.seq, n_seq()));
    if (seen[size_t(r.seq)])
      throw UsageError(fmt::format("sequence {} appears twice in one batch", r.seq));
    seen[size_t(r.seq)] = true;
    if (r.tokens.empty()) throw UsageError("nothing to evaluate: no tokens");
    const int n_past = n_past_[size_t(r.seq)];
    if (n_past + int64_t(r.tokens.size()) > n_ctx_)
      throw UsageError(
          fmt::format("{} tokens do not fit in the context: {} of {} positions are used (raise -c)",
                      r.tokens.size(), n_past, n_ctx_));
    for (int32_t t : r.tokens)
      if (t < 0 || t >= n_vocab)
        throw UsageError(
            fmt::format("token id {} is outside the vocabulary (0..{})", t, n_vocab - 1));
  }
  for (const SeqTokens& r : runs)
    if (!pool_->reserve(r.seq, n_past_[size_t(r.seq)] + int64_t(r.tokens.size())))
      throw UsageError(fmt::format(
          "the KV pool is full: {} more tokens of sequence {} need cells, and {} of the {} cells "
          "are taken (raise -c)",
          r.tokens.size(), r.seq, pool_->used_cells(), pool_->total_cells()));
}

std::vector<float> ModelContext::eval(std::span<const int32_t> tokens, bool all_logits, int seq) {
  if (tokens.empty()) throw UsageError("nothing to evaluate: no tokens");
  const SeqTokens whole{seq, tokens};
  prepare(std::span<const SeqTokens>(&whole, 1));
  return eval_prepared(seq, tokens, all_logits);
}

std::vector<float> ModelContext::eval_prepared(int seq, std::span<const int32_t> tokens,
                                               bool all_logits, bool hidden) {
  std::vector<float> out;
  for (size_t i = 0; i < tokens.size(); i += size_t(n_batch_)) {
    const size_t n = std::min(tokens.size() - i, size_t(n_batch_));
    const SeqTokens run{seq, tokens.subspan(i, n), hidden};
    if (hidden) {
      std::vector<float> states;
      forward(std::span<const SeqTokens>(&run, 1), false, &states);
      out.insert(out.end(), states.begin(), states.end());
      continue;
    }
    std::vector<float> got = forward(std::span<const SeqTokens>(&run, 1), all_logits);
    if (all_logits)
      out.insert(out.end(), got.begin(), got.end());
    else if (i + n == tokens.size())
      out = std::move(got);
  }
  return out;
}

std::vector<std::vector<float>> ModelContext::eval_batch(std::span<const SeqTokens> runs) {
  if (runs.empty()) return {};
  prepare(runs);
  size_t total = 0;
  for (const SeqTokens& r : runs) total += r.tokens.size();
  std::vector<std::vector<float>> out;
  if (!batched_ || runs.size() == 1 || total > size_t(n_batch_)) {
    for (const SeqTokens& r : runs) out.push_back(eval_prepared(r.seq, r.tokens, false, r.hidden));
    return out;
  }
  std::vector<float> states, all;
  if (cluster_ && runs.size() > 1) {
    // Micro-batches, one per rank at most, so that rank 0 starts the next while later ranks
    // run the last: with k of them over R ranks, each rank idles (R - 1) / (k + R - 1) of the
    // step (the pipeline's bubble).
    const size_t k = std::min(runs.size(), size_t(cluster_->size()));
    std::vector<std::unique_ptr<RankPass>> passes;
    for (size_t i = 0; i < k; ++i) {
      const size_t b = runs.size() * i / k, e = runs.size() * (i + 1) / k;
      passes.push_back(start_pass(describe(runs.subspan(b, e - b), false)));
    }
    for (auto& p : passes) {
      std::vector<float> s;
      const std::vector<float> l = finish_pass(*p, &s);
      all.insert(all.end(), l.begin(), l.end());
      states.insert(states.end(), s.begin(), s.end());
    }
  } else {
    all = forward(runs, false, &states);
  }
  const size_t n_vocab = size_t(model_->model->params().n_vocab);
  const size_t n_embd = size_t(model_->model->params().n_embd);
  size_t logits_at = 0, states_at = 0;
  for (const SeqTokens& r : runs) {
    if (r.hidden) {
      const size_t n = r.tokens.size() * n_embd;
      out.emplace_back(states.begin() + ptrdiff_t(states_at),
                       states.begin() + ptrdiff_t(states_at + n));
      states_at += n;
    } else {
      out.emplace_back(all.begin() + ptrdiff_t(logits_at),
                       all.begin() + ptrdiff_t(logits_at + n_vocab));
      logits_at += n_vocab;
    }
  }
  return out;
}

namespace {

// The forward graph of `tokens` at positions n_past.. (written to pos, which the graph reads),
// over caches that are only shapes: a graph to measure, not to run.
Tensor* measure_forward(const LoadedModel& m, Graph& g, std::span<const int32_t> tokens,
                        std::vector<int32_t>& pos, int n_past, int n_ctx, int n_batch) {
  const ModelParams& p = m.model->params();
  const int32_t T = int32_t(tokens.size());
  pos.resize(tokens.size());
  for (int32_t i = 0; i < T; ++i) pos[size_t(i)] = n_past + i;
  ForwardInputs in;
  in.tokens = g.leaf("tokens", DType::I32, {T, 1, 1, 1}, const_cast<int32_t*>(tokens.data()));
  in.positions = g.leaf("positions", DType::I32, {T, 1, 1, 1}, pos.data());
  in.n_past = n_past;
  in.n_tokens = T;
  in.n_ctx = n_ctx;
  for (int64_t l = 0; l < p.n_layer; ++l) {
    const int64_t slots = kv_slots(p, l, n_ctx, n_batch);
    in.k_cache.push_back(
        g.leaf(fmt::format("cache_k.{}", l), DType::F16, {p.head_dim, p.n_head_kv, slots, 1}));
    in.v_cache.push_back(
        g.leaf(fmt::format("cache_v.{}", l), DType::F16, {p.head_dim, p.n_head_kv, slots, 1}));
  }
  return m.model->build_graph(g, in);
}

}  // namespace

std::vector<UnitCost> model_unit_costs(const LoadedModel& m, const ContextShape& shape, Device& cpu,
                                       uint64_t& compute, const std::vector<Device*>& gpus,
                                       std::string* experts_why) {
  const ModelParams& p = m.model->params();
  const int n_ctx = shape.n_ctx;
  const int T = std::min(shape.n_batch, n_ctx);
  const std::vector<int32_t> tokens(size_t(T), 0);
  Graph g;
  std::vector<int32_t> pos;
  Tensor* logits = measure_forward(m, g, tokens, pos, n_ctx - T, n_ctx, shape.n_batch);
  if (experts_why) {
    experts_why->clear();
    for (const Device* d : gpus)
      for (const Tensor* n : g.nodes())
        if (experts_why->empty() && n->experts && n->layer == 0)
          if (std::string why = d->unsupported_reason(*n); !why.empty())
            *experts_why = fmt::format("{} cannot run the routed experts ({}: {})", d->info().id,
                                       op_name(n->op), why);
  }
  const int n_units = int(p.n_layer) + 2;
  std::vector<UnitCost> units(static_cast<size_t>(n_units));
  // Each weight counts for every unit whose nodes read it (a view for the tensor it views); the
  // routed experts' (read by Tensor::experts nodes) also as the unit's experts.
  std::vector<std::set<const Tensor*>> read(static_cast<size_t>(n_units)),
      experts(static_cast<size_t>(n_units));
  for (const Tensor* n : g.nodes())
    for (const Tensor* s : n->src) {
      while (s && s->op == OpKind::View) s = s->src[0];
      if (s && s->op == OpKind::None && s->constant) {
        const size_t u = size_t(std::clamp(n->layer + 1, 0, n_units - 1));
        read[u].insert(s);
        if (n->experts) experts[u].insert(s);
      }
    }
  for (int u = 0; u < n_units; ++u) {
    for (const Tensor* w : read[size_t(u)]) {
      units[size_t(u)].weights += w->n_bytes();
      if (u == 0 && read[size_t(n_units - 1)].count(w)) units[0].shared_with_output += w->n_bytes();
    }
    for (const Tensor* w : experts[size_t(u)]) units[size_t(u)].experts += w->n_bytes();
  }
  // K and V: each layer's group's cells of the pool.
  const KvGroups groups = kv_groups(p, shape);
  const uint64_t row = kv_row_bytes(p);
  for (int64_t l = 0; l < p.n_layer; ++l)
    units[size_t(l + 1)].kv =
        2 * row *
        uint64_t(groups.groups[size_t(groups.layer_group[size_t(l)])].n_blocks * kKvBlock);
  // The compute buffer: the peak of the intermediate tensors of a prompt batch at the end of
  // the context, as the scheduler would plan it (the same on every device).
  Scheduler probe({&cpu}, false);
  compute = probe.measure(g, {logits})[0];
  return units;
}

PassDesc ModelContext::describe(std::span<const SeqTokens> runs, bool all_logits) const {
  PassDesc desc;
  desc.all_logits = all_logits;
  for (const SeqTokens& r : runs) {
    PassRun pr;
    pr.seq = r.seq;
    pr.n_past = n_past_[size_t(r.seq)];
    pr.hidden = r.hidden;
    pr.tokens.assign(r.tokens.begin(), r.tokens.end());
    for (int gi = 0; gi < pool_->n_groups(); ++gi) pr.tables.push_back(pool_->table(r.seq, gi));
    desc.runs.push_back(std::move(pr));
  }
  return desc;
}

Tensor* ModelContext::build_pass(Graph& g, const PassDesc& desc, PassData& d,
                                 Tensor** hidden) const {
  const ModelParams& p = model_->model->params();
  const std::vector<PassRun>& runs = desc.runs;
  const bool all_logits = desc.all_logits;
  d.tokens.clear();
  d.pos.clear();
  d.rows.clear();
  d.hidden_rows.clear();
  for (const PassRun& r : runs) {
    const int n_past = r.n_past;
    for (size_t i = 0; i < r.tokens.size(); ++i) {
      if (r.hidden) d.hidden_rows.push_back(int32_t(d.tokens.size()));
      d.tokens.push_back(r.tokens[i]);
      d.pos.push_back(n_past + int32_t(i));
    }
    if (!r.hidden) d.rows.push_back(int32_t(d.tokens.size() - 1));
  }
  const int32_t T = int32_t(d.tokens.size());
  // Per group: the header, each token's (position, table), the runs' block tables; and where
  // each run's keys and values go, in pieces of consecutive cells.
  const int n_groups = pool_->n_groups();
  d.info.assign(size_t(n_groups), {});
  d.layouts.assign(size_t(n_groups), {});
  for (int gi = 0; gi < n_groups; ++gi) {
    const int64_t slots = pool_->group(gi).slots, block = pool_->block();
    std::vector<int32_t>& info = d.info[size_t(gi)];
    info.assign(size_t(kPagedHeader + 2 * T), 0);
    info[0] = int32_t(slots);
    info[1] = int32_t(block);
    ForwardInputs::KvLayout& L = d.layouts[size_t(gi)];
    int32_t first = 0;
    for (const PassRun& r : runs) {
      if (size_t(gi) >= r.tables.size())
        throw BackendError(fmt::format("a pass names {} groups of layers; the model has {}",
                                       r.tables.size(), n_groups));
      const std::vector<int32_t>& table = r.tables[size_t(gi)];
      const int32_t at = int32_t(info.size());
      info.insert(info.end(), table.begin(), table.end());
      const int64_t n_past = r.n_past, end = n_past + int64_t(r.tokens.size());
      for (int64_t j = n_past; j < end;) {
        const int64_t slot = j % slots;
        const int64_t stop = std::min({end, j + slots - slot, j + block - slot % block});
        L.writes.push_back({first + int32_t(j - n_past), int32_t(stop - j),
                            int64_t(table.at(size_t(slot / block))) * block + slot % block});
        j = stop;
      }
      for (size_t i = 0; i < r.tokens.size(); ++i) {
        const size_t t = size_t(first) + i;
        info[size_t(kPagedHeader) + 2 * t] = int32_t(n_past) + int32_t(i);
        info[size_t(kPagedHeader) + 2 * t + 1] = at;
      }
      first += int32_t(r.tokens.size());
    }
  }
  ForwardInputs in;
  in.tokens = g.leaf("tokens", DType::I32, {T, 1, 1, 1}, d.tokens.data());
  in.positions = g.leaf("positions", DType::I32, {T, 1, 1, 1}, d.pos.data());
  in.n_past = 0;
  in.n_tokens = T;
  in.n_ctx = n_ctx_;
  in.all_logits = all_logits;
  if (runs.size() > 1 && !d.rows.empty())
    in.out_rows = g.leaf("out_rows", DType::I32, {int64_t(d.rows.size()), 1, 1, 1}, d.rows.data());
  if (!d.hidden_rows.empty()) {
    in.hidden_rows = g.leaf("hidden_rows", DType::I32, {int64_t(d.hidden_rows.size()), 1, 1, 1},
                            d.hidden_rows.data());
    in.hidden = hidden;
    in.no_logits = d.rows.empty();
  }
  for (int gi = 0; gi < n_groups; ++gi)
    d.layouts[size_t(gi)].token_info =
        g.leaf(fmt::format("kv_info.{}", gi), DType::I32,
               {int64_t(d.info[size_t(gi)].size()), 1, 1, 1}, d.info[size_t(gi)].data());
  for (int64_t l = 0; l < p.n_layer; ++l) {
    const int gi = kv_groups_.layer_group[size_t(l)];
    const int64_t cells = pool_->group(gi).n_blocks * pool_->block();
    const auto address = [](const std::unique_ptr<Buffer>& b) {
      return b ? b->address() : nullptr;  // null: another rank's layer
    };
    in.k_cache.push_back(g.leaf(fmt::format("cache_k.{}", l), DType::F16,
                                {p.head_dim, p.n_head_kv, cells, 1}, address(k_cache_[size_t(l)])));
    in.v_cache.push_back(g.leaf(fmt::format("cache_v.{}", l), DType::F16,
                                {p.head_dim, p.n_head_kv, cells, 1}, address(v_cache_[size_t(l)])));
    in.kv_layout.push_back(&d.layouts[size_t(gi)]);
  }
  return model_->model->build_graph(g, in);
}

std::vector<float> ModelContext::forward(std::span<const SeqTokens> runs, bool all_logits,
                                         std::vector<float>* hidden) {
  if (cluster_) {
    std::unique_ptr<RankPass> p = start_pass(describe(runs, all_logits));
    return finish_pass(*p, hidden);
  }
  PassData d;
  Graph g;
  Tensor* states = nullptr;
  Tensor* logits = build_pass(g, describe(runs, all_logits), d, &states);
  std::vector<float> out;
  if (states && states == logits) {  // hidden runs only
    scheduler_->run(g, {states});
  } else {
    scheduler_->run(g,
                    states ? std::vector<Tensor*>{logits, states} : std::vector<Tensor*>{logits});
    out.resize(size_t(logits->n_elements()));
    scheduler_->read(*logits, out.data());
  }
  if (states) {
    if (!hidden) throw std::logic_error("a pass with hidden runs needs somewhere to put them");
    hidden->resize(size_t(states->n_elements()));
    scheduler_->read(*states, hidden->data());
  }
  for (const SeqTokens& r : runs) n_past_[size_t(r.seq)] += int(r.tokens.size());
  return out;
}

int ModelContext::rank_of(const Tensor& n) const {
  const int units = int(plan_.unit_rank.size());
  return plan_.unit_rank[size_t(std::clamp(n.layer + 1, 0, units - 1))];
}

std::vector<ModelContext::Crossing> ModelContext::cut_for_rank(Graph& g) const {
  std::vector<Crossing> crossings;
  std::vector<bool> keep(g.all().size(), false);
  for (Tensor* n : g.nodes()) {
    const int rn = rank_of(*n);
    keep[size_t(n->index)] = rn == plan_.rank;
    for (Tensor* src : n->src)
      if (src && src->op != OpKind::None && rank_of(*src) != rn)
        crossings.push_back({src, rank_of(*src), rn});
  }
  std::sort(crossings.begin(), crossings.end(), [](const Crossing& a, const Crossing& b) {
    return a.t->index != b.t->index ? a.t->index < b.t->index : a.to < b.to;
  });
  crossings.erase(
      std::unique(crossings.begin(), crossings.end(),
                  [](const Crossing& a, const Crossing& b) { return a.t == b.t && a.to == b.to; }),
      crossings.end());
  g.keep_nodes(keep);
  return crossings;
}

// One rank's share of a pass: the graph (its leaves point into d and the received bytes), what it
// sends while it runs on, and on rank 0 the outputs.
struct ModelContext::RankPass {
  Graph g;
  PassData d;
  Tensor* logits = nullptr;  // null when every run is hidden
  Tensor* states = nullptr;
  std::vector<std::vector<uint8_t>> received, sent;
  std::vector<cluster::Cluster::Pending> sending;
  std::vector<float> logits_out, states_out;  // rank 0: read here when this rank made them
};

std::unique_ptr<ModelContext::RankPass> ModelContext::start_pass(const PassDesc& desc) {
  cluster::Cluster& c = *cluster_;
  const int me = c.rank();
  if (me == 0) {
    tell_workers(c, encode_pass(desc));
    for (const PassRun& r : desc.runs) n_past_[size_t(r.seq)] += int(r.tokens.size());
  }
  auto p = std::make_unique<RankPass>();
  Graph& g = p->g;
  p->logits = build_pass(g, desc, p->d, &p->states);
  if (p->states && p->states == p->logits) p->logits = nullptr;
  const std::vector<Crossing> crossings = cut_for_rank(g);
  std::vector<Tensor*> outputs;
  for (const Crossing& x : crossings) {
    if (x.to == me && x.t->op != OpKind::None) {
      p->received.emplace_back(x.t->n_bytes());
      c.set_waiting_for(fmt::format("rank {} ({})", x.from, plan_.rank_units_text(x.from)));
      c.recv(x.from, cluster::kActivation, p->received.back().data(), x.t->n_bytes());
      g.make_leaf(x.t, p->received.back().data());
    } else if (x.from == me) {
      outputs.push_back(x.t);
    }
  }
  c.set_waiting_for("");
  for (Tensor* t : {p->logits, p->states})
    if (t && rank_of(*t) == me) outputs.push_back(t);
  if (POLYSTACK_TEST_MPI_EXIT_RANK == me) std::raise(SIGKILL);
  scheduler_->run(g, outputs);
  for (const Crossing& x : crossings)
    if (x.from == me) {
      p->sent.emplace_back(x.t->n_bytes());
      scheduler_->read(*x.t, p->sent.back().data());
      p->sending.push_back(
          c.isend(x.to, cluster::kActivation, p->sent.back().data(), p->sent.back().size()));
    }
  // The outputs: read here on rank 0, sent there from elsewhere.
  for (Tensor* t : {p->logits, p->states}) {
    if (!t || rank_of(*t) != me) continue;
    std::vector<float>& out = t == p->logits ? p->logits_out : p->states_out;
    out.resize(size_t(t->n_elements()));
    scheduler_->read(*t, out.data());
    if (me != 0)
      p->sending.push_back(c.isend(0, cluster::kOutput, out.data(), out.size() * sizeof(float)));
  }
  return p;
}

std::vector<float> ModelContext::finish_pass(RankPass& p, std::vector<float>* hidden) {
  cluster::Cluster& c = *cluster_;
  for (cluster::Cluster::Pending& s : p.sending) c.wait(s);
  p.sending.clear();
  // The outputs are rank 0's: a worker's only went there.
  if (c.rank() != 0) return {};
  for (Tensor* t : {p.logits, p.states}) {
    if (!t || rank_of(*t) == 0) continue;
    std::vector<float>& out = t == p.logits ? p.logits_out : p.states_out;
    out.resize(size_t(t->n_elements()));
    const int from = rank_of(*t);
    c.set_waiting_for(fmt::format("rank {} ({})", from, plan_.rank_units_text(from)));
    c.recv(from, cluster::kOutput, out.data(), out.size() * sizeof(float));
  }
  c.set_waiting_for("");
  if (p.states) {
    if (!hidden) throw std::logic_error("a pass with hidden runs needs somewhere to put them");
    *hidden = std::move(p.states_out);
  }
  return std::move(p.logits_out);
}

void ModelContext::finish_passes() {
  if (last_pass_) finish_pass(*last_pass_, nullptr);
  last_pass_.reset();
}

std::vector<ModelContext::RankMemory> ModelContext::rank_memory() const {
  std::vector<RankMemory> out;
  if (!cluster_ || cluster_->rank() != 0) return out;
  out.push_back({resident_bytes(), resident_bytes(true)});
  const std::vector<uint8_t> ask = command_message(PipelineCommand::Memory);
  for (int r = 1; r < cluster_->size(); ++r) {
    cluster_->send(r, cluster::kCommand, ask);
    const nlohmann::json j = recv_reply(*cluster_, r);
    out.push_back({j.value("rss", uint64_t(0)), j.value("peak", uint64_t(0))});
  }
  return out;
}

void ModelContext::run_pass(const PassDesc& desc) {
  std::unique_ptr<RankPass> p = start_pass(desc);
  // The last pass's sends have had this pass's time to go.
  finish_passes();
  last_pass_ = std::move(p);
}

}  // namespace ps
