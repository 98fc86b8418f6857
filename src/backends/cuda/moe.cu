// Mixture-of-experts ops (graph/ops.h), as backends/cpu/moe.cpp: choosing experts per token,
// their weights, the matmul over the chosen experts only, and the weighted sum of their outputs.
// matmul_id decodes with one warp per (weight row, slot and token) pair, as matmul's decode
// kernel does per row: each pair reads only its expert's rows. Prompts group the tokens per
// expert: a block takes 64 rows of one expert and the pairs that chose it, gathered into shared
// memory, and computes 64 x 64 tiles of them as matmul's prompt kernel does, so the expert's
// weights are read once per 64 of its tokens.
#include "backends/cuda/kernels.h"
#include "backends/cuda/tile.cuh"
#include "backends/cuda/weights.cuh"
#include "graph/ops.h"

namespace ps::gpu {
namespace {

constexpr int kThreads = 128;

__device__ inline bool ranks_above(float a, int64_t ia, float b, int64_t ib) {
  const bool na = isnan(a), nb = isnan(b);
  if (na || nb) return (!na && nb) || (na && nb && ia < ib);
  return a > b || (a == b && ia < ib);
}

// One thread per element: its rank in the total order is the number of elements above it, and
// an element of rank below k writes its index there (ranks are distinct). blockIdx.y is the row.
__global__ void top_k_kernel(View x, View d, int k) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t r = blockIdx.y, n = x.ne[0];
  if (i >= n) return;
  const float* v = reinterpret_cast<const float*>(x.data + r * x.nb[1]);
  int64_t rank = 0;
  for (int64_t q = 0; q < n; ++q) rank += ranks_above(v[q], q, v[i], i) ? 1 : 0;
  if (rank < k) reinterpret_cast<int32_t*>(d.data + r * d.nb[1])[rank] = int32_t(i);
}

__global__ void expert_weights_kernel(View z, View ids, View d, int gating, bool normalize,
                                      float scale) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= z.ne[1]) return;
  const int64_t E = z.ne[0], k = ids.ne[0];
  const float* zr = reinterpret_cast<const float*>(z.data + t * z.nb[1]);
  const int32_t* id = reinterpret_cast<const int32_t*>(ids.data + t * ids.nb[1]);
  float* w = reinterpret_cast<float*>(d.data + t * d.nb[1]);
  for (int64_t j = 0; j < k; ++j)
    if (id[j] < 0 || id[j] >= E) {
      for (int64_t q = 0; q < k; ++q) w[q] = NAN;
      return;
    }
  if (gating == int(ExpertGating::Sigmoid)) {
    for (int64_t j = 0; j < k; ++j) w[j] = 1.0f / (1.0f + expf(-zr[id[j]]));
  } else {
    float mx = -INFINITY, sum = 0.0f;
    if (gating == int(ExpertGating::Softmax)) {
      for (int64_t e = 0; e < E; ++e) mx = fmaxf(mx, zr[e]);
      for (int64_t e = 0; e < E; ++e) sum += expf(zr[e] - mx);
    } else {
      for (int64_t j = 0; j < k; ++j) mx = fmaxf(mx, zr[id[j]]);
      for (int64_t j = 0; j < k; ++j) sum += expf(zr[id[j]] - mx);
    }
    for (int64_t j = 0; j < k; ++j) w[j] = expf(zr[id[j]] - mx) / sum;
  }
  if (normalize) {
    float s = 0.0f;
    for (int64_t j = 0; j < k; ++j) s += w[j];
    for (int64_t j = 0; j < k; ++j) w[j] /= s;
  }
  if (scale != 1.0f)
    for (int64_t j = 0; j < k; ++j) w[j] *= scale;
}

