#include "engine/model_context.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "backend/registry.h"
#include "core/error.h"
#include "gguf/gguf.h"

namespace ps {

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
  if (opts.n_batch <= 0)
    throw UsageError(fmt::format("batch size {} must be positive", opts.n_batch));
  if (opts.n_seq <= 0 || opts.n_seq > 1024)
    throw UsageError(fmt::format("{} sequences: 1 to 1024 are possible", opts.n_seq));
  ContextShape s;
  s.n_ctx = opts.n_ctx > 0 ? opts.n_ctx : int(std::min<int64_t>(p.n_ctx_train, 4096));
  if (s.n_ctx > (1 << 20)) throw UsageError(fmt::format("context size {} is too large", s.n_ctx));
  if (s.n_ctx < 1) throw ModelError(fmt::format("context size {} is not positive", s.n_ctx));
  s.n_batch = opts.n_batch;
  s.n_seq = opts.n_seq;
  return s;
}

OpenedDevices open_devices(const LoadedModel& model, const ContextOptions& opts) {
  Registry& reg = Registry::global();
  DeviceOptions dopts;
  dopts.n_threads = opts.n_threads;
  dopts.batch_invariant = opts.deterministic;
  OpenedDevices out;
  out.choice = choose_device(reg, device_choice_options(model, opts));
  ChosenDevice& choice = out.choice;
  const bool on_gpu = choice.device_id != "cpu";
  if (!on_gpu && (opts.main_gpu >= 0 || opts.split_layers || !opts.tensor_split.empty()))
    throw UsageError(fmt::format("{} needs a GPU, but the model runs on the CPU ({})",
                                 opts.main_gpu >= 0  ? "--main-gpu"
                                 : opts.split_layers ? "--split-mode layer"
                                                     : "--tensor-split",
                                 choice.reason));
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
                          const std::vector<Device*>& devices, const ContextOptions& opts) {
  uint64_t compute = 0;
  const std::vector<UnitCost> units =
      model_unit_costs(model, shape.n_ctx, shape.n_batch, *devices.back(), compute, shape.n_seq);
  std::vector<PlacementDevice> pdevs;
  for (const Device* d : devices) pdevs.push_back(placement_device(d->info()));
  LayerRequest req;
  req.mode = opts.n_gpu_layers == ContextOptions::kNglAuto  ? LayerRequest::Mode::Auto
             : opts.n_gpu_layers == ContextOptions::kNglAll ? LayerRequest::Mode::All
                                                            : LayerRequest::Mode::Count;
  req.count = std::max(opts.n_gpu_layers, 0);
  req.tensor_split = opts.tensor_split;
  req.strict = opts.strict;
  return plan_placement(units, compute, pdevs, req);
}

ModelContext::ModelContext(std::shared_ptr<const LoadedModel> model, const ContextOptions& opts)
    : model_(std::move(model)) {
  const ContextShape shape = resolve_shape(model_->model->params(), opts);
  n_ctx_ = shape.n_ctx;
  n_batch_ = shape.n_batch;
  OpenedDevices opened = open_devices(*model_, opts);
  choice_ = std::move(opened.choice);
  devices_ = std::move(opened.devices);
  device_ = devices_[opened.main].get();
  std::vector<Device*> devices;
  for (const auto& d : devices_) devices.push_back(d.get());
  plan_ = plan_layers(*model_, shape, devices, opts);
  scheduler_ = std::make_unique<Scheduler>(devices, opts.strict, plan_.unit_device);
  allocate_kv(opts);
  upload_weights();
}

