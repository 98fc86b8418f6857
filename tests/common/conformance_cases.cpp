#include "conformance_cases.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <stdexcept>
#include <string_view>
#include <tuple>

#include "backend/backend.h"
#include "core/dtype.h"
#include "graph/ops.h"

namespace ps::conformance {
namespace {

using Builder = std::function<void(Case&, std::mt19937&)>;

// Chosen experts I32 [k, T]: k distinct ids per token from `allowed` (in a random order), or,
// with `first` >= 0, that expert first for every token.
Tensor* expert_ids(Case& c, std::mt19937& rng, int64_t k, int64_t T, std::vector<int32_t> allowed,
                   int32_t first = -1) {
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < T; ++t) {
    std::shuffle(allowed.begin(), allowed.end(), rng);
    if (first >= 0)
      std::iter_swap(allowed.begin(), std::find(allowed.begin(), allowed.end(), first));
    ids.insert(ids.end(), allowed.begin(), allowed.begin() + k);
  }
  return c.graph.reshape(c.int_leaf("ids", ids), {k, T, 1, 1});
}

std::vector<int32_t> iota(int32_t from, int32_t to) {
  std::vector<int32_t> v;
  for (int32_t i = from; i < to; ++i) v.push_back(i);
  return v;
}

// Mixture-of-experts ops: top_k at row lengths of real routers and with ties, the router's
// weights under each gating, matmul_id over every weight family with one expert chosen by all
// tokens, experts chosen by none, k = E, prompts of 9, 70 and 1100 tokens (the grouped paths),
// one input for all slots or one per slot; expert_sum.
void add_expert_cases(std::vector<std::pair<std::string, Builder>>& builders) {
  for (int64_t n : {8, 60, 128}) {
    for (int64_t k : {int64_t(1), int64_t(2), int64_t(8), n}) {
      if (k > n || (k == n && n > 60)) continue;
      for (bool ties : {false, true}) {
        builders.emplace_back(
            fmt::format("top_k {} of {} x 9 rows{}", k, n, ties ? " with ties" : ""),
            [=](Case& c, std::mt19937& rng) {
              Tensor* a = c.random_leaf("a", DType::F32, {n, 9, 1, 1}, rng, 3.0f);
              if (ties) {  // values on a grid of 0.5: many equal, taken in index order
                float* v = static_cast<float*>(a->data);
                for (int64_t i = 0; i < n * 9; ++i) v[i] = std::round(v[i] * 2.0f) / 2.0f;
              }
              c.out = c.graph.top_k(a, int32_t(k));
              c.out_type = DType::I32;
              c.tolerance = 0;
            });
      }
    }
  }
  const std::pair<ExpertGating, const char*> gatings[] = {
      {ExpertGating::Softmax, "softmax"},
      {ExpertGating::Sigmoid, "sigmoid"},
      {ExpertGating::SoftmaxSelected, "softmax of the chosen"}};
  for (auto [gating, gname] : gatings) {
    for (bool normalize : {false, true}) {
      for (auto [E, k] : std::vector<std::pair<int64_t, int64_t>>{{8, 2}, {60, 4}, {6, 6}}) {
        builders.emplace_back(
            fmt::format("expert_weights {}{} {} of {}", gname, normalize ? " normalized" : "", k,
                        E),
            [=](Case& c, std::mt19937& rng) {
              Tensor* z = c.random_leaf("logits", DType::F32, {E, 7, 1, 1}, rng, 3.0f);
              Tensor* ids = expert_ids(c, rng, k, 7, iota(0, int32_t(E)));
              c.out = c.graph.expert_weights(z, ids, {gating, normalize, normalize ? 2.5f : 1.0f});
              c.tolerance = 1e-5;
            });
      }
    }
  }
  struct IdCase {
    const char* what;
    int64_t E, k, T;
    bool per_slot;   // an input per chosen expert (down) rather than one for all (gate, up)
    int first;       // an expert every token chooses, or -1
    int32_t lo, hi;  // experts [lo, hi) may be chosen: the others by none
  };
  const IdCase id_cases[] = {
      {"decode, 2 of 6", 6, 2, 1, false, -1, 0, 6},
      {"5 tokens, 2 of 6, one input per slot", 6, 2, 5, true, -1, 0, 6},
      {"70 tokens, 2 of 6 experts 2-5 (0, 1 chosen by none)", 6, 2, 70, false, -1, 2, 6},
      {"70 tokens, all choose expert 3, per slot", 6, 3, 70, true, 3, 0, 6},
      {"9 tokens, 1 of 6, all choose expert 4", 6, 1, 9, false, 4, 0, 6},
      {"7 tokens, k = E = 4, per slot", 4, 4, 7, true, -1, 0, 4},
  };
  const DType id_types[] = {DType::F32,  DType::F16,  DType::Q8_0,
                            DType::Q4_0, DType::Q4_K, DType::MXFP4};
  for (DType t : id_types) {
    const int64_t K = t == DType::Q4_K ? 256 : block_size(t) > 1 ? 64 : 45;
    for (const IdCase& a : id_cases) {
      builders.emplace_back(
          fmt::format("matmul_id {} K={} N=33: {}", dtype_name(t), K, a.what),
          [=](Case& c, std::mt19937& rng) {
            Tensor* w = c.random_leaf("experts", t, {K, 33, a.E, 1}, rng);
            Tensor* x = c.random_leaf("x", DType::F32, {K, a.per_slot ? a.k : 1, a.T, 1}, rng);
            Tensor* ids = expert_ids(c, rng, a.k, a.T, iota(a.lo, a.hi), a.first);
            c.out = c.graph.matmul_id(w, x, ids);
            c.tolerance = Case::matmul_tolerance(t);
          });
    }
  }
  // The GPUs' grouped prompt kernels: 130 rows (two tiles of 64 and a part), and 1100 tokens,
  // which they gather in two windows of 1024.
  for (DType t : {DType::F32, DType::Q4_0}) {
    builders.emplace_back(
        fmt::format("matmul_id {} K=64 N=130: 1100 tokens, 2 of 8", dtype_name(t)),
        [=](Case& c, std::mt19937& rng) {
          Tensor* w = c.random_leaf("experts", t, {64, 130, 8, 1}, rng);
          Tensor* x = c.random_leaf("x", DType::F32, {64, 1, 1100, 1}, rng);
          Tensor* ids = expert_ids(c, rng, 2, 1100, iota(0, 8));
          c.out = c.graph.matmul_id(w, x, ids);
          c.tolerance = Case::matmul_tolerance(t);
        });
  }
  for (auto [n, k, T] : std::vector<std::array<int64_t, 3>>{{37, 3, 5}, {64, 1, 1}, {130, 8, 70}}) {
    builders.emplace_back(fmt::format("expert_sum {} x {} x {}", n, k, T),
                          [=](Case& c, std::mt19937& rng) {
                            Tensor* x = c.random_leaf("x", DType::F32, {n, k, T, 1}, rng);
                            Tensor* w = c.random_leaf("w", DType::F32, {k, T, 1, 1}, rng);
                            c.out = c.graph.expert_sum(x, w);
                          });
  }
}

}  // namespace

