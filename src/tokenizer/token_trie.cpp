#include "tokenizer/token_trie.h"

#include <algorithm>

namespace ps {

TokenTrie::TokenTrie(std::vector<Entry> entries, size_t max_len, bool with_links) {
  std::erase_if(entries, [&](const Entry& e) { return e.text.empty() || e.text.size() > max_len; });
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.text < b.text; });
  // Each node stands for the entries [lo, hi) that share its `depth` first bytes.
  struct Range {
    size_t lo, hi, depth;
  };
  std::vector<Range> ranges{{0, entries.size(), 0}};
  nodes_.emplace_back();
  edge_.push_back(0);
  for (size_t node = 0; node < nodes_.size(); ++node) {
    auto [lo, hi, depth] = ranges[node];
    // Sorted, so an entry that ends here comes first.
    if (lo < hi && entries[lo].text.size() == depth) nodes_[node].token = entries[lo++].token;
    nodes_[node].first_child = uint32_t(nodes_.size());
    while (lo < hi) {
      const char byte = entries[lo].text[depth];
      size_t end = lo + 1;
      while (end < hi && entries[end].text[depth] == byte) ++end;
      nodes_.emplace_back();
      edge_.push_back(uint8_t(byte));
      ranges.push_back({lo, end, depth + 1});
      ++nodes_[node].n_children;
      lo = end;
    }
  }
  if (!with_links) return;

  // Breadth-first order: a node's suffix links point to shallower nodes, already linked.
  fail_.assign(nodes_.size(), kRoot);
  output_.assign(nodes_.size(), kNone);
  for (uint32_t parent = 0; parent < nodes_.size(); ++parent) {
    const Node& p = nodes_[parent];
    for (uint32_t v = p.first_child; v < p.first_child + p.n_children; ++v) {
      if (parent != kRoot) {
        for (uint32_t f = fail_[parent];; f = fail_[f]) {
          if (const uint32_t w = child(f, edge_[v]); w != kNone) {
            fail_[v] = w;
            break;
          }
          if (f == kRoot) break;
        }
      }
      const uint32_t f = fail_[v];
      output_[v] = nodes_[f].token >= 0 ? f : output_[f];
    }
  }
}

uint32_t TokenTrie::child(uint32_t node, uint8_t byte) const {
  const Node& n = nodes_[node];
  const auto first = edge_.begin() + n.first_child, last = first + n.n_children;
  const auto it = std::lower_bound(first, last, byte);
  return it != last && *it == byte ? uint32_t(it - edge_.begin()) : kNone;
}

std::pair<int32_t, size_t> TokenTrie::longest_prefix(std::string_view text) const {
  std::pair<int32_t, size_t> best{-1, 0};
  uint32_t node = kRoot;
  for (size_t i = 0; i < text.size(); ++i) {
    node = child(node, uint8_t(text[i]));
    if (node == kNone) break;
    if (nodes_[node].token >= 0) best = {nodes_[node].token, i + 1};
  }
  return best;
}

std::vector<int32_t> TokenTrie::tokens_in(std::string_view text) const {
  std::vector<int32_t> found;
  if (nodes_.size() == 1) return found;
  // A token node is marked once; its suffix tokens were marked with it, so a walk down the
  // output links stops at the first marked node and the whole scan stays linear.
  std::vector<bool> seen(nodes_.size(), false);
  uint32_t state = kRoot;
  for (const char c : text) {
    for (;;) {
      if (const uint32_t w = child(state, uint8_t(c)); w != kNone) {
        state = w;
        break;
      }
      if (state == kRoot) break;
      state = fail_[state];
    }
    for (uint32_t x = nodes_[state].token >= 0 ? state : output_[state]; x != kNone && !seen[x];
         x = output_[x]) {
      seen[x] = true;
      found.push_back(nodes_[x].token);
    }
  }
  return found;
}

std::vector<TokenTrie::Occurrence> TokenTrie::occurrences(std::string_view text) const {
  std::vector<Occurrence> found;
  if (nodes_.size() == 1) return found;
  uint32_t state = kRoot;
  for (size_t i = 0; i < text.size(); ++i) {
    for (;;) {
      if (const uint32_t w = child(state, uint8_t(text[i])); w != kNone) {
        state = w;
        break;
      }
      if (state == kRoot) break;
      state = fail_[state];
    }
    for (uint32_t x = nodes_[state].token >= 0 ? state : output_[state]; x != kNone; x = output_[x])
      found.push_back({i + 1, nodes_[x].token});
  }
  return found;
}

}  // namespace ps