// One warp per weight row of one (slot, token) pair: blockIdx.x groups rows, blockIdx.y and z
// the pairs.
template <DType T>
__global__ void matmul_id_kernel(View w, View x, View ids, View d) {
  const int lane = int(threadIdx.x) % PS_WARP_SIZE;
  const int64_t row =
      int64_t(blockIdx.x) * (blockDim.x / PS_WARP_SIZE) + int64_t(threadIdx.x) / PS_WARP_SIZE;
  const int64_t pair = int64_t(blockIdx.y) + int64_t(blockIdx.z) * gridDim.y;
  const int64_t k = ids.ne[0];
  if (row >= w.ne[1] || pair >= k * ids.ne[1]) return;
  const int64_t j = pair % k, t = pair / k;
  const int32_t e = reinterpret_cast<const int32_t*>(ids.data + t * ids.nb[1])[j];
  float* out = reinterpret_cast<float*>(d.data + j * d.nb[1] + t * d.nb[2]) + row;
  if (e < 0 || e >= w.ne[2]) {
    if (lane == 0) *out = NAN;
    return;
  }
  const int64_t K = w.ne[0], groups = (K + 31) / 32;
  const uint8_t* wrow = reinterpret_cast<const uint8_t*>(w.data + e * w.nb[2] + row * w.nb[1]);
  const float* xs =
      reinterpret_cast<const float*>(x.data + (x.ne[1] == 1 ? 0 : j) * x.nb[1] + t * x.nb[2]);
  float acc = 0.0f, v[32];
  for (int64_t g = lane; g < groups; g += PS_WARP_SIZE) {
    decode32<T>(wrow, g, K, v);
    const int n = int(imin<int64_t>(32, K - 32 * g));
    // Unrolled with constant indices, so that v stays in registers (matmul.cu's vec kernel).
    PS_UNROLL
    for (int i = 0; i < 32; ++i) acc += v[i] * (i < n ? xs[32 * g + i] : 0.0f);
  }
  const float s = warp_sum(acc);
  if (lane == 0) *out = s;
}

constexpr int64_t kTileFrom = 9;     // tokens from which prompts take the tiles (as matmul)
constexpr int64_t kIdWindow = 1024;  // tokens scanned per pass: at most this many pairs match

// Block (x, y): weight rows [64 x, 64 x + 64) of expert y and the pairs that chose it; block y
// == E writes NaN for the pairs whose id lies outside the experts.
template <DType T>
__global__ void matmul_id_tile_kernel(View w, View x, View ids, View d) {
  __shared__ float ws[kTile][33];
  __shared__ float xs[kTile][33];
  __shared__ int32_t list[kIdWindow];
  __shared__ int count;
  const int64_t K = w.ne[0], N = w.ne[1], E = w.ne[2], k = ids.ne[0], n_tok = ids.ne[1];
  const int64_t n0 = int64_t(blockIdx.x) * kTile, expert = blockIdx.y;
  const int tid = int(threadIdx.x), tx = tid % 16, ty = tid / 16;
  const auto at = [&](int64_t pair) {
    return reinterpret_cast<float*>(d.data + (pair % k) * d.nb[1] + (pair / k) * d.nb[2]);
  };
  const uint8_t* row =
      n0 + tid < N && expert < E
          ? reinterpret_cast<const uint8_t*>(w.data + expert * w.nb[2] + (n0 + tid) * w.nb[1])
          : nullptr;
  for (int64_t tok0 = 0; tok0 < n_tok; tok0 += kIdWindow) {
    if (tid == 0) count = 0;
    __syncthreads();
    const int64_t end = imin<int64_t>(n_tok, tok0 + kIdWindow);
    for (int64_t q = tok0 * k + tid; q < end * k; q += kTileThreads) {
      const int32_t e = reinterpret_cast<const int32_t*>(ids.data + (q / k) * ids.nb[1])[q % k];
      if (e < 0 || e >= E) {
        if (expert == E)
          for (int64_t n = n0; n < imin<int64_t>(N, n0 + kTile); ++n) at(q)[n] = NAN;
      } else if (e == expert) {
        list[atomicAdd(&count, 1)] = int32_t(q);
      }
    }
    __syncthreads();
    const int c = count;
    for (int m0 = 0; m0 < c; m0 += kTile) {
      float acc[4][4] = {};
      for (int64_t g = 0; 32 * g < K; ++g) {
        stage_weights<T>(row, g, K, ws, tid);
        for (int e = tid; e < kTile * 32; e += kTileThreads) {
          const int m = e / 32, i = e % 32;
          const int64_t kk = 32 * g + i;
          float value = 0.0f;
          if (m0 + m < c && kk < K) {
            const int64_t pair = list[m0 + m];
            value = reinterpret_cast<const float*>(
                x.data + (x.ne[1] == 1 ? 0 : pair % k) * x.nb[1] + (pair / k) * x.nb[2])[kk];
          }
          xs[m][i] = value;
        }
        __syncthreads();
        tile_step(ws, xs, tx, ty, acc);
        __syncthreads();
      }
      for (int cc = 0; cc < 4; ++cc) {
        const int m = m0 + tx + 16 * cc;
        if (m >= c) break;
        float* out = at(list[m]);
        for (int r = 0; r < 4; ++r) {
          const int64_t n = n0 + ty + 16 * r;
          if (n < N) out[n] = acc[r][cc];
        }
      }
    }
    __syncthreads();  // every thread has read count and list before the next window resets them
  }
}

