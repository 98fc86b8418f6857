#include "engine/session.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "backend/registry.h"
#include "core/error.h"
#include "gguf/gguf.h"

namespace ps {

std::shared_ptr<LoadedModel> LoadedModel::load(const std::string& path, bool with_tokenizer) {
  const auto t0 = std::chrono::steady_clock::now();
  auto m = std::make_shared<LoadedModel>();
  m->file = gguf::File::open(path);
  m->model = Model::load(*m->file);
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

ChoiceOptions device_choice_options(const LoadedModel& model, const SessionOptions& opts) {
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

Session::Session(std::shared_ptr<const LoadedModel> model, const SessionOptions& opts)
    : model_(std::move(model)) {
  const ModelParams& p = model_->model->params();
  if (opts.n_ctx < 0) throw UsageError(fmt::format("context size {} is negative", opts.n_ctx));
  if (opts.n_batch <= 0)
    throw UsageError(fmt::format("batch size {} must be positive", opts.n_batch));
  n_ctx_ = opts.n_ctx > 0 ? opts.n_ctx : int(std::min<int64_t>(p.n_ctx_train, 4096));
  if (n_ctx_ > (1 << 20)) throw UsageError(fmt::format("context size {} is too large", n_ctx_));
  n_batch_ = opts.n_batch;

  Registry& reg = Registry::global();
  DeviceOptions dopts;
  dopts.n_threads = opts.n_threads;
  choice_ = choose_device(reg, device_choice_options(*model_, opts));
  device_ = reg.open(choice_.device_id, dopts);
  if (const DeviceInfo& di = device_->info(); !di.unusable.empty())
    throw BackendError(fmt::format("{} cannot run models: {}", di.id, di.unusable));
  std::vector<Device*> devices{device_.get()};
  // Beside a GPU, the CPU: it runs the layers -ngl leaves off the GPU.
  std::vector<int> layer_devices;  // [input, layer 0 .. n - 1, output]
  if (device_->info().api != Api::Cpu) {
    cpu_ = reg.open("cpu", dopts);
    devices.push_back(cpu_.get());
    const int64_t L = p.n_layer;
    const int64_t ngl = opts.n_gpu_layers < 0 ? L + 1 : std::min<int64_t>(opts.n_gpu_layers, L + 1);
    if (ngl <= L) {
      layer_devices.assign(size_t(L + 2), 1);
      for (int64_t l = L - ngl; l < L; ++l) layer_devices[size_t(l + 1)] = 0;
      const auto range = [](int64_t a, int64_t b) {
        return a == b ? fmt::format("layer {}", a) : fmt::format("layers {}-{}", a, b);
      };
      if (ngl == 0)
        split_ = "every layer on cpu (-ngl 0)";
      else if (ngl == L)
        split_ = fmt::format("{} on {}, input + output on cpu (-ngl {})", range(0, L - 1),
                             device_->info().id, ngl);
      else
        split_ = fmt::format("{} on {}, input + {} + output on cpu (-ngl {})",
                             range(L - ngl, L - 1), device_->info().id, range(0, L - ngl - 1), ngl);
    }
  }
  scheduler_ = std::make_unique<Scheduler>(devices, opts.strict, layer_devices);

  // Each layer's KV cache on the device that runs the layer. Sliding-window layers keep a ring
  // of their window plus one batch (kv_slots).
  for (int64_t l = 0; l < p.n_layer; ++l) {
    Device& dev = layer_devices.empty() ? *device_ : *devices[size_t(layer_devices[size_t(l + 1)])];
    const size_t layer_bytes =
        size_t(p.head_dim * p.n_head_kv) * 2 * size_t(kv_slots(p, l, n_ctx_, n_batch_));
    k_cache_.push_back(dev.alloc(layer_bytes));
    v_cache_.push_back(dev.alloc(layer_bytes));
  }
  // Weights reach a device with its own memory now rather than with the first token (devices
  // that read host memory use them where they are: no graph to build).
  if (!device_->reads_host_memory()) {
    const int32_t first = 0;
    Graph g;
    std::vector<int32_t> pos;
    build(g, std::span<const int32_t>(&first, 1), pos, false);
    scheduler_->upload_constants(g);
  }
}

Session::~Session() = default;

size_t Session::kv_cache_bytes() const {
  size_t n = 0;
  for (const auto& b : k_cache_) n += b->size();
  for (const auto& b : v_cache_) n += b->size();
  return n;
}

std::vector<float> Session::eval(std::span<const int32_t> tokens, bool all_logits) {
  if (tokens.empty()) throw UsageError("nothing to evaluate: no tokens");
  if (n_past_ + int64_t(tokens.size()) > n_ctx_)
    throw UsageError(
        fmt::format("{} tokens do not fit in the context: {} of {} positions are "
                    "used (raise -c)",
                    tokens.size(), n_past_, n_ctx_));
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
      forward(tokens.subspan(i, n), all_logits, out);
    else {
      std::vector<float> discard;
      forward(tokens.subspan(i, n), false, discard);
    }
  }
  return out;
}

Tensor* Session::build(Graph& g, std::span<const int32_t> tokens, std::vector<int32_t>& pos,
                       bool all_logits) const {
  const ModelParams& p = model_->model->params();
  const int32_t T = int32_t(tokens.size());
  pos.resize(tokens.size());
  for (int32_t i = 0; i < T; ++i) pos[size_t(i)] = n_past_ + i;
  ForwardInputs in;
  in.tokens = g.leaf("tokens", DType::I32, {T, 1, 1, 1}, const_cast<int32_t*>(tokens.data()));
  in.positions = g.leaf("positions", DType::I32, {T, 1, 1, 1}, pos.data());
  in.n_past = n_past_;
  in.n_tokens = T;
  in.all_logits = all_logits;
  for (int64_t l = 0; l < p.n_layer; ++l) {
    const int64_t slots = kv_slots(p, l, n_ctx_, n_batch_);
    in.k_cache.push_back(g.leaf(fmt::format("cache_k.{}", l), DType::F16,
                                {p.head_dim, p.n_head_kv, slots, 1},
                                k_cache_[size_t(l)]->address()));
    in.v_cache.push_back(g.leaf(fmt::format("cache_v.{}", l), DType::F16,
                                {p.head_dim, p.n_head_kv, slots, 1},
                                v_cache_[size_t(l)]->address()));
  }
  return model_->model->build_graph(g, in);
}

void Session::forward(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& out) {
  Graph g;
  std::vector<int32_t> pos;
  Tensor* logits = build(g, tokens, pos, all_logits);
  scheduler_->run(g, {logits});
  const size_t n = size_t(logits->n_elements());
  const size_t at = out.size();
  out.resize(at + n);
  scheduler_->read(*logits, out.data() + at);
  n_past_ += int64_t(tokens.size());
}

}  // namespace ps
