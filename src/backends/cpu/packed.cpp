// Packing of constant weights (baseline code: a copy in a different order) and the cache that
// keeps a device's packed copies.
#include "backends/cpu/packed.h"

#include <fmt/format.h>

#include <cstring>

#include "core/error.h"

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

}  // namespace

const PackedKernel* packed_kernel(DType w, IsaLevel isa) {
  const IsaLevel best = best_isa_level();
  const IsaLevel level = isa < best ? isa : best;
  // The AVX2 kernels serve AVX-512 CPUs too: decode is bound by the weight stream, which
  // they keep up with.
  if (level >= IsaLevel::Avx2) return packed_kernel_avx2(w);
  return nullptr;
}

void pack_rows(DType w, const void* src, void* dst, int64_t k, int64_t n, ThreadPool& pool) {
  if (w != DType::Q4_0)
    throw BackendError(fmt::format("cpu: no packed layout for {} weights", dtype_name(w)));
  const int64_t nb = k / QK4_0;
  const size_t row = size_t(nb) * sizeof(BlockQ4_0);
  const int64_t groups = n / kPackRows;
  const auto* s = static_cast<const BlockQ4_0*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  pool.parallel_for(groups, [&](int64_t g, int) {
    pack_q4_0_group(s + g * kPackRows * nb,
                    reinterpret_cast<BlockQ4_0x8*>(d + size_t(g) * kPackRows * row), nb);
  });
  const size_t tail = size_t(groups) * kPackRows * row;
  std::memcpy(d + tail, static_cast<const uint8_t*>(src) + tail, size_t(n) * row - tail);
}

bool can_pack(const Tensor& w) {
  return w.constant && w.op == OpKind::None && w.type == DType::Q4_0 && w.is_contiguous() &&
         w.ne[2] == 1 && w.ne[3] == 1 && w.ne[1] >= kPackRows && w.ne[0] % QK4_0 == 0;
}

const void* PackedWeights::get(const Tensor& w, ThreadPool& pool) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(w.data);
  if (it != entries_.end()) {
    const Entry& e = it->second;
    if (e.type != w.type || e.k != w.ne[0] || e.n != w.ne[1])
      throw BackendError(fmt::format(
          "cpu: weight '{}' shares its bytes with a packed weight of another type or shape",
          w.name));
    return e.data.data();
  }
  Entry e{w.type, w.ne[0], w.ne[1], std::vector<uint8_t>(w.n_bytes())};
  pack_rows(w.type, w.data, e.data.data(), w.ne[0], w.ne[1], pool);
  return entries_.emplace(w.data, std::move(e)).first->second.data.data();
}

size_t PackedWeights::bytes() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [key, e] : entries_) n += e.data.size();
  return n;
}

}  // namespace ps::cpu