void ModelContext::allocate_kv(const ContextOptions& opts) {
  const ModelParams& p = model_->model->params();
  // Sliding-window layers keep a ring of their window plus one batch (kv_slots).
  n_past_.assign(size_t(opts.n_seq), 0);
  live_.assign(size_t(opts.n_seq), false);
  for (int64_t l = 0; l < p.n_layer; ++l) {
    Device& dev = *devices_[size_t(plan_.unit_device[size_t(l + 1)])];
    const size_t plane = kv_plane_bytes(p, l, n_ctx_, n_batch_);
    k_cache_.push_back(dev.alloc(plane * size_t(opts.n_seq)));
    v_cache_.push_back(dev.alloc(plane * size_t(opts.n_seq)));
  }
  // Tokens of several sequences go through one forward pass where every device that runs a
  // layer has attention over per-token positions; elsewhere one pass per sequence.
  batched_ = true;
  Graph probe;
  const int64_t slots = kv_slots(p, 0, n_ctx_, n_batch_);
  Tensor* q = probe.leaf("q", DType::F32, {p.head_dim, p.n_head, 1, 1});
  Tensor* kc = probe.leaf("k", DType::F16, {p.head_dim, p.n_head_kv, slots, opts.n_seq});
  Tensor* vc = probe.leaf("v", DType::F16, {p.head_dim, p.n_head_kv, slots, opts.n_seq});
  Tensor* info = probe.leaf("info", DType::I32, {2, 1, 1, 1});
  Tensor* att = probe.attention_tokens(q, kc, vc, info, 1.0f);
  for (size_t d = 0; d < devices_.size(); ++d)
    if (plan_.need[d] > 0 && !devices_[d]->supports(*att)) batched_ = false;
}

void ModelContext::upload_weights() {
  const int32_t first = 0;
  Graph g;
  std::vector<int32_t> pos;
  build(g, 0, std::span<const int32_t>(&first, 1), pos, false, 0);
  scheduler_->upload_constants(g);
  plan_.fallbacks = scheduler_->report().fallbacks;
}

int ModelContext::acquire_sequence() {
  for (size_t i = 0; i < live_.size(); ++i)
    if (!live_[i]) {
      live_[i] = true;
      return int(i);
    }
  return -1;
}

void ModelContext::release_sequence(int seq) { live_.at(size_t(seq)) = false; }

int ModelContext::live_sequences() const {
  return int(std::count(live_.begin(), live_.end(), true));
}

std::vector<const Device*> ModelContext::devices() const {
  std::vector<const Device*> out;
  for (const auto& d : devices_) out.push_back(d.get());
  return out;
}

ModelContext::~ModelContext() = default;

size_t ModelContext::kv_cache_bytes() const {
  size_t n = 0;
  for (const auto& b : k_cache_) n += b->size();
  for (const auto& b : v_cache_) n += b->size();
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
  return true;
}

std::vector<float> ModelContext::eval(std::span<const int32_t> tokens, bool all_logits, int seq) {
  if (tokens.empty()) throw UsageError("nothing to evaluate: no tokens");
  if (seq < 0 || seq >= n_seq())
    throw UsageError(fmt::format("sequence {} does not exist ({} sequences)", seq, n_seq()));
  const int n_past = n_past_[size_t(seq)];
  if (n_past + int64_t(tokens.size()) > n_ctx_)
    throw UsageError(
        fmt::format("{} tokens do not fit in the context: {} of {} positions are "
                    "used (raise -c)",
                    tokens.size(), n_past, n_ctx_));
  const int64_t n_vocab = model_->model->params().n_vocab;
  for (int32_t t : tokens)
    if (t < 0 || t >= n_vocab)
      throw UsageError(
          fmt::format("token id {} is outside the vocabulary (0..{})", t, n_vocab - 1));
  std::vector<float> out;
  if (all_logits) out.reserve(tokens.size() * size_t(n_vocab));
  for (size_t i = 0; i < tokens.size(); i += size_t(n_batch_)) {
    const size_t n = std::min(tokens.size() - i, size_t(n_batch_));
    const bool last = i + n == tokens.size();
    if (all_logits || last)
      forward(seq, tokens.subspan(i, n), all_logits, out);
    else {
      std::vector<float> discard;
      forward(seq, tokens.subspan(i, n), false, discard);
    }
  }
  return out;
}

