// Packing of constant weights (baseline code: a copy in a different order) and the cache that
// keeps a device's packed copies.
#include "backends/cpu/packed.h"

#include <fmt/format.h>

#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/kquants.h"

namespace ps::cpu {
namespace {

// Group g of rows into BlockQ4_0x8 blocks (see packed.h).
void pack_q4_0_group(const BlockQ4_0* rows, BlockQ4_0x8* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    BlockQ4_0x8& p = dst[b];
    for (int j = 0; j < kPackRows; ++j) {
      const BlockQ4_0& src = rows[j * nb + b];
      p.d[j] = src.d;
      for (int v = 0; v < 4; ++v) std::memcpy(p.qs + 32 * v + 4 * j, src.qs + 4 * v, 4);
    }
  }
}

// Group g of rows into BlockQ4_0x16, BlockIQ4_NLx16 or BlockMXFP4x16 blocks (see packed.h).
template <typename Block, typename Packed>
void pack_nibbles_x16_group(const Block* rows, Packed* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    Packed& p = dst[b];
    for (int j = 0; j < kPackRowsK; ++j) {
      const Block& src = rows[j * nb + b];
      if constexpr (std::is_same_v<Block, BlockMXFP4>)
        p.e[j] = src.e;
      else
        p.d[j] = src.d;
      for (int v = 0; v < 4; ++v) std::memcpy(p.qs[v][j], src.qs + 4 * v, 4);
    }
  }
}

// Group g of rows into BlockIQ4_XSx16 super-blocks (see packed.h).
void pack_iq4_xs_group(const BlockIQ4_XS* rows, BlockIQ4_XSx16* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    BlockIQ4_XSx16& p = dst[b];
    for (int j = 0; j < kPackRowsK; ++j) {
      const BlockIQ4_XS& src = rows[j * nb + b];
      p.d[j] = src.d;
      for (int ib = 0; ib < QK_K / 32; ++ib) {
        p.scales[ib][j] = int8_t(iq4_xs_scale(src, ib));
        for (int v = 0; v < 4; ++v) std::memcpy(p.qs[ib][v][j], src.qs + 16 * ib + 4 * v, 4);
      }
    }
  }
}

void pack_q5_0x16_group(const BlockQ5_0* rows, BlockQ5_0x16* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    BlockQ5_0x16& p = dst[b];
    for (int j = 0; j < kPackRowsK; ++j) {
      const BlockQ5_0& src = rows[j * nb + b];
      p.d[j] = src.d;
      for (int v = 0; v < 4; ++v) std::memcpy(p.qs[v][j], src.qs + 4 * v, 4);
      uint32_t bits;
      std::memcpy(&bits, src.qh, 4);
      for (int i = 0; i < 4; ++i) {
        uint8_t byte = 0;
        for (int v = 0; v < 4; ++v)
          byte = uint8_t(byte | ((bits >> (4 * v + i)) & 1) << v |
                         ((bits >> (16 + 4 * v + i)) & 1) << (4 + v));
        p.qh[j][i] = byte;
      }
    }
  }
}

void pack_q8_0x16_group(const BlockQ8_0* rows, BlockQ8_0x16* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    BlockQ8_0x16& p = dst[b];
    for (int j = 0; j < kPackRowsK; ++j) {
      const BlockQ8_0& src = rows[j * nb + b];
      p.d[j] = src.d;
      for (int v = 0; v < 8; ++v) std::memcpy(p.qs[v][j], src.qs + 4 * v, 4);
    }
  }
}

void pack_bf16x16_group(const uint16_t* rows, uint8_t* dst, int64_t k) {
  for (int64_t p = 0; p < k / 2; ++p)
    for (int j = 0; j < kPackRowsK; ++j)
      std::memcpy(dst + 64 * p + 4 * j, rows + size_t(j) * size_t(k) + 2 * p, 4);
}

// Group g of rows into BlockQ4_Kx16 or BlockQ5_Kx16 super-blocks (see packed.h).
template <typename Block, typename Packed>
void pack_k4_group(const Block* rows, Packed* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    Packed& p = dst[b];
    for (int j = 0; j < kPackRowsK; ++j) {
      const Block& src = rows[j * nb + b];
      if constexpr (std::is_same_v<Block, BlockQ5_K>)
        for (int u = 0; u < 8; ++u) std::memcpy(p.qh[u][j], src.qh + 4 * u, 4);
      p.d[j] = src.d;
      p.dmin[j] = src.dmin;
      uint8_t sm[16];
      kquants::unpack_k4_scales_mins(src.scales, sm);
      for (int s = 0; s < 8; ++s) {
        p.scales[s][j] = sm[s];
        p.mins[s][j] = sm[8 + s];
      }
      for (int pair = 0; pair < 4; ++pair)
        for (int u = 0; u < 8; ++u) std::memcpy(p.qs[pair][u][j], src.qs + 32 * pair + 4 * u, 4);
    }
  }
}

