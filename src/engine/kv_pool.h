#pragma once
// The KV cells of every sequence of a context, handed out in blocks. Layers fall into groups by
// the slots a sequence has in them (every position, or a sliding-window layer's ring); each
// group has its own cells in every layer of the group, and a sequence has a block table per
// group. Position j of a sequence lives in slot s = j % slots of each group, which is cell
// table[s / block] * block + s % block. Sequences take blocks as they grow and give them back when
// they shrink or end; nothing is ever moved. Pure bookkeeping: the buffers are the context's.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ps {

class KvPool {
 public:
  struct Group {
    int64_t slots;     // positions a sequence's slots hold in this group (a ring beyond)
    int64_t n_blocks;  // the group's cells / block
  };
  KvPool(std::vector<Group> groups, int64_t block, int n_seq);

  int64_t block() const { return block_; }
  int n_groups() const { return int(groups_.size()); }
  int n_seq() const { return int(tables_.size()); }
  const Group& group(int g) const { return groups_[size_t(g)]; }

  // Blocks of group g that cells for positions [0, n_positions) take.
  int64_t blocks_for(int g, int64_t n_positions) const;
  // Makes sure sequence seq holds cells for positions [0, n_positions): true, or false with
  // nothing taken when a group has too few free blocks.
  bool reserve(int seq, int64_t n_positions);
  // Blocks that reserve(seq, n_positions) would still take from group g.
  int64_t missing(int seq, int64_t n_positions, int g) const;
  // Keeps the cells of positions [0, n_positions); the blocks past them go back.
  void shrink(int seq, int64_t n_positions);
  // Every block of seq goes back.
  void release(int seq) { shrink(seq, 0); }

  // seq's blocks in group g, in slot order.
  const std::vector<int32_t>& table(int seq, int g) const {
    return tables_[size_t(seq)][size_t(g)];
  }
  // Cells as positions count them: those of the group that holds every position (the one with
  // the most slots; a sliding-window group's cells are counted by that group's too). Held by
  // seq, held by any sequence, and all.
  int64_t cells_of(int seq) const;
  int64_t free_blocks(int g) const { return int64_t(free_[size_t(g)].size()); }
  int64_t used_cells() const;
  int64_t total_cells() const;

 private:
  std::vector<Group> groups_;
  int main_ = 0;  // the group with the most slots
  int64_t block_;
  std::vector<std::vector<std::vector<int32_t>>> tables_;  // [seq][group]
  // Per group the free blocks, highest first, so the lowest is taken (from the back).
  std::vector<std::vector<int32_t>> free_;
};

}  // namespace ps
