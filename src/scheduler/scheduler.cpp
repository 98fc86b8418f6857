#include "scheduler/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
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

// First-fit allocator over offsets in a virtual arena; tracks the peak.
class OffsetAllocator {
 public:
  size_t alloc(size_t n) {
    n = align_up(n);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second >= n) {
        const size_t off = it->first;
        const size_t rest = it->second - n;
        free_.erase(it);
        if (rest) free_.emplace(off + n, rest);
        return off;
      }
    }
    // Grow at the end, merging with a free block that touches the end.
    size_t off = end_;
    if (!free_.empty()) {
      auto last = std::prev(free_.end());
      if (last->first + last->second == end_) {
        off = last->first;
        free_.erase(last);
      }
    }
    end_ = std::max(end_, off + n);
    return off;
  }
  void release(size_t off, size_t n) {
    n = align_up(n);
    auto it = free_.emplace(off, n).first;
    if (it != free_.begin()) {  // merge with the previous block
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
        it = prev;
      }
    }
    auto next = std::next(it);
    if (next != free_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
  }
  size_t peak() const { return end_; }

 private:
  std::map<size_t, size_t> free_;
  size_t end_ = 0;
};

}  // namespace

Scheduler::Scheduler(std::vector<Device*> devices, bool strict)
    : devices_(std::move(devices)), strict_(strict) {
  if (devices_.empty()) throw BackendError("scheduler: no device to run on");
  // A device with its own memory runs whole graphs: moving tensors between devices in the
  // middle of a graph is not planned yet.
  for (size_t i = 1; i < devices_.size(); ++i)
    if (!devices_[i]->reads_host_memory() || !devices_[0]->reads_host_memory())
      throw BackendError(
          fmt::format("scheduler: {} and {} cannot share a graph: one of them has its own memory",
                      devices_[0]->info().id, devices_[i]->info().id));
}

Buffer& Scheduler::constant_copy(const Tensor& leaf) {
  auto& buf = constants_[leaf.data];
  if (!buf) {
    buf = devices_[0]->alloc(leaf.n_bytes());
    buf->write(0, leaf.data, leaf.n_bytes());
  }
  return *buf;
}

void Scheduler::upload_constants(const Graph& graph) {
  Device& dev = *devices_[0];
  if (dev.reads_host_memory()) return;
  for (const Tensor* n : graph.nodes())
    for (const Tensor* s : n->src)
      if (s && s->op == OpKind::None && s->constant && !dev.owns(s->data)) constant_copy(*s);
}

void Scheduler::copy_in_leaves(Graph& graph) {
  run_inputs_.clear();
  Device& dev = *devices_[0];
  if (dev.reads_host_memory()) return;
  // Nodes keep their own src pointers: a leaf read from host memory is replaced, in this
  // graph only, by a leaf in device memory (the model's weight tensors are never modified).
  std::unordered_map<Tensor*, Tensor*> replaced;
  for (Tensor* n : graph.nodes()) {
    for (Tensor*& s : n->src) {
      if (!s || s->op != OpKind::None || dev.owns(s->data)) continue;
      auto it = replaced.find(s);
      if (it == replaced.end()) {
        void* addr = nullptr;
        if (s->constant) {
          addr = constant_copy(*s).address();
        } else {
          auto& buf = run_inputs_.emplace_back(dev.alloc(s->n_bytes()));
          buf->write(0, s->data, s->n_bytes());
          addr = buf->address();
        }
        Tensor* copy = graph.leaf(s->name, s->type, s->ne, addr);
        copy->nb = s->nb;
        copy->constant = s->constant;
        it = replaced.emplace(s, copy).first;
      }
      s = it->second;
    }
  }
}

