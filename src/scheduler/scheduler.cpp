#include "scheduler/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include "core/error.h"

namespace ps {
namespace {

constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The tensor whose bytes a node uses: views and copies alias another tensor's memory.
Tensor* storage_root(Tensor* t) {
  while (t->op == OpKind::View || t->op == OpKind::Copy)
    t = t->op == OpKind::View ? t->src[0] : t->src[1];
  return t;
}

// First-fit allocator over offsets in a virtual arena; tracks the peak. The free blocks, in
// address order, are few (a forward pass frees most of what it allocates soon after), so a
// sorted vector serves them faster than a tree.
class OffsetAllocator {
 public:
  size_t alloc(size_t n) {
    n = align_up(n);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->size >= n) {
        const size_t off = it->off;
        it->off += n;
        it->size -= n;
        if (it->size == 0) free_.erase(it);
        return off;
      }
    }
    // Grow at the end, merging with a free block that touches the end.
    size_t off = end_;
    if (!free_.empty() && free_.back().off + free_.back().size == end_) {
      off = free_.back().off;
      free_.pop_back();
    }
    end_ = std::max(end_, off + n);
    return off;
  }
  void release(size_t off, size_t n) {
    n = align_up(n);
    auto it = std::lower_bound(free_.begin(), free_.end(), off,
                               [](const Block& b, size_t o) { return b.off < o; });
    const bool joins_prev = it != free_.begin() && std::prev(it)->off + std::prev(it)->size == off;
    const bool joins_next = it != free_.end() && off + n == it->off;
    if (joins_prev && joins_next) {
      std::prev(it)->size += n + it->size;
      free_.erase(it);
    } else if (joins_prev) {
      std::prev(it)->size += n;
    } else if (joins_next) {
      it->off = off;
      it->size += n;
    } else {
      free_.insert(it, Block{off, n});
    }
  }
  size_t peak() const { return end_; }

 private:
  struct Block {
    size_t off, size;
  };
  std::vector<Block> free_;
  size_t end_ = 0;
};

}  // namespace

Scheduler::Scheduler(std::vector<Device*> devices, bool strict, std::vector<int> layer_devices,
                     std::vector<int> expert_devices)
    : devices_(std::move(devices)),
      strict_(strict),
      layer_devices_(std::move(layer_devices)),
      expert_devices_(std::move(expert_devices)) {
  if (devices_.empty()) throw BackendError("scheduler: no device to run on");
  if (!expert_devices_.empty() && expert_devices_.size() != layer_devices_.size())
    throw BackendError("scheduler: the experts' plan and the layers' differ in length");
  for (int d : expert_devices_)
    if (d < 0 || size_t(d) >= devices_.size())
      throw BackendError(
          fmt::format("scheduler: experts' plan names device {} of {}", d, devices_.size()));
  for (int d : layer_devices_)
    if (d < 0 || size_t(d) >= devices_.size())
      throw BackendError(
          fmt::format("scheduler: layer plan names device {} of {}", d, devices_.size()));
  per_.resize(devices_.size());
}

int Scheduler::planned_device(const Tensor& n) const {
  if (layer_devices_.empty()) return 0;
  const int at = std::clamp(n.layer + 1, 0, int(layer_devices_.size()) - 1);
  if (n.experts && !expert_devices_.empty()) return expert_devices_[size_t(at)];
  return layer_devices_[size_t(at)];
}

size_t Scheduler::arena_bytes() const {
  size_t n = 0;
  for (const PerDevice& p : per_) n += p.arena ? p.arena->size() : 0;
  return n;
}

Buffer& Scheduler::constant_copy(int d, const Tensor& leaf) {
  auto& buf = per_[size_t(d)].constants[leaf.data];
  if (!buf) {
    buf = devices_[size_t(d)]->alloc(leaf.n_bytes());
    buf->write(0, leaf.data, leaf.n_bytes());
  }
  return *buf;
}

std::pair<Buffer*, size_t> Scheduler::locate(int d, const void* addr, size_t n) const {
  const PerDevice& p = per_[size_t(d)];
  const auto inside = [&](Buffer* b) {
    if (!b) return false;
    const char* base = static_cast<const char*>(b->address());
    const char* at = static_cast<const char*>(addr);
    return at >= base && at + n <= base + b->size();
  };
  const auto offset = [&](Buffer* b) {
    return size_t(static_cast<const char*>(addr) - static_cast<const char*>(b->address()));
  };
  for (Buffer* b : {p.arena.get(), p.transfers.get()})
    if (inside(b)) return {b, offset(b)};
  for (const auto& b : p.run_inputs)
    if (inside(b.get())) return {b.get(), offset(b.get())};
  for (const auto& [k, b] : p.constants)
    if (inside(b.get())) return {b.get(), offset(b.get())};
  return {nullptr, 0};
}