std::vector<std::unique_ptr<Case>> all_cases() {
  std::vector<std::pair<std::string, Builder>> builders;
  const std::array<int64_t, 4> shapes[] = {{1, 1, 1, 1}, {37, 3, 1, 1}, {130, 7, 2, 1}};
  for (const auto& s : shapes) {
    const std::string dims = fmt::format("{}x{}x{}", s[0], s[1], s[2]);
    for (OpKind op : {OpKind::Add, OpKind::Mul, OpKind::SwiGlu}) {
      for (bool broadcast : {false, true}) {
        if (broadcast && op == OpKind::SwiGlu) continue;  // swiglu takes equal shapes
        builders.emplace_back(
            fmt::format("{} {}{}", op_name(op), dims, broadcast ? " src1 one row" : ""),
            [=](Case& c, std::mt19937& rng) {
              Tensor* a = c.random_leaf("a", DType::F32, s, rng);
              Tensor* b = c.random_leaf("b", DType::F32,
                                        broadcast ? std::array<int64_t, 4>{s[0], 1, 1, 1} : s, rng);
              c.out = op == OpKind::Add   ? c.graph.add(a, b)
                      : op == OpKind::Mul ? c.graph.mul(a, b)
                                          : c.graph.swiglu(a, b);
            });
      }
    }
    // gpt-oss's clamped SwiGLU: values spread past the limit of 7 either way.
    builders.emplace_back(fmt::format("swiglu_oai {}", dims), [=](Case& c, std::mt19937& rng) {
      Tensor* a = c.random_leaf("a", DType::F32, s, rng, 9.0f);
      Tensor* b = c.random_leaf("b", DType::F32, s, rng, 9.0f);
      c.out = c.graph.swiglu_oai(a, b, SwiGluOaiParams{});
    });
    for (OpKind op : {OpKind::Silu, OpKind::Gelu, OpKind::Scale, OpKind::Sigmoid}) {
      builders.emplace_back(fmt::format("{} {}", op_name(op), dims),
                            [=](Case& c, std::mt19937& rng) {
                              Tensor* a = c.random_leaf("a", DType::F32, s, rng);
                              c.out = op == OpKind::Silu    ? c.graph.silu(a)
                                      : op == OpKind::Gelu  ? c.graph.gelu(a)
                                      : op == OpKind::Scale ? c.graph.scale(a, 25.3f)
                                                            : c.graph.sigmoid(a);
                            });
    }
    builders.emplace_back(fmt::format("rms_norm {}", dims), [=](Case& c, std::mt19937& rng) {
      c.out = c.graph.rms_norm(c.random_leaf("a", DType::F32, s, rng), 1e-5f);
    });
    for (int32_t causal : {-1, 0, 2}) {
      builders.emplace_back(
          fmt::format("softmax {} causal {}", dims, causal), [=](Case& c, std::mt19937& rng) {
            c.out = c.graph.softmax(c.random_leaf("a", DType::F32, s, rng), 0.7f, causal);
          });
    }
  }
  // A view with an offset: the kernels must honour strides and a first element that is not the
  // start of a buffer.
  builders.emplace_back("rms_norm of a strided view", [](Case& c, std::mt19937& rng) {
    Tensor* a = c.random_leaf("a", DType::F32, {40, 6, 1, 1}, rng);
    Tensor* v = c.graph.view(a, {33, 3, 1, 1}, {4, 4 * 40 * 2, 4 * 40 * 6, 4 * 40 * 6}, 4 * 5);
    c.out = c.graph.rms_norm(v, 1e-6f);
  });
  const DType weight_types[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                                DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1};
  for (DType t : weight_types) {
    const bool quant = block_size(t) > 1;
    for (int64_t k : quant ? std::vector<int64_t>{32, 32 * 9} : std::vector<int64_t>{37, 269}) {
      // Batches of 70 reach the prompt kernels (tiles of 8 and 64 rows) with partial tiles.
      for (auto [n, m] : std::vector<std::pair<int64_t, int64_t>>{
               {5, 1}, {5, 3}, {5, 6}, {33, 1}, {33, 3}, {33, 6}, {5, 70}, {131, 70}}) {
        builders.emplace_back(fmt::format("matmul {} K={} N={} M={}", dtype_name(t), k, n, m),
                              [=](Case& c, std::mt19937& rng) {
                                Tensor* w = c.random_leaf("w", t, {k, n, 1, 1}, rng);
                                Tensor* x = c.random_leaf("x", DType::F32, {k, m, 1, 1}, rng);
                                c.out = c.graph.matmul(w, x);
                                // Quantized paths quantize the activations to 8 bits.
                                c.tolerance = Case::matmul_tolerance(t);
                              });
      }
    }
  }
  // A vocabulary-sized output projection: more groups of weight rows than one dimension of a GPU
  // grid holds (65535), for the decode kernels that take few rows per group.
  for (int64_t m : {1, 2}) {
    builders.emplace_back(fmt::format("matmul Q8_0 K=32 N=270001 M={}", m),
                          [=](Case& c, std::mt19937& rng) {
                            Tensor* w = c.random_leaf("w", DType::Q8_0, {32, 270001, 1, 1}, rng);
                            Tensor* x = c.random_leaf("x", DType::F32, {32, m, 1, 1}, rng);
                            c.out = c.graph.matmul(w, x);
                            c.tolerance = 2e-2;
                          });
  }
  // The same as a get_rows table (an embedding), with ids across all of it.
  builders.emplace_back("get_rows Q8_0 from 270001 rows", [](Case& c, std::mt19937& rng) {
    Tensor* table = c.random_leaf("table", DType::Q8_0, {32, 270001, 1, 1}, rng);
    Tensor* ids = c.int_leaf("ids", {270000, 0, 123457, 7, 270000, 200001, 98000});
    c.out = c.graph.get_rows(table, ids);
  });
  // Quantized matmuls at two row lengths, decode and prompts: the k-quants (super-blocks of
  // 256) and the 4-bit codebook types (IQ4_XS in super-blocks of 256).
  const auto quantized_matmuls = [&](DType t, int64_t k_short, int64_t k_long) {
    for (int64_t k : {k_short, k_long}) {
      for (auto [n, m] : std::vector<std::pair<int64_t, int64_t>>{{5, 1}, {33, 6}, {5, 70}}) {
        builders.emplace_back(fmt::format("matmul {} K={} N={} M={}", dtype_name(t), k, n, m),
                              [=](Case& c, std::mt19937& rng) {
                                Tensor* w = c.random_leaf("w", t, {k, n, 1, 1}, rng);
                                Tensor* x = c.random_leaf("x", DType::F32, {k, m, 1, 1}, rng);
                                c.out = c.graph.matmul(w, x);
                                c.tolerance = 2e-2;
                              });
      }
    }
  };
  const DType kquant_types[] = {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  for (DType t : kquant_types) quantized_matmuls(t, 256, 256 * 3);
  const DType codebook_types[] = {DType::IQ4_NL, DType::MXFP4, DType::IQ4_XS};
  for (DType t : codebook_types) {
    const bool xs = t == DType::IQ4_XS;
    quantized_matmuls(t, xs ? 256 : 64, xs ? 768 : 192);
    builders.emplace_back(
        fmt::format("get_rows {}", dtype_name(t)), [=](Case& c, std::mt19937& rng) {
          Tensor* table = c.random_leaf("table", t, {xs ? 512 : 64, 11, 1, 1}, rng);
          Tensor* ids = c.int_leaf("ids", {10, 0, 3, 7, 10, 1});
          c.out = c.graph.get_rows(table, ids);
        });
  }
  for (DType t : weight_types) {
    builders.emplace_back(fmt::format("get_rows {}", dtype_name(t)),
                          [=](Case& c, std::mt19937& rng) {
                            const int64_t width = block_size(t) > 1 ? 64 : 37;
                            Tensor* table = c.random_leaf("table", t, {width, 11, 1, 1}, rng);
                            Tensor* ids = c.int_leaf("ids", {10, 0, 3, 7, 10, 1});
                            c.out = c.graph.get_rows(table, ids);
                          });
  }
  for (DType t : kquant_types) {
    builders.emplace_back(fmt::format("get_rows {}", dtype_name(t)),
                          [=](Case& c, std::mt19937& rng) {
                            Tensor* table = c.random_leaf("table", t, {512, 11, 1, 1}, rng);
                            Tensor* ids = c.int_leaf("ids", {10, 0, 3, 7, 10, 1});
                            c.out = c.graph.get_rows(table, ids);
                          });
  }
  for (RopeMode mode : {RopeMode::Normal, RopeMode::NeoX}) {
    for (int n_rot : {16, 12}) {
      builders.emplace_back(
          fmt::format("rope {} n_rot {}", mode == RopeMode::NeoX ? "neox" : "normal", n_rot),
          [=](Case& c, std::mt19937& rng) {
            Tensor* x = c.random_leaf("x", DType::F32, {16, 3, 5, 1}, rng);
            Tensor* pos = c.int_leaf("pos", {0, 1, 7, 30, 95});
            c.out = c.graph.rope(x, pos, n_rot, 10000.0f, 0.5f, mode);
            c.tolerance = 1e-4;
          });
    }
    // Per-pair frequency factors (Llama 3.1, LongRoPE): between 1 and 40, none alike.
    builders.emplace_back(
        fmt::format("rope {} n_rot 12 freq_factors", mode == RopeMode::NeoX ? "neox" : "normal"),
        [=](Case& c, std::mt19937& rng) {
          Tensor* x = c.random_leaf("x", DType::F32, {14, 3, 5, 1}, rng);
          Tensor* pos = c.int_leaf("pos", {0, 1, 7, 30, 95});
          Tensor* f = c.random_leaf("factors", DType::F32, {6, 1, 1, 1}, rng);
          for (int64_t i = 0; i < 6; ++i) {
            float& v = static_cast<float*>(f->data)[i];
            v = 1.0f + std::min(39.0f, 10.0f * std::fabs(v));
          }
          c.out = c.graph.rope(x, pos, 12, 500000.0f, 1.0f, mode, f, 1.19f);
          c.tolerance = 1e-4;
        });
  }
  for (DType t : {DType::F32, DType::F16}) {
    // Rows of 8 values into positions 2..4 of a [8, 2 heads, 6 positions] cache: a strided view.
    builders.emplace_back(
        fmt::format("copy F32 into a {} cache view", dtype_name(t)),
        [=](Case& c, std::mt19937& rng) {
          Tensor* src = c.random_leaf("src", DType::F32, {8, 2, 3, 1}, rng);
          Tensor* cache = c.random_leaf("cache", t, {8, 2, 6, 1}, rng);
          const size_t e = t == DType::F16 ? 2 : 4;
          Tensor* view = c.graph.view(cache, {8, 2, 3, 1}, {e, 8 * e, 16 * e, 48 * e}, 2 * 16 * e);
          c.graph.copy(src, view);
          // The whole cache, so writes outside the view are caught too.
          c.out = c.graph.view(cache, {96, 1, 1, 1}, {e, 96 * e, 96 * e, 96 * e}, 0);
          c.out_type = t;
          c.tolerance = t == DType::F16 ? 1e-3 : 0;
        });
  }
  // Attention: q [hd, n_head, T] over F16 caches [hd, n_kv, slots] at n_past, with a window.
  struct AttentionCase {
    const char* what;
    int64_t hd, n_head, T, n_kv, slots;
    int32_t n_past, window;
    float scale;
    bool sinks =
        false;  // gpt-oss's (graph/ops.h): one far above the scores, the others of their size
  };
  // Sinks, one per head: the first far above any score (it takes nearly all the weight).
  const auto sinks_leaf = [](Case& c, int64_t n_head, std::mt19937& rng) {
    Tensor* s = c.random_leaf("sinks", DType::F32, {n_head, 1, 1, 1}, rng, 2.0f);
    static_cast<float*>(s->data)[0] = 20.0f;
    return s;
  };
  const AttentionCase attention_cases[] = {
      {"head 16, no past", 16, 4, 3, 2, 300, 0, 0, 0.3f},
      {"head 16, 5 past", 16, 4, 3, 2, 300, 5, 0, 0.3f},
      {"head 40, no past", 40, 4, 3, 2, 300, 0, 0, 0.3f},
      {"head 40, 5 past", 40, 4, 3, 2, 300, 5, 0, 0.3f},
      // Sliding windows: shorter than the cached prefix, and cutting into the batch.
      {"window 4", 40, 4, 5, 2, 30, 6, 4, 0.3f},
      {"window 7", 40, 4, 5, 2, 30, 6, 7, 0.3f},
      // A sliding layer's ring cache: 9 slots for a window of 4 and 5 tokens at positions
      // 20..24, which wrap around its end (position j in slot j % 9).
      {"window 4 in a ring of 9 slots", 40, 4, 5, 2, 9, 20, 4, 0.3f},
      // A window over several chunks of the GPU kernel, starting mid-chunk.
      {"window 600 over 900 positions", 32, 2, 2, 1, 900, 897, 600, 0.2f},
      // A long context: more positions than one chunk of the GPU kernel's online softmax.
      {"over 700 positions", 32, 2, 2, 1, 800, 698, 0, 0.2f},
      {"sinks, 5 past", 40, 4, 3, 2, 300, 5, 0, 0.3f, true},
      {"sinks, decode over 700 positions", 32, 4, 1, 2, 800, 698, 0, 0.2f, true},
      {"sinks, window 4 in a ring of 9 slots", 40, 4, 5, 2, 9, 20, 4, 0.3f, true},
  };
  for (const AttentionCase& a : attention_cases) {
    builders.emplace_back(fmt::format("attention {}", a.what), [=](Case& c, std::mt19937& rng) {
      Tensor* q = c.random_leaf("q", DType::F32, {a.hd, a.n_head, a.T, 1}, rng);
      Tensor* k = c.random_leaf("k", DType::F16, {a.hd, a.n_kv, a.slots, 1}, rng);
      Tensor* v = c.random_leaf("v", DType::F16, {a.hd, a.n_kv, a.slots, 1}, rng);
      Tensor* sinks = a.sinks ? sinks_leaf(c, a.n_head, rng) : nullptr;
      c.out = c.graph.attention(q, k, v, a.n_past, a.scale, a.window, sinks);
      c.tolerance = 1e-4;
    });
  }
  // Tokens of several sequences in one op (batched decoding): each token's (position, plane),
  // sequences of different lengths, planes out of order, a window, a ring, and positions past
  // one chunk of the GPU kernel.
  struct TokensCase {
    const char* what;
    int64_t hd, n_head, n_kv, slots, planes;
    std::vector<int32_t> info;  // (position, plane) per token
    int32_t window;
  };
  // (with sinks where the case's name says so)
  const TokensCase tokens_cases[] = {
      {"3 sequences, mixed lengths", 40, 4, 2, 64, 3, {0, 1, 9, 0, 10, 0, 11, 0, 30, 2}, 0},
      {"one sequence twice the others' plane", 16, 6, 3, 40, 4, {5, 3, 6, 3, 2, 0, 39, 1}, 0},
      {"window 5", 40, 4, 2, 64, 2, {20, 1, 3, 0, 21, 1}, 5},
      {"window 4 in a ring of 9 slots", 40, 4, 2, 9, 2, {22, 1, 23, 1, 8, 0}, 4},
      {"700 positions", 32, 2, 1, 800, 2, {698, 1, 10, 0}, 0},
      {"sinks, window 5", 40, 4, 2, 64, 2, {20, 1, 3, 0, 21, 1}, 5},
  };
  for (const TokensCase& a : tokens_cases) {
    builders.emplace_back(fmt::format("attention over tokens: {}", a.what), [=](Case& c,
                                                                                std::mt19937& rng) {
      const int64_t T = int64_t(a.info.size() / 2);
      Tensor* q = c.random_leaf("q", DType::F32, {a.hd, a.n_head, T, 1}, rng);
      Tensor* k = c.random_leaf("k", DType::F16, {a.hd, a.n_kv, a.slots, a.planes}, rng);
      Tensor* v = c.random_leaf("v", DType::F16, {a.hd, a.n_kv, a.slots, a.planes}, rng);
      Tensor* info = c.int_leaf("info", a.info);
      info->ne = {2, T, 1, 1};
      info->set_contiguous_strides();
      Tensor* sinks =
          std::string_view(a.what).starts_with("sinks") ? sinks_leaf(c, a.n_head, rng) : nullptr;
      c.out = c.graph.attention_tokens(q, k, v, info, 0.3f, a.window, sinks);
      c.tolerance = 1e-4;
    });
  }
  // The same over a paged cache (graph/ops.h): a pool of cells in blocks, each sequence's
  // blocks in a shuffled order, a window over a ring, and positions past one GPU chunk.
  struct PagedCase {
    const char* what;
    int64_t hd, n_head, n_kv, slots, block, n_seq;
    std::vector<int32_t> info;  // (position, sequence) per token
    int32_t window;
  };
  const PagedCase paged_cases[] = {
      {"3 sequences in blocks of 16", 40, 4, 2, 64, 16, 3, {0, 1, 9, 0, 10, 0, 11, 0, 30, 2}, 0},
      {"window 4 over a ring of 9 slots in blocks of 4",
       40,
       4,
       2,
       9,
       4,
       2,
       {22, 1, 23, 1, 8, 0},
       4},
      {"700 positions in blocks of 64", 32, 2, 1, 800, 64, 2, {698, 1, 10, 0}, 0},
      {"sinks, 3 sequences in blocks of 16", 40, 4, 2, 64, 16, 3, {0, 1, 9, 0, 10, 0, 30, 2}, 0},
  };
  for (const PagedCase& a : paged_cases) {
    builders.emplace_back(
        fmt::format("attention over a paged cache: {}", a.what), [=](Case& c, std::mt19937& rng) {
          const int64_t T = int64_t(a.info.size() / 2);
          const int64_t per_seq = (a.slots + a.block - 1) / a.block;
          const int64_t cells = (per_seq * a.n_seq + 1) * a.block;  // one block never used
          std::vector<int32_t> blocks(size_t(per_seq * a.n_seq + 1));
          for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = int32_t(i);
          std::shuffle(blocks.begin(), blocks.end(), rng);
          std::vector<int32_t> info = {int32_t(a.slots), int32_t(a.block)};
          const size_t tables = size_t(2 + 2 * T);
          for (int64_t t = 0; t < T; ++t)
            info.push_back(a.info[size_t(2 * t)]),
                info.push_back(int32_t(tables + size_t(a.info[size_t(2 * t + 1)] * per_seq)));
          info.insert(info.end(), blocks.begin(), blocks.begin() + per_seq * a.n_seq);
          Tensor* q = c.random_leaf("q", DType::F32, {a.hd, a.n_head, T, 1}, rng);
          Tensor* k = c.random_leaf("k", DType::F16, {a.hd, a.n_kv, cells, 1}, rng);
          Tensor* v = c.random_leaf("v", DType::F16, {a.hd, a.n_kv, cells, 1}, rng);
          Tensor* it = c.int_leaf("info", info);
          Tensor* sinks = std::string_view(a.what).starts_with("sinks")
                              ? sinks_leaf(c, a.n_head, rng)
                              : nullptr;
          c.out = c.graph.attention_paged(q, k, v, it, 0.3f, a.window, sinks);
          c.tolerance = 1e-4;
        });
  }
  add_expert_cases(builders);
  std::vector<std::unique_ptr<Case>> cases;
  std::mt19937 rng(4242);
  for (auto& [name, build] : builders) {
    auto c = std::make_unique<Case>();
    c->name = name;
    build(*c, rng);
    cases.push_back(std::move(c));
  }
  return cases;
}

// --- the ordering contract ---------------------------------------------------------------------

namespace {

// A contiguous F32 vector in a device buffer.
struct DeviceVector {
  std::unique_ptr<Buffer> buffer;
  Tensor t;
  DeviceVector(Device& dev, int64_t n, const char* name) : buffer(dev.alloc(size_t(n) * 4)) {
    t.name = name;
    t.ne = {n, 1, 1, 1};
    t.set_contiguous_strides();
    t.data = buffer->address();
  }
};

std::vector<float> ramp(int64_t n, float start) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = start + 0.25f * float(i % 97) - float(i % 13);
  return v;
}

}  // namespace