__global__ void expert_sum_kernel(View x, View w, View d) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t t = blockIdx.y;
  if (i >= x.ne[0]) return;
  const float* wt = reinterpret_cast<const float*>(w.data + t * w.nb[1]);
  float s = 0.0f;
  for (int64_t j = 0; j < x.ne[1]; ++j)
    s += reinterpret_cast<const float*>(x.data + j * x.nb[1] + t * x.nb[2])[i] * wt[j];
  reinterpret_cast<float*>(d.data + t * d.nb[1])[i] = s;
}

}  // namespace

void top_k(const Launch& l, const Tensor& node) {
  const Tensor& x = *node.src[0];
  const dim3 grid(unsigned((x.ne[0] + kThreads - 1) / kThreads), unsigned(x.ne[1]));
  PS_LAUNCH(top_k_kernel, grid, kThreads, l.stream, view_of(x), view_of(node),
            int(top_k_params(node).k));
  check_launch("top_k");
}

void expert_weights(const Launch& l, const Tensor& node) {
  const Tensor& z = *node.src[0];
  const ExpertWeightsParams p = expert_weights_params(node);
  PS_LAUNCH(expert_weights_kernel, blocks_for(z.ne[1], kThreads, 65535LL * 65535), kThreads,
            l.stream, view_of(z), view_of(*node.src[1]), view_of(node), int(p.gating), p.normalize,
            p.scale);
  check_launch("expert_weights");
}

void matmul_id(const Launch& l, const Tensor& node) {
  const Tensor& wt = *node.src[0];
  const Tensor& ids = *node.src[2];
  if (ids.ne[1] >= kTileFrom) {
    const dim3 grid(unsigned((wt.ne[1] + kTile - 1) / kTile), unsigned(wt.ne[2] + 1));
    with_weight_type(wt.type, [&]<DType T>() {
      PS_LAUNCH(matmul_id_tile_kernel<T>, grid, kTileThreads, l.stream, view_of(wt),
                view_of(*node.src[1]), view_of(ids), view_of(node));
    });
    check_launch("matmul_id");
    return;
  }
  const int64_t pairs = ids.ne[0] * ids.ne[1];
  const int rows_per_block = kThreads / l.warp;
  const unsigned gy = unsigned(pairs < 65535 ? pairs : 65535);
  const dim3 grid(unsigned((wt.ne[1] + rows_per_block - 1) / rows_per_block), gy,
                  unsigned((pairs + gy - 1) / gy));
  with_weight_type(wt.type, [&]<DType T>() {
    PS_LAUNCH(matmul_id_kernel<T>, grid, kThreads, l.stream, view_of(wt), view_of(*node.src[1]),
              view_of(ids), view_of(node));
  });
  check_launch("matmul_id");
}

void expert_sum(const Launch& l, const Tensor& node) {
  const Tensor& x = *node.src[0];
  const dim3 grid(unsigned((x.ne[0] + kThreads - 1) / kThreads), unsigned(x.ne[2]));
  PS_LAUNCH(expert_sum_kernel, grid, kThreads, l.stream, view_of(x), view_of(*node.src[1]),
            view_of(node));
  check_launch("expert_sum");
}

}  // namespace ps::gpu