namespace {

// Where the forward graph's caches are: per layer one buffer of n_planes planes (empty: none,
// a graph to measure, not to run), and the plane the graph sees (-1: all of them).
struct CacheView {
  const std::vector<std::unique_ptr<Buffer>>* k = nullptr;
  const std::vector<std::unique_ptr<Buffer>>* v = nullptr;
  int n_planes = 1;
  int plane = 0;
};

// The forward graph of `tokens` at positions n_past.. (written to pos, which the graph reads).
// With `runs`, the tokens are several sequences' (ForwardInputs::seqs) and `info` and `rows`
// receive the per-token positions and planes and the rows whose logits come out.
Tensor* build_forward(const LoadedModel& m, Graph& g, std::span<const int32_t> tokens,
                      std::vector<int32_t>& pos, bool all_logits, int n_past, int n_ctx,
                      int n_batch, const CacheView& cache,
                      const std::vector<ForwardInputs::SeqRun>& runs = {},
                      std::vector<int32_t>* info = nullptr, std::vector<int32_t>* rows = nullptr) {
  const ModelParams& p = m.model->params();
  const int32_t T = int32_t(tokens.size());
  pos.resize(tokens.size());
  ForwardInputs in;
  if (runs.empty()) {
    for (int32_t i = 0; i < T; ++i) pos[size_t(i)] = n_past + i;
  } else {
    info->assign(size_t(2 * T), 0);
    rows->clear();
    for (const auto& r : runs) {
      for (int32_t i = 0; i < r.n_tokens; ++i) {
        const size_t t = size_t(r.first_token + i);
        pos[t] = r.n_past + i;
        (*info)[2 * t] = r.n_past + i;
        (*info)[2 * t + 1] = r.plane;
      }
      rows->push_back(r.first_token + r.n_tokens - 1);
    }
    in.seqs = runs;
    in.token_info = g.leaf("token_info", DType::I32, {2, T, 1, 1}, info->data());
    in.out_rows = g.leaf("out_rows", DType::I32, {int64_t(rows->size()), 1, 1, 1}, rows->data());
  }
  in.tokens = g.leaf("tokens", DType::I32, {T, 1, 1, 1}, const_cast<int32_t*>(tokens.data()));
  in.positions = g.leaf("positions", DType::I32, {T, 1, 1, 1}, pos.data());
  in.n_past = n_past;
  in.n_tokens = T;
  in.n_ctx = n_ctx;
  in.all_logits = all_logits;
  const int64_t planes = cache.plane < 0 ? cache.n_planes : 1;
  for (int64_t l = 0; l < p.n_layer; ++l) {
    const int64_t slots = kv_slots(p, l, n_ctx, n_batch);
    const size_t plane_bytes = kv_plane_bytes(p, l, n_ctx, n_batch);
    const auto at = [&](const std::vector<std::unique_ptr<Buffer>>* b) -> void* {
      if (!b) return nullptr;
      return static_cast<char*>((*b)[size_t(l)]->address()) +
             size_t(std::max(cache.plane, 0)) * plane_bytes;
    };
    in.k_cache.push_back(g.leaf(fmt::format("cache_k.{}", l), DType::F16,
                                {p.head_dim, p.n_head_kv, slots, planes}, at(cache.k)));
    in.v_cache.push_back(g.leaf(fmt::format("cache_v.{}", l), DType::F16,
                                {p.head_dim, p.n_head_kv, slots, planes}, at(cache.v)));
  }
  return m.model->build_graph(g, in);
}

}  // namespace

std::vector<UnitCost> model_unit_costs(const LoadedModel& m, int n_ctx, int n_batch, Device& cpu,
                                       uint64_t& compute, int n_seq) {
  const ModelParams& p = m.model->params();
  const int T = std::min(n_batch, n_ctx);
  const std::vector<int32_t> tokens(size_t(T), 0);
  Graph g;
  std::vector<int32_t> pos;
  Tensor* logits = build_forward(m, g, tokens, pos, false, n_ctx - T, n_ctx, n_batch, {});
  const int n_units = int(p.n_layer) + 2;
  std::vector<UnitCost> units(static_cast<size_t>(n_units));
  // Each weight counts for every unit whose nodes read it (a view for the tensor it views).
  std::vector<std::set<const Tensor*>> read(static_cast<size_t>(n_units));
  for (const Tensor* n : g.nodes())
    for (const Tensor* s : n->src) {
      while (s && s->op == OpKind::View) s = s->src[0];
      if (s && s->op == OpKind::None && s->constant)
        read[size_t(std::clamp(n->layer + 1, 0, n_units - 1))].insert(s);
    }
  for (int u = 0; u < n_units; ++u)
    for (const Tensor* w : read[size_t(u)]) {
      units[size_t(u)].weights += w->n_bytes();
      if (u == 0 && read[size_t(n_units - 1)].count(w)) units[0].shared_with_output += w->n_bytes();
    }
  for (int64_t l = 0; l < p.n_layer; ++l)
    units[size_t(l + 1)].kv =
        uint64_t(n_seq) * 2 * kv_plane_bytes(p, l, n_ctx, n_batch);  // K and V
  // The compute buffer: the peak of the intermediate tensors of a prompt batch at the end of
  // the context, as the scheduler would plan it (the same on every device).
  Scheduler probe({&cpu}, false);
  compute = probe.measure(g, {logits})[0];
  return units;
}