std::vector<std::string> ordering_problems(Device& dev) {
  // Large enough that a GPU's kernel still runs when the host's next call comes (1 MiB; a
  // storage binding capped at 4 MiB still takes it whole).
  const int64_t n = 1 << 18;
  const size_t bytes = size_t(n) * 4;
  DeviceVector in(dev, n, "in"), out(dev, n, "out"), out2(dev, n, "out2");
  // out = in * 2 and out2 = in * 3, as the graph builder makes a scale node.
  Tensor twice, thrice;
  for (auto [node, dst, factor] : {std::tuple{&twice, &out, 2.0f}, {&thrice, &out2, 3.0f}}) {
    node->name = factor == 2.0f ? "twice" : "thrice";
    node->op = OpKind::Scale;
    node->src[0] = &in.t;
    node->ne = in.t.ne;
    node->set_contiguous_strides();
    node->data = dst->t.data;
    set_scale_params(*node, {factor});
  }
  // execute() receives only what the device supports (the contract's own rule).
  for (const Tensor* node : {&twice, &thrice})
    if (const std::string why = dev.unsupported_reason(*node); !why.empty())
      return {fmt::format("{} is not supported, so the ordering cannot be checked: {}",
                          node->name, why)};
  Tensor* const run_twice[] = {&twice};
  Tensor* const run_thrice[] = {&thrice};
  const std::vector<float> x = ramp(n, 1.0f), y = ramp(n, -7.0f);
  std::vector<std::string> problems;
  std::vector<float> got(static_cast<size_t>(n));
  const auto expect = [&](const Buffer& b, const std::vector<float>& from, float factor,
                          const char* what) {
    b.read(0, got.data(), bytes);
    for (int64_t i = 0; i < n; ++i)
      if (got[size_t(i)] != from[size_t(i)] * factor) {
        problems.push_back(fmt::format("{}: element {} is {}, not {}", what, i, got[size_t(i)],
                                       from[size_t(i)] * factor));
        return;
      }
  };

  in.buffer->write(0, x.data(), bytes);
  dev.execute(run_twice);
  expect(*out.buffer, x, 2.0f, "read() right after execute(), without synchronize()");

  in.buffer->write(0, x.data(), bytes);
  dev.execute(run_twice);
  in.buffer->write(0, y.data(), bytes);  // the queued scale must still read x
  dev.synchronize();
  expect(*out.buffer, x, 2.0f, "a write() after execute() seen by the work queued before it");
  expect(*in.buffer, y, 1.0f, "the bytes write() put in place");

  std::vector<float> staging = x;
  in.buffer->write_async(0, staging.data(), bytes);
  std::fill(staging.begin(), staging.end(), 0.0f);  // reusable as soon as write_async returns
  dev.execute(run_twice);
  in.buffer->write_async(0, y.data(), bytes);
  dev.execute(run_thrice);
  dev.synchronize();
  expect(*out.buffer, x, 2.0f, "write_async(), execute(), write_async(): the first execute()");
  expect(*out2.buffer, y, 3.0f, "write_async(), execute(), write_async(), execute(): the second");
  return problems;
}

}  // namespace ps::conformance