// Group g of rows into BlockQ2_Kx16 or BlockQ3_Kx16 super-blocks (see packed.h).
template <typename Block, typename Packed>
void pack_k2_group(const Block* rows, Packed* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    Packed& p = dst[b];
    for (int j = 0; j < kPackRowsK; ++j) {
      const Block& src = rows[j * nb + b];
      p.d[j] = src.d;
      if constexpr (std::is_same_v<Block, BlockQ3_K>) {
        uint8_t raw[16];
        kquants::unpack_q3_k_scales(src.scales, raw);
        for (int s = 0; s < 16; ++s) p.scales[s / 2][j][s % 2] = int8_t(raw[s] - 32);
        for (int u = 0; u < 8; ++u) std::memcpy(p.hmask[u][j], src.hmask + 4 * u, 4);
      } else {
        p.dmin[j] = src.dmin;
        for (int s = 0; s < 16; ++s) p.scales[s / 2][j][s % 2] = src.scales[s];
      }
      for (int h = 0; h < 2; ++h)
        for (int u = 0; u < 8; ++u) std::memcpy(p.qs[h][u][j], src.qs + 32 * h + 4 * u, 4);
    }
  }
}

// Group g of rows into BlockQ6_Kx16 super-blocks (see packed.h).
void pack_q6_k_group(const BlockQ6_K* rows, BlockQ6_Kx16* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    BlockQ6_Kx16& p = dst[b];
    for (int j = 0; j < kPackRowsK; ++j) {
      const BlockQ6_K& src = rows[j * nb + b];
      p.d[j] = src.d;
      for (int t = 0; t < 8; ++t) {
        p.scales[t][j][0] = src.scales[2 * t];
        p.scales[t][j][1] = src.scales[2 * t + 1];
      }
      for (int h = 0; h < 2; ++h)
        for (int u = 0; u < 8; ++u) {
          for (int k = 0; k < 2; ++k)
            std::memcpy(p.ql[h][k][u][j], src.ql + 64 * h + 32 * k + 4 * u, 4);
          std::memcpy(p.qh[h][u][j], src.qh + 32 * h + 4 * u, 4);
        }
    }
  }
}

}  // namespace

PackedLayout packed_layout(DType w, int rows, int64_t k) {
  const bool q4_0x8 = w == DType::Q4_0 && rows == kPackRows;
  if (rows != kPackRowsK && !q4_0x8) return {};
  switch (w) {
    case DType::Q4_0:
      return {rows, row_bytes(w, k)};
    case DType::Q4_K:
      return {kPackRowsK, sizeof(BlockQ4_Kx16) / kPackRowsK * size_t(k / QK_K)};
    case DType::BF16:
      if (k % 2 != 0) return {};
      return {kPackRowsK, row_bytes(w, k)};
    case DType::Q5_0:
    case DType::Q8_0:
    case DType::Q2_K:
    case DType::IQ4_NL:
    case DType::MXFP4:
      return {kPackRowsK, row_bytes(w, k)};
    case DType::Q3_K:
      return {kPackRowsK, sizeof(BlockQ3_Kx16) / kPackRowsK * size_t(k / QK_K)};
    case DType::IQ4_XS:
      return {kPackRowsK, sizeof(BlockIQ4_XSx16) / kPackRowsK * size_t(k / QK_K)};
    case DType::Q5_K:
      return {kPackRowsK, sizeof(BlockQ5_Kx16) / kPackRowsK * size_t(k / QK_K)};
    case DType::Q6_K:
      return {kPackRowsK, row_bytes(w, k)};
    default:
      return {};
  }
}

const PackedKernel* packed_kernel(DType w, IsaLevel isa) {
  const IsaLevel best = best_isa_level();
  const IsaLevel level = isa < best ? isa : best;
  if (level >= IsaLevel::Avx512) {
    if (w == DType::BF16 && cpu_features().avx512_bf16) return packed_kernel_avx512_bf16(w);
    if (const PackedKernel* k = packed_kernel_avx512(w)) return k;
  }
  // The AVX2 Q4_0 kernel serves AVX-512 CPUs too: decode is bound by the weight stream, which
  // it keeps up with.
  if (level >= IsaLevel::AvxVnni && cpu_features().avx_vnni) return packed_kernel_avxvnni(w);
  if (level >= IsaLevel::Avx2) return packed_kernel_avx2(w);
  return nullptr;
}

