#pragma once
// A byte trie over token texts, stored flat: each node's children are contiguous and sorted by
// their byte, so a step is a binary search over at most 256 bytes and the whole trie costs
// about 13 bytes per node. Built breadth first, so a node's index is never below its parent's.
// Optionally with Aho-Corasick links, to find every token that occurs in a text in one pass.
#include <cstdint>
#include <string_view>
#include <vector>

namespace ps {

class TokenTrie {
 public:
  static constexpr uint32_t kRoot = 0;
  static constexpr uint32_t kNone = UINT32_MAX;

  struct Entry {
    std::string_view text;  // non-empty, distinct
    int32_t token;
  };
  // Texts longer than max_len bytes are left out (callers that never look that far).
  TokenTrie(std::vector<Entry> entries, size_t max_len, bool with_links);
  TokenTrie() : TokenTrie({}, 0, false) {}

  // The node reached from `node` by `byte`, or kNone.
  uint32_t child(uint32_t node, uint8_t byte) const;
  // The token whose text ends at `node`, or -1.
  int32_t token(uint32_t node) const { return nodes_[node].token; }

  // The longest token that is a prefix of `text`, and its length; {-1, 0} when none is.
  std::pair<int32_t, size_t> longest_prefix(std::string_view text) const;

  // Every distinct token that occurs anywhere in `text`, in no particular order; O(text size
  // + tokens found). Needs with_links.
  std::vector<int32_t> tokens_in(std::string_view text) const;

  struct Occurrence {
    size_t end;  // one past the token's last byte in the text
    int32_t token;
  };
  // Every occurrence of every token in `text`, by end offset (longest token first where several
  // end at one place). Needs with_links. Linear when no token is a proper suffix of another,
  // as when all have one length.
  std::vector<Occurrence> occurrences(std::string_view text) const;

 private:
  struct Node {
    int32_t token = -1;
    uint32_t first_child = 0;
    uint32_t n_children = 0;
  };
  std::vector<Node> nodes_;
  std::vector<uint8_t> edge_;     // the byte that leads into each node
  std::vector<uint32_t> fail_;    // longest proper suffix that is a trie node
  std::vector<uint32_t> output_;  // longest proper suffix that is a token, or kNone
};

}  // namespace ps