void Scheduler::read(const Tensor& t, void* dst) const {
  if (devices_[0]->reads_host_memory() || !arena_) {
    std::memcpy(dst, t.data, t.n_bytes());
    return;
  }
  const char* base = static_cast<const char*>(arena_->address());
  const char* at = static_cast<const char*>(t.data);
  if (at < base || at + t.n_bytes() > base + arena_->size())
    throw BackendError(fmt::format("scheduler: {} is not an output of the last run", t.name));
  arena_->read(size_t(at - base), dst, t.n_bytes());
}

void Scheduler::place(Graph& graph) {
  report_.fallbacks.clear();
  std::set<std::string> seen;
  for (Tensor* n : graph.nodes()) {
    if (n->op == OpKind::View) {
      n->device = n->src[0]->device >= 0 ? n->src[0]->device : 0;
      continue;
    }
    std::string first_reason;
    n->device = -1;
    for (size_t i = 0; i < devices_.size(); ++i) {
      const std::string why = devices_[i]->unsupported_reason(*n);
      if (why.empty()) {
        n->device = int(i);
        break;
      }
      if (i == 0) first_reason = why;
      if (strict_) break;
    }
    if (n->device < 0)
      throw BackendError(fmt::format("op {} ({}) cannot run on {}: {}", op_name(n->op), n->name,
                                     devices_[0]->info().id, first_reason));
    if (n->device > 0) {
      const std::string line =
          fmt::format("{} ran on {} instead of {}: {}", op_name(n->op),
                      devices_[size_t(n->device)]->info().id, devices_[0]->info().id, first_reason);
      if (seen.insert(line).second) report_.fallbacks.push_back(line);
    }
  }
}

void Scheduler::plan_memory(Graph& graph, const std::vector<Tensor*>& outputs) {
  const auto& nodes = graph.nodes();
  std::unordered_map<Tensor*, size_t> last_use;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (Tensor* s : nodes[i]->src)
      if (s) last_use[storage_root(s)] = i;
  std::set<Tensor*> keep;
  for (Tensor* o : outputs) keep.insert(storage_root(o));

  OffsetAllocator alloc;
  std::unordered_map<Tensor*, size_t> offset;
  // Tensors to release after node i has run.
  std::vector<std::vector<Tensor*>> release_after(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    Tensor* n = nodes[i];
    if (n->op != OpKind::View && n->op != OpKind::Copy) {
      offset[n] = alloc.alloc(n->n_bytes());
      auto lu = last_use.find(n);
      if (!keep.count(n)) release_after[lu == last_use.end() ? i : lu->second].push_back(n);
    }
    for (Tensor* t : release_after[i]) alloc.release(offset[t], t->n_bytes());
  }

  const size_t need = std::max<size_t>(alloc.peak(), kAlign);
  if (!arena_ || arena_->size() < need) {
    arena_.reset();
    arena_ = devices_[0]->alloc(need);
  }
  char* base = static_cast<char*>(arena_->address());
  for (Tensor* n : nodes) {
    if (n->op == OpKind::View)
      n->data = static_cast<char*>(n->src[0]->data) + n->view_offset;
    else if (n->op == OpKind::Copy)
      n->data = n->src[1]->data;
    else
      n->data = base + offset[n];
  }
}

void Scheduler::run(Graph& graph, const std::vector<Tensor*>& outputs) {
  for (Tensor* t : graph.all())
    if (t->op == OpKind::None && !t->data)
      throw BackendError(fmt::format("scheduler: input tensor {} has no data", t->name));
  place(graph);
  copy_in_leaves(graph);
  plan_memory(graph, outputs);
  const auto& nodes = graph.nodes();
  size_t start = 0;
  while (start < nodes.size()) {
    size_t end = start + 1;
    while (end < nodes.size() && nodes[end]->device == nodes[start]->device) ++end;
    devices_[size_t(nodes[start]->device)]->execute(
        std::span<Tensor* const>(nodes.data() + start, end - start));
    start = end;
  }
  for (Device* d : devices_) d->synchronize();
}

}  // namespace ps
