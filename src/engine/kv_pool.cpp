#include "engine/kv_pool.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace ps {

KvPool::KvPool(std::vector<Group> groups, int64_t block, int n_seq)
    : groups_(std::move(groups)), block_(block) {
  if (block < 1) throw UsageError(fmt::format("KV block of {} cells", block));
  if (n_seq < 1) throw UsageError(fmt::format("{} sequences in the KV pool", n_seq));
  if (groups_.empty()) throw UsageError("a KV pool without layers");
  for (const Group& g : groups_) {
    if (g.slots < 1 || g.n_blocks < 1 || g.n_blocks > INT32_MAX)
      throw UsageError(fmt::format("KV pool group of {} slots in {} blocks", g.slots, g.n_blocks));
    std::vector<int32_t> f(size_t(g.n_blocks));
    for (size_t i = 0; i < f.size(); ++i) f[i] = int32_t(f.size() - 1 - i);
    free_.push_back(std::move(f));
  }
  tables_.assign(size_t(n_seq), std::vector<std::vector<int32_t>>(groups_.size()));
  for (size_t g = 0; g < groups_.size(); ++g)
    if (groups_[g].slots > groups_[size_t(main_)].slots) main_ = int(g);
}

int64_t KvPool::blocks_for(int g, int64_t n_positions) const {
  const int64_t slots = std::min(std::max<int64_t>(n_positions, 0), groups_[size_t(g)].slots);
  return (slots + block_ - 1) / block_;
}

int64_t KvPool::missing(int seq, int64_t n_positions, int g) const {
  return std::max<int64_t>(0, blocks_for(g, n_positions) - int64_t(table(seq, g).size()));
}

bool KvPool::reserve(int seq, int64_t n_positions) {
  for (int g = 0; g < n_groups(); ++g)
    if (missing(seq, n_positions, g) > free_blocks(g)) return false;
  for (int g = 0; g < n_groups(); ++g) {
    std::vector<int32_t>& t = tables_[size_t(seq)][size_t(g)];
    for (int64_t n = missing(seq, n_positions, g); n > 0; --n) {
      t.push_back(free_[size_t(g)].back());
      free_[size_t(g)].pop_back();
    }
  }
  return true;
}

void KvPool::shrink(int seq, int64_t n_positions) {
  for (int g = 0; g < n_groups(); ++g) {
    std::vector<int32_t>& t = tables_[size_t(seq)][size_t(g)];
    const size_t keep = size_t(blocks_for(g, n_positions));
    if (t.size() <= keep) continue;
    std::vector<int32_t>& f = free_[size_t(g)];
    f.insert(f.end(), t.begin() + ptrdiff_t(keep), t.end());
    t.resize(keep);
    // Highest first: the lowest free block is taken next, whatever the order of returns.
    std::sort(f.begin(), f.end(), std::greater<>());
  }
}

int64_t KvPool::cells_of(int seq) const { return int64_t(table(seq, main_).size()) * block_; }

int64_t KvPool::used_cells() const { return (group(main_).n_blocks - free_blocks(main_)) * block_; }

int64_t KvPool::total_cells() const { return group(main_).n_blocks * block_; }

}  // namespace ps