Tensor* ModelContext::build(Graph& g, int seq, std::span<const int32_t> tokens,
                            std::vector<int32_t>& pos, bool all_logits, int n_past) const {
  return build_forward(*model_, g, tokens, pos, all_logits, n_past, n_ctx_, n_batch_,
                       {&k_cache_, &v_cache_, n_seq(), seq});
}

std::vector<std::vector<float>> ModelContext::eval_batch(std::span<const SeqTokens> runs) {
  if (runs.empty()) return {};
  const int64_t n_vocab = model_->model->params().n_vocab;
  std::vector<bool> seen(size_t(n_seq()), false);
  size_t total = 0;
  for (const SeqTokens& r : runs) {
    if (r.seq < 0 || r.seq >= n_seq())
      throw UsageError(fmt::format("sequence {} does not exist ({} sequences)", r.seq, n_seq()));
    if (seen[size_t(r.seq)])
      throw UsageError(fmt::format("sequence {} appears twice in one batch", r.seq));
    seen[size_t(r.seq)] = true;
    if (r.tokens.empty()) throw UsageError("nothing to evaluate: no tokens");
    if (n_past_[size_t(r.seq)] + int64_t(r.tokens.size()) > n_ctx_)
      throw UsageError(
          fmt::format("{} tokens do not fit in sequence {}'s context: {} of {} "
                      "positions are used",
                      r.tokens.size(), r.seq, n_past_[size_t(r.seq)], n_ctx_));
    for (int32_t t : r.tokens)
      if (t < 0 || t >= n_vocab)
        throw UsageError(
            fmt::format("token id {} is outside the vocabulary (0..{})", t, n_vocab - 1));
    total += r.tokens.size();
  }
  std::vector<std::vector<float>> out;
  if (!batched_ || runs.size() == 1 || total > size_t(n_batch_)) {
    for (const SeqTokens& r : runs) out.push_back(eval(r.tokens, false, r.seq));
    return out;
  }
  std::vector<int32_t> tokens;
  std::vector<ForwardInputs::SeqRun> seqs;
  for (const SeqTokens& r : runs) {
    seqs.push_back(
        {int32_t(tokens.size()), int32_t(r.tokens.size()), n_past_[size_t(r.seq)], r.seq});
    tokens.insert(tokens.end(), r.tokens.begin(), r.tokens.end());
  }
  Graph g;
  std::vector<int32_t> pos, info, rows;
  Tensor* logits = build_forward(*model_, g, tokens, pos, false, 0, n_ctx_, n_batch_,
                                 {&k_cache_, &v_cache_, n_seq(), -1}, seqs, &info, &rows);
  scheduler_->run(g, {logits});
  std::vector<float> all(size_t(logits->n_elements()));
  scheduler_->read(*logits, all.data());
  for (size_t i = 0; i < runs.size(); ++i) {
    out.emplace_back(all.begin() + ptrdiff_t(i * size_t(n_vocab)),
                     all.begin() + ptrdiff_t((i + 1) * size_t(n_vocab)));
    n_past_[size_t(runs[i].seq)] += int(runs[i].tokens.size());
  }
  return out;
}

void ModelContext::forward(int seq, std::span<const int32_t> tokens, bool all_logits,
                           std::vector<float>& out) {
  Graph g;
  std::vector<int32_t> pos;
  Tensor* logits = build(g, seq, tokens, pos, all_logits, n_past_[size_t(seq)]);
  scheduler_->run(g, {logits});
  const size_t n = size_t(logits->n_elements());
  const size_t at = out.size();
  out.resize(at + n);
  scheduler_->read(*logits, out.data() + at);
  n_past_[size_t(seq)] += int(tokens.size());
}

}  // namespace ps