void pack_rows(DType w, int rows, const void* src, void* dst, int64_t k, int64_t n,
               ThreadPool& pool) {
  const PackedLayout layout = packed_layout(w, rows, k);
  if (layout.rows == 0)
    throw BackendError(
        fmt::format("cpu: no packed layout for {} weights in groups of {}", dtype_name(w), rows));
  const size_t row = row_bytes(w, k);
  const int64_t groups = n / layout.rows;
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  const size_t group_src = row * size_t(layout.rows), group_dst = layout.row_bytes * layout.rows;
  pool.parallel_for(groups, [&](int64_t g, int) {
    const uint8_t* from = s + size_t(g) * group_src;
    uint8_t* to = d + size_t(g) * group_dst;
    if (w == DType::Q4_0 && rows == kPackRows)
      pack_q4_0_group(reinterpret_cast<const BlockQ4_0*>(from), reinterpret_cast<BlockQ4_0x8*>(to),
                      k / QK4_0);
    else if (w == DType::Q4_0)
      pack_nibbles_x16_group(reinterpret_cast<const BlockQ4_0*>(from),
                             reinterpret_cast<BlockQ4_0x16*>(to), k / QK4_0);
    else if (w == DType::IQ4_NL)
      pack_nibbles_x16_group(reinterpret_cast<const BlockIQ4_NL*>(from),
                             reinterpret_cast<BlockIQ4_NLx16*>(to), k / 32);
    else if (w == DType::MXFP4)
      pack_nibbles_x16_group(reinterpret_cast<const BlockMXFP4*>(from),
                             reinterpret_cast<BlockMXFP4x16*>(to), k / 32);
    else if (w == DType::IQ4_XS)
      pack_iq4_xs_group(reinterpret_cast<const BlockIQ4_XS*>(from),
                        reinterpret_cast<BlockIQ4_XSx16*>(to), k / QK_K);
    else if (w == DType::Q4_K)
      pack_k4_group(reinterpret_cast<const BlockQ4_K*>(from), reinterpret_cast<BlockQ4_Kx16*>(to),
                    k / QK_K);
    else if (w == DType::BF16)
      pack_bf16x16_group(reinterpret_cast<const uint16_t*>(from), to, k);
    else if (w == DType::Q5_0)
      pack_q5_0x16_group(reinterpret_cast<const BlockQ5_0*>(from),
                         reinterpret_cast<BlockQ5_0x16*>(to), k / QK5_0);
    else if (w == DType::Q8_0)
      pack_q8_0x16_group(reinterpret_cast<const BlockQ8_0*>(from),
                         reinterpret_cast<BlockQ8_0x16*>(to), k / QK8_0);
    else if (w == DType::Q2_K)
      pack_k2_group(reinterpret_cast<const BlockQ2_K*>(from), reinterpret_cast<BlockQ2_Kx16*>(to),
                    k / QK_K);
    else if (w == DType::Q3_K)
      pack_k2_group(reinterpret_cast<const BlockQ3_K*>(from), reinterpret_cast<BlockQ3_Kx16*>(to),
                    k / QK_K);
    else if (w == DType::Q5_K)
      pack_k4_group(reinterpret_cast<const BlockQ5_K*>(from), reinterpret_cast<BlockQ5_Kx16*>(to),
                    k / QK_K);
    else
      pack_q6_k_group(reinterpret_cast<const BlockQ6_K*>(from), reinterpret_cast<BlockQ6_Kx16*>(to),
                      k / QK_K);
  });
  // The rows past the last whole group, GGUF's layout at their packed offsets.
  for (int64_t r = groups * layout.rows; r < n; ++r) {
    uint8_t* to = d + size_t(r) * layout.row_bytes;
    std::memcpy(to, s + size_t(r) * row, row);
    std::memset(to + row, 0, layout.row_bytes - row);
  }
}

bool can_pack(const Tensor& w, int rows) {
  const PackedLayout layout = packed_layout(w.type, rows, w.ne[0]);
  return w.constant && w.op == OpKind::None && layout.rows > 0 && w.is_contiguous() &&
         w.ne[2] == 1 && w.ne[3] == 1 && w.ne[1] >= layout.rows &&
         w.ne[0] % block_size(w.type) == 0;
}

const void* PackedWeights::get(const Tensor& w, int rows, ThreadPool& pool) {
  std::lock_guard lock(mu_);
  auto it = entries_.find({w.data, rows});
  if (it != entries_.end()) {
    const Entry& e = it->second;
    if (e.type != w.type || e.k != w.ne[0] || e.n != w.ne[1])
      throw BackendError(fmt::format(
          "cpu: weight '{}' shares its bytes with a packed weight of another type or shape",
          w.name));
    return e.data.data();
  }
  const size_t bytes = packed_layout(w.type, rows, w.ne[0]).row_bytes * size_t(w.ne[1]);
  Entry e{w.type, w.ne[0], w.ne[1], LargeBuffer(bytes)};
  pack_rows(w.type, rows, w.data, e.data.data(), w.ne[0], w.ne[1], pool);
  return entries_.emplace(std::pair{w.data, rows}, std::move(e)).first->second.data.data();
}

size_t PackedWeights::bytes() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [key, e] : entries_) n += e.data.size();
  return n;
}

}  // namespace ps::cpu