void Scheduler::upload_constants(Graph& graph) {
  place(graph);
  for (const Tensor* n : graph.nodes()) {
    Device& dev = *devices_[size_t(n->device)];
    if (dev.reads_host_memory()) continue;
    for (const Tensor* s : n->src)
      if (s && s->op == OpKind::None && s->constant && !dev.owns(s->data))
        constant_copy(n->device, *s);
  }
}

void Scheduler::copy_in_leaves(Graph& graph) {
  for (PerDevice& p : per_) p.run_inputs.clear();
  // Nodes keep their own src pointers: a leaf read from host memory is replaced, in this
  // graph only, by a leaf in device memory (the model's weight tensors are never modified).
  std::map<std::pair<Tensor*, int>, Tensor*> replaced;
  for (Tensor* n : graph.nodes()) {
    const int d = n->device;
    Device& dev = *devices_[size_t(d)];
    for (Tensor*& s : n->src) {
      // Transfer targets (leaves with a device) are planned with the run.
      if (!s || s->op != OpKind::None || s->device >= 0) continue;
      for (size_t o = 0; o < devices_.size(); ++o)
        if (int(o) != d && !devices_[o]->reads_host_memory() && devices_[o]->owns(s->data))
          throw BackendError(fmt::format("{} on {} reads {}, which lies in {}'s memory",
                                         op_name(n->op), dev.info().id, s->name,
                                         devices_[o]->info().id));
      if (dev.reads_host_memory() || dev.owns(s->data)) continue;
      auto it = replaced.find({s, d});
      if (it == replaced.end()) {
        void* addr = nullptr;
        if (s->constant) {
          addr = constant_copy(d, *s).address();
        } else {
          auto& buf = per_[size_t(d)].run_inputs.emplace_back(dev.alloc(s->n_bytes()));
          buf->write(0, s->data, s->n_bytes());
          addr = buf->address();
        }
        Tensor* copy = graph.leaf(s->name, s->type, s->ne, addr);
        copy->nb = s->nb;
        copy->constant = s->constant;
        it = replaced.emplace(std::pair{s, d}, copy).first;
      }
      s = it->second;
    }
  }
}

void Scheduler::read(const Tensor& t, void* dst) const {
  const int d = t.device >= 0 ? t.device : 0;
  if (devices_[size_t(d)]->reads_host_memory()) {
    std::memcpy(dst, t.data, t.n_bytes());
    return;
  }
  auto [b, off] = locate(d, t.data, t.n_bytes());
  if (!b) throw BackendError(fmt::format("scheduler: {} is not an output of the last run", t.name));
  b->read(off, dst, t.n_bytes());
}

void Scheduler::place(Graph& graph) {
  report_.fallbacks.clear();
  std::set<std::string> seen;
  const auto& nodes = graph.nodes();
  for (Tensor* n : nodes) {
    if (n->op == OpKind::View) continue;
    int pref = planned_device(*n);
    // A copy writes into its destination's memory: it runs on the device that owns it.
    int owner = -1;
    if (n->op == OpKind::Copy) {
      const Tensor* root = storage_root(n->src[1]);
      for (size_t i = 0; i < devices_.size(); ++i)
        if (root->op == OpKind::None && !devices_[i]->reads_host_memory() &&
            devices_[i]->owns(root->data))
          owner = int(i);
      if (owner >= 0) pref = owner;
    }
    const std::string why = devices_[size_t(pref)]->unsupported_reason(*n);
    if (why.empty()) {
      n->device = pref;
      continue;
    }
    n->device = -1;
    // Elsewhere: the last device first (the CPU, which sessions put last).
    if (!strict_ && owner < 0)
      for (size_t i = devices_.size(); i-- > 0;)
        if (int(i) != pref && devices_[i]->supports(*n)) {
          n->device = int(i);
          break;
        }
    if (n->device < 0)
      throw BackendError(fmt::format("op {} ({}) cannot run on {}: {}{}", op_name(n->op), n->name,
                                     devices_[size_t(pref)]->info().id, why,
                                     strict_ ? " (--strict: no fallback)" : ""));
    const std::string line =
        fmt::format("{} ran on {} instead of {}: {}", op_name(n->op),
                    devices_[size_t(n->device)]->info().id, devices_[size_t(pref)]->info().id, why);
    if (seen.insert(line).second) report_.fallbacks.push_back(line);
  }
  // Views: where their bytes are, for views of nodes; for views of leaves, where their first
  // reader runs (the leaf is copied there, or lies there already).
  for (Tensor* n : nodes)
    if (n->op == OpKind::View) {
      const Tensor* root = storage_root(n);
      n->device = root->op != OpKind::None ? root->device : -2;
    }
  for (size_t i = nodes.size(); i-- > 0;)
    for (Tensor* s : nodes[i]->src)
      if (s && s->op == OpKind::View && storage_root(s)->op == OpKind::None)
        s->device = nodes[i]->device;
  for (Tensor* n : nodes)
    if (n->device < 0) n->device = planned_device(*n);
}

