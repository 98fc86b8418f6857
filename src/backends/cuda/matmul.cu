// out[N, M] = W[K, N] x X[K, M] for weights of every dtype, F32 activations and output.
// - A few activation rows (decode, M <= 8): one warp per weight row; its lanes decode groups of
//   32 weights each and multiply them with up to 8 activation rows, so the weights are read
//   once, in full cache lines across the warp. Weight bytes dominate the traffic at batch 1.
// - Larger batches (prompts): 64 x 64 output tiles; each step decodes a 64-row x 32 slice of W
//   and loads a 64-row x 32 slice of X into shared memory, and each of 256 threads accumulates
//   4 x 4 outputs.
// Activations stay in float: no quantization of X, unlike the CPU backend's integer dots.
#include "backends/cuda/kernels.h"
#include "backends/cuda/tile.cuh"
#include "backends/cuda/weights.cuh"

namespace ps::gpu {
namespace {

constexpr int kVecThreads = 128;
constexpr int64_t kVecMaxCols = 8;

template <DType T, int C>
__global__ void matmul_vec_kernel(View w, View x, View d, int cols) {
  const int lane = int(threadIdx.x) % PS_WARP_SIZE;
  const int64_t row =
      int64_t(blockIdx.x) * (blockDim.x / PS_WARP_SIZE) + int64_t(threadIdx.x) / PS_WARP_SIZE;
  if (row >= w.ne[1]) return;
  const int64_t k = w.ne[0], groups = (k + 31) / 32;
  const uint8_t* wrow = reinterpret_cast<const uint8_t*>(w.data + row * w.nb[1]);
  float acc[C];
  for (int c = 0; c < C; ++c) acc[c] = 0.0f;
  float v[32];
  for (int64_t g = lane; g < groups; g += PS_WARP_SIZE) {
    decode32<T>(wrow, g, k, v);
    const int n = int(imin<int64_t>(32, k - 32 * g));
    for (int c = 0; c < C; ++c) {
      if (c >= cols) break;
      const float* xs = reinterpret_cast<const float*>(x.data + c * x.nb[1]) + 32 * g;
      float s = 0.0f;
      if (n == 32) {
        for (int i = 0; i < 32; ++i) s += v[i] * xs[i];
      } else {
        for (int i = 0; i < n; ++i) s += v[i] * xs[i];
      }
      acc[c] += s;
    }
  }
  for (int c = 0; c < C; ++c) {
    if (c >= cols) break;
    const float s = warp_sum(acc[c]);
    if (lane == 0) reinterpret_cast<float*>(d.data + c * d.nb[1])[row] = s;
  }
}

template <DType T>
__global__ void matmul_tile_kernel(View w, View x, View d) {
  __shared__ float ws[kTile][33];
  __shared__ float xs[kTile][33];
  const int64_t n0 = int64_t(blockIdx.x) * kTile, m0 = int64_t(blockIdx.y) * kTile;
  const int64_t k = w.ne[0], n_rows = w.ne[1], m_rows = x.ne[1];
  const int tid = int(threadIdx.x), tx = tid % 16, ty = tid / 16;
  float acc[4][4] = {};
  const uint8_t* row =
      n0 + tid < n_rows ? reinterpret_cast<const uint8_t*>(w.data + (n0 + tid) * w.nb[1]) : nullptr;
  for (int64_t g = 0; 32 * g < k; ++g) {
    stage_weights<T>(row, g, k, ws, tid);
    for (int e = tid; e < kTile * 32; e += kTileThreads) {
      const int m = e / 32, i = e % 32;
      const int64_t kk = 32 * g + i;
      xs[m][i] = m0 + m < m_rows && kk < k
                     ? reinterpret_cast<const float*>(x.data + (m0 + m) * x.nb[1])[kk]
                     : 0.0f;
    }
    __syncthreads();
    tile_step(ws, xs, tx, ty, acc);
    __syncthreads();
  }
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) {
      const int64_t n = n0 + ty + 16 * r, m = m0 + tx + 16 * c;
      if (n < n_rows && m < m_rows) reinterpret_cast<float*>(d.data + m * d.nb[1])[n] = acc[r][c];
    }
}

template <DType T, int C>
void launch_vec(const Launch& l, const View& w, const View& x, const View& d, int cols) {
  const int rows_per_block = kVecThreads / l.warp;
  const int64_t blocks = (w.ne[1] + rows_per_block - 1) / rows_per_block;
  auto* kernel = &matmul_vec_kernel<T, C>;
  PS_LAUNCH(kernel, unsigned(blocks), kVecThreads, l.stream, w, x, d, cols);
}

}  // namespace

void matmul(const Launch& l, const Tensor& node) {
  const Tensor& wt = *node.src[0];
  const Tensor& xt = *node.src[1];
  const View w = view_of(wt), d = view_of(node);
  const int64_t m = xt.ne[1];
  with_weight_type(wt.type, [&]<DType T>() {
    if (m > kVecMaxCols) {
      const dim3 grid(unsigned((w.ne[1] + kTile - 1) / kTile), unsigned((m + kTile - 1) / kTile));
      PS_LAUNCH(matmul_tile_kernel<T>, grid, kTileThreads, l.stream, w, view_of(xt), d);
      return;
    }
    // Up to 8 activation rows in one pass; the kernel's column count rounded up to a power
    // of two keeps the variants few.
    View x = view_of(xt);
    const int cols = int(m);
    if (cols == 1)
      launch_vec<T, 1>(l, w, x, d, cols);
    else if (cols == 2)
      launch_vec<T, 2>(l, w, x, d, cols);
    else if (cols <= 4)
      launch_vec<T, 4>(l, w, x, d, cols);
    else
      launch_vec<T, 8>(l, w, x, d, cols);
  });
  check_launch("matmul");
}

}  // namespace ps::gpu