void Scheduler::insert_transfers(Graph& graph) {
  transfers_.clear();
  std::map<std::pair<Tensor*, int>, Tensor*> made;
  const std::vector<Tensor*> nodes = graph.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    Tensor* n = nodes[i];
    if (n->op == OpKind::View) continue;
    for (Tensor*& s : n->src) {
      if (!s || s->op == OpKind::None || s->device == n->device) continue;
      if (!s->is_contiguous())
        throw BackendError(fmt::format("{} cannot move from {} to {}: it is a strided view",
                                       s->name, devices_[size_t(s->device)]->info().id,
                                       devices_[size_t(n->device)]->info().id));
      auto it = made.find({s, n->device});
      if (it == made.end()) {
        Tensor* to =
            graph.leaf(s->name + "@" + devices_[size_t(n->device)]->info().id, s->type, s->ne);
        to->device = n->device;
        to->layer = n->layer;
        transfers_.push_back({s, to, i});
        it = made.emplace(std::pair{s, n->device}, to).first;
      }
      s = it->second;
    }
  }
}

std::vector<size_t> Scheduler::plan_offsets(Graph& graph, const std::vector<Tensor*>& outputs,
                                            std::vector<size_t>& offset) const {
  const auto& nodes = graph.nodes();
  const std::span<Tensor* const> all = graph.all();
  const auto index = [&](const Tensor* t) {
    if (t->index < 0 || size_t(t->index) >= all.size() || all[size_t(t->index)] != t)
      throw BackendError(fmt::format("scheduler: {} is not a tensor of this graph", t->name));
    return size_t(t->index);
  };
  // For each tensor the node after which its bytes are free (none: never read, freed at once;
  // an output: never freed), chained by node into lists (head, next).
  constexpr int32_t kNone = -1, kKeep = -2;
  std::vector<int32_t> last_use(all.size(), kNone);
  // Leaves (weights, inputs, caches) own their bytes: only nodes' roots are tracked.
  const auto node_root = [&](Tensor* t) -> Tensor* {
    Tensor* r = storage_root(t);
    return r->op == OpKind::None ? nullptr : r;
  };
  for (size_t i = 0; i < nodes.size(); ++i)
    for (Tensor* s : nodes[i]->src)
      if (Tensor* r = s ? node_root(s) : nullptr) last_use[index(r)] = int32_t(i);
  // A tensor another device reads is copied just before the run of nodes that holds its first
  // reader there: its bytes stay until that reader has run, whatever its own device computes
  // in between (two producers in a row for one consumer elsewhere would otherwise share bytes).
  for (const Transfer& t : transfers_)
    if (Tensor* r = node_root(t.from))
      if (last_use[index(r)] != kKeep)
        last_use[index(r)] = std::max(last_use[index(r)], int32_t(t.before));
  for (Tensor* o : outputs)
    if (Tensor* r = node_root(o)) last_use[index(r)] = kKeep;
  std::vector<int32_t> head(nodes.size(), kNone), next(all.size(), kNone);

  offset.assign(all.size(), 0);
  std::vector<OffsetAllocator> alloc(devices_.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    Tensor* n = nodes[i];
    if (n->op != OpKind::View && n->op != OpKind::Copy) {
      const size_t k = index(n);
      offset[k] = alloc[size_t(n->device)].alloc(n->n_bytes());
      if (last_use[k] != kKeep) {
        const size_t after = last_use[k] == kNone ? i : size_t(last_use[k]);
        next[k] = head[after];
        head[after] = int32_t(k);
      }
    }
    for (int32_t k = head[i]; k != kNone; k = next[size_t(k)]) {
      const Tensor* t = all[size_t(k)];
      alloc[size_t(t->device)].release(offset[size_t(k)], t->n_bytes());
    }
  }
  std::vector<size_t> peaks;
  for (const OffsetAllocator& a : alloc) peaks.push_back(a.peak());
  return peaks;
}

std::vector<size_t> Scheduler::measure(Graph& graph, const std::vector<Tensor*>& outputs) {
  place(graph);
  insert_transfers(graph);
  std::vector<size_t> offset;
  std::vector<size_t> peaks = plan_offsets(graph, outputs, offset);
  // The copies between devices: each in its own slot for the run.
  for (const Transfer& t : transfers_) peaks[size_t(t.to->device)] += align_up(t.to->n_bytes());
  return peaks;
}

void Scheduler::plan_memory(Graph& graph, const std::vector<Tensor*>& outputs) {
  const auto& nodes = graph.nodes();
  std::vector<size_t> offset;
  const std::vector<size_t> peaks = plan_offsets(graph, outputs, offset);
  std::vector<bool> used(devices_.size(), false);
  for (Tensor* n : nodes) used[size_t(n->device)] = true;
  for (size_t d = 0; d < devices_.size(); ++d) {
    if (!used[d]) continue;
    const size_t need = std::max<size_t>(peaks[d], kAlign);
    auto& arena = per_[d].arena;
    if (!arena || arena->size() < need) {
      arena.reset();
      arena = devices_[d]->alloc(need);
    }
  }
  // The copies between devices: each in its own slot for the run.
  std::vector<size_t> transfer_bytes(devices_.size(), 0);
  std::unordered_map<Tensor*, size_t> transfer_offset;
  for (const Transfer& t : transfers_) {
    transfer_offset[t.to] = transfer_bytes[size_t(t.to->device)];
    transfer_bytes[size_t(t.to->device)] += align_up(t.to->n_bytes());
  }
  for (size_t d = 0; d < devices_.size(); ++d) {
    auto& buf = per_[d].transfers;
    if (transfer_bytes[d] == 0) continue;
    if (!buf || buf->size() < transfer_bytes[d]) {
      buf.reset();
      buf = devices_[d]->alloc(transfer_bytes[d]);
    }
  }
  for (const Transfer& t : transfers_)
    t.to->data =
        static_cast<char*>(per_[size_t(t.to->device)].transfers->address()) + transfer_offset[t.to];
  for (Tensor* n : nodes) {
    if (n->op == OpKind::View)
      n->data = static_cast<char*>(n->src[0]->data) + n->view_offset;
    else if (n->op == OpKind::Copy)
      n->data = n->src[1]->data;
    else
      n->data =
          static_cast<char*>(per_[size_t(n->device)].arena->address()) + offset[size_t(n->index)];
  }
}

void Scheduler::transfer(const Transfer& t) {
  const int e = t.from->device, d = t.to->device;
  Device& src = *devices_[size_t(e)];
  Device& dst = *devices_[size_t(d)];
  // The source's queue drains first: the copy waits for its producer (not counted as copying).
  src.synchronize();
  struct Timed {
    std::chrono::steady_clock::time_point t0;
    double& total;
    ~Timed() {
      total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  } timed{std::chrono::steady_clock::now(), transfer_seconds_};
  const size_t n = t.from->n_bytes();
  transfer_bytes_ += n;
  if (src.reads_host_memory()) {
    if (dst.reads_host_memory()) {
      std::memcpy(t.to->data, t.from->data, n);
      return;
    }
    // On the destination's stream, not waited for: its kernels queue behind the copy.
    auto [b, off] = locate(d, t.to->data, n);
    b->write_async(off, t.from->data, n);
    return;
  }
  auto [from, from_off] = locate(e, t.from->data, n);
  if (!from)
    throw BackendError(
        fmt::format("scheduler: {} is in no buffer of {}", t.from->name, src.info().id));
  if (dst.reads_host_memory()) {
    from->read(from_off, t.to->data, n);
    return;
  }
  std::vector<uint8_t> staged(n);
  from->read(from_off, staged.data(), n);
  auto [b, off] = locate(d, t.to->data, n);
  b->write_async(off, staged.data(), n);
}

void Scheduler::run(Graph& graph, const std::vector<Tensor*>& outputs) {
  // Leaves no node reads may have no bytes (another rank's caches, in an MPI job).
  for (const Tensor* n : graph.nodes())
    for (const Tensor* t : n->src)
      if (t && t->op == OpKind::None && !t->data)
        throw BackendError(fmt::format("scheduler: input tensor {} has no data", t->name));
  place(graph);
  insert_transfers(graph);
  copy_in_leaves(graph);
  plan_memory(graph, outputs);
  transfer_bytes_ = 0;
  transfer_seconds_ = 0;
  const auto& nodes = graph.nodes();
  size_t start = 0, next_transfer = 0;
  while (start < nodes.size()) {
    size_t end = start + 1;
    while (end < nodes.size() && nodes[end]->device == nodes[start]->device) ++end;
    // The activations this run of nodes reads from other devices, in first.
    while (next_transfer < transfers_.size() && transfers_[next_transfer].before < end)
      transfer(transfers_[next_transfer++]);
    devices_[size_t(nodes[start]->device)]->execute(
        std::span<Tensor* const>(nodes.data() + start, end - start));
    start = end;
  }
  for (Device* d : devices_) d->synchronize();
}

}  // namespace ps
