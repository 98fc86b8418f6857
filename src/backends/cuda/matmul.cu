// out[N, M] = W[K, N] x X[K, M] for weights of every dtype, F32 activations and output.
// - A few activation rows (decode, M <= 8): one warp per weight row; its lanes decode groups of
//   32 weights each and multiply them with up to 8 activation rows, so the weights are read
//   once, in full cache lines across the warp. Weight bytes dominate the traffic at batch 1.
// - Larger batches (prompts): 64 x 64 output tiles; each step decodes a 64-row x 32 slice of W
//   and loads a 64-row x 32 slice of X into shared memory, and each of 256 threads accumulates
//   4 x 4 outputs.
// Activations stay in float: no quantization of X, unlike the CPU backend's integer dots.
// - Under POLYSTACK_CUDA_MATVEC=dp4a, decode steps of Q4_K, Q6_K and Q8_0 weights round the
//   activations to int8 first (blocks of 32 with a float scale and the block's sum, in the
//   launch's scratch memory), as the CPU backend does, and dot the weights' integer values with
//   them four at a time; Q4_K's rows are read in 16-byte loads. A candidate for speed, measured
//   on hardware against the float kernel before it becomes the default.
#include <cstring>

#include "backends/cuda/kernels.h"
#include "backends/cuda/tile.cuh"
#include "backends/cuda/weights.cuh"

namespace ps::gpu {
namespace {

// --- int8 activations (Launch::int8_decode) ---------------------------------------------------

// Where the rounded activations of a decode step sit in the scratch memory: per column `blocks`
// blocks of 32 int8 values, then per column and block its scale and the scaled sum of its values.
struct Int8Rows {
  int8_t* q;
  float* ds;       // (scale, scale x the sum of the values) per block
  int64_t blocks;  // per column
};

inline int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

bool int8_decode_type(DType t) { return t == DType::Q4_K || t == DType::Q6_K || t == DType::Q8_0; }

// Whether the int8 path takes this node: a weight type it has, whole blocks (super-blocks of
// the k-quants), at most kVecMaxCols activation rows, and for Q4_K rows at 16-byte boundaries.
bool takes_int8_decode(const Tensor& node) {
  const Tensor& w = *node.src[0];
  const int64_t m = node.src[1]->ne[1];
  if (!int8_decode_type(w.type) || m < 1 || m > 8) return false;
  if (w.ne[0] % (w.type == DType::Q8_0 ? 32 : 256) != 0) return false;
  if (node.src[1]->ne[2] * node.src[1]->ne[3] != 1) return false;
  if (w.type == DType::Q4_K && (reinterpret_cast<uintptr_t>(w.data) % 16 != 0 || w.nb[1] % 16 != 0))
    return false;
  return true;
}

#if defined(POLYSTACK_GPU_EMULATION)
struct Words4 {
  uint32_t x, y, z, w;
};
#else
using Words4 = uint4;
#endif

// 16 bytes at a 16-byte boundary: one load.
__device__ inline Words4 load_words4(const void* p) {
#if defined(POLYSTACK_GPU_EMULATION)
  Words4 r;
  std::memcpy(&r, p, 16);
  return r;
#else
  return *reinterpret_cast<const Words4*>(p);
#endif
}
// Four bytes at a 2-byte boundary (Q6_K and Q8_0 blocks): two loads.
__device__ inline int load_int_b2(const uint8_t* p) {
  return int(uint32_t(load_u16_aligned(p)) | uint32_t(load_u16_aligned(p + 2)) << 16);
}

// c + the dot of a's and b's four signed bytes.
__device__ inline int dot4(int a, int b, int c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(a, b, c);
#else
  for (int i = 0; i < 4; ++i) c += int(int8_t(a >> (8 * i))) * int(int8_t(b >> (8 * i)));
  return c;
#endif
}

// One thread per block of 32 activations: the scale (amax / 127), the rounded values and their
// sum times the scale. Q4_K's minimums take that sum rather than the floats': the rounding
// errors of the scaled and the subtracted parts then cancel as they do in the weights.
__global__ void quantize_int8_kernel(View x, Int8Rows out, int cols) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= out.blocks * cols) return;
  const int64_t c = i / out.blocks, b = i % out.blocks;
  const float* xs = reinterpret_cast<const float*>(x.data + c * x.nb[1]) + 32 * b;
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(xs[j]));
  const float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
  int8_t* q = out.q + 32 * i;
  int qsum = 0;
  for (int j = 0; j < 32; ++j) {
    q[j] = int8_t(int(rintf(xs[j] * id)));
    qsum += q[j];
  }
  float* ds = out.ds + 2 * i;
  ds[0] = d;
  ds[1] = d * float(qsum);
}

// The 8 words of int8 activations of block `b` of column c.
__device__ inline void load_x8(const Int8Rows& x, int c, int64_t b, int (&v)[8]) {
  const int8_t* p = x.q + (int64_t(c) * x.blocks + b) * 32;
  const Words4 a = load_words4(p), e = load_words4(p + 16);
  v[0] = int(a.x), v[1] = int(a.y), v[2] = int(a.z), v[3] = int(a.w);
  v[4] = int(e.x), v[5] = int(e.y), v[6] = int(e.z), v[7] = int(e.w);
}

// Units of work per row: Q4_K a pair of 32-value groups (one 32-byte run of nibbles), Q6_K half
// a super-block (128 values sharing their high bits), Q8_0 a block.
template <DType T>
constexpr int kUnitValues = T == DType::Q4_K   ? 64
                            : T == DType::Q6_K ? 128
                                               : 32;

template <DType T, int C>
__device__ inline void dot_unit(const uint8_t* wrow, int64_t u, const Int8Rows& x, int cols,
                                float (&acc)[C]) {
  if constexpr (T == DType::Q4_K) {
    const uint8_t* b = wrow + 144 * (u / 4);
    const int p = int(u % 4);
    const Words4 h = load_words4(b);  // d, dmin, 12 bytes of scales
    // Byte i of the scales by shifts (an array indexed by p would live in local memory).
    struct {
      uint64_t s03;
      uint32_t s8;
      __device__ int operator[](int i) const {
        return int(i < 8 ? (s03 >> (8 * i)) & 0xff : (s8 >> (8 * (i - 8))) & 0xff);
      }
    } const scales{uint64_t(h.y) | uint64_t(h.z) << 32, h.w};
    int sc0, m0, sc1, m1;
    scale_min_k4(2 * p, scales, sc0, m0);
    scale_min_k4(2 * p + 1, scales, sc1, m1);
    const float d = half_to_f32(uint16_t(h.x & 0xffff)), dmin = half_to_f32(uint16_t(h.x >> 16));
    const Words4 q0 = load_words4(b + 16 + 32 * p), q1 = load_words4(b + 32 + 32 * p);
    const uint32_t w[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    const int64_t xb = 8 * (u / 4) + 2 * p;  // the activation block of group 2p
    for (int c = 0; c < C; ++c) {
      if (c >= cols) break;
      int lo[8], hi[8];
      load_x8(x, c, xb, lo);
      load_x8(x, c, xb + 1, hi);
      int dl = 0, dh = 0;
      for (int i = 0; i < 8; ++i) {
        dl = dot4(int(w[i] & 0x0F0F0F0Fu), lo[i], dl);
        dh = dot4(int((w[i] >> 4) & 0x0F0F0F0Fu), hi[i], dh);
      }
      const float* ds = x.ds + 2 * (int64_t(c) * x.blocks + xb);
      acc[c] += d * (float(sc0) * ds[0] * float(dl) + float(sc1) * ds[2] * float(dh)) -
                dmin * (float(m0) * ds[1] + float(m1) * ds[3]);
    }
  } else if constexpr (T == DType::Q6_K) {
    const uint8_t* b = wrow + 210 * (u / 2);
    const int h = int(u % 2);
    int ql[16], qh[8];
    for (int i = 0; i < 16; ++i) ql[i] = load_int_b2(b + 64 * h + 4 * i);
    for (int i = 0; i < 8; ++i) qh[i] = load_int_b2(b + 128 + 32 * h + 4 * i);
    const float d = load_half(b + 208);
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192 + 8 * h);
    for (int c = 0; c < C; ++c) {
      if (c >= cols) break;
      float sum = 0.0f;
      for (int k = 0; k < 4; ++k) {  // group 4h + k
        const int64_t xb = 8 * (u / 2) + 4 * h + k;
        int xv[8];
        load_x8(x, c, xb, xv);
        int dot[2] = {0, 0}, xsum[2] = {0, 0};
        for (int i = 0; i < 8; ++i) {
          const int lo = (ql[8 * (k % 2) + i] >> (4 * (k / 2))) & 0x0F0F0F0F;
          const int hi = ((qh[i] >> (2 * k)) & 0x03030303) << 4;
          dot[i / 4] = dot4(lo | hi, xv[i], dot[i / 4]);
          xsum[i / 4] = dot4(0x01010101, xv[i], xsum[i / 4]);
        }
        const float dx = x.ds[2 * (int64_t(c) * x.blocks + xb)];
        sum += dx * (float(scales[2 * k]) * float(dot[0] - 32 * xsum[0]) +
                     float(scales[2 * k + 1]) * float(dot[1] - 32 * xsum[1]));
      }
      acc[c] += d * sum;
    }
  } else {  // Q8_0
    const uint8_t* b = wrow + 34 * u;
    int q[8];
    for (int i = 0; i < 8; ++i) q[i] = load_int_b2(b + 2 + 4 * i);
    const float d = load_half(b);
    for (int c = 0; c < C; ++c) {
      if (c >= cols) break;
      int xv[8];
      load_x8(x, c, u, xv);
      int dot = 0;
      for (int i = 0; i < 8; ++i) dot = dot4(q[i], xv[i], dot);
      acc[c] += d * x.ds[2 * (int64_t(c) * x.blocks + u)] * float(dot);
    }
  }
}

// One warp per weight row; its lanes take the row's units in turn.
template <DType T, int C>
__global__ void matvec_int8_kernel(View w, Int8Rows x, View d, int cols) {
  const int lane = int(threadIdx.x) % PS_WARP_SIZE;
  const int64_t row =
      int64_t(blockIdx.x) * (blockDim.x / PS_WARP_SIZE) + int64_t(threadIdx.x) / PS_WARP_SIZE;
  if (row >= w.ne[1]) return;
  const uint8_t* wrow = reinterpret_cast<const uint8_t*>(w.data + row * w.nb[1]);
  float acc[C];
  for (int c = 0; c < C; ++c) acc[c] = 0.0f;
  const int64_t units = w.ne[0] / kUnitValues<T>;
  for (int64_t u = lane; u < units; u += PS_WARP_SIZE) dot_unit<T, C>(wrow, u, x, cols, acc);
  for (int c = 0; c < C; ++c) {
    if (c >= cols) break;
    const float s = warp_sum(acc[c]);
    if (lane == 0) reinterpret_cast<float*>(d.data + c * d.nb[1])[row] = s;
  }
}

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
      // Unrolled with constant indices, so that v stays in registers; past the row's end (a
      // float row that is not whole groups) v is 0 and x is not read.
      PS_UNROLL
      for (int i = 0; i < 32; ++i) s += v[i] * (i < n ? xs[i] : 0.0f);
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

// Calls f.template operator()<C>() with the decode kernels' column count: cols rounded up to
// 1, 2, 4 or 8 (a power of two keeps the variants few).
template <typename F>
void with_columns(int cols, F&& f) {
  if (cols == 1)
    f.template operator()<1>();
  else if (cols == 2)
    f.template operator()<2>();
  else if (cols <= 4)
    f.template operator()<4>();
  else
    f.template operator()<8>();
}

// The decode kernels' grid: blocks of kVecThreads, a warp per weight row.
unsigned row_blocks(const Launch& l, int64_t rows) {
  const int rows_per_block = kVecThreads / l.warp;
  return unsigned((rows + rows_per_block - 1) / rows_per_block);
}

// The int8 decode step: the activations rounded into the scratch memory, then the weights.
template <DType T>
void matvec_int8(const Launch& l, const Tensor& node) {
  const Tensor& xt = *node.src[1];
  const View w = view_of(*node.src[0]), x = view_of(xt), d = view_of(node);
  const int cols = int(xt.ne[1]);
  const int64_t blocks = xt.ne[0] / 32;
  Int8Rows q{static_cast<int8_t*>(l.scratch), nullptr, blocks};
  q.ds = reinterpret_cast<float*>(static_cast<char*>(l.scratch) +
                                  round16(int64_t(cols) * blocks * 32));
  PS_LAUNCH(quantize_int8_kernel, blocks_for(blocks * cols, 128), 128, l.stream, x, q, cols);
  with_columns(cols, [&]<int C>() {
    auto* kernel = &matvec_int8_kernel<T, C>;
    PS_LAUNCH(kernel, row_blocks(l, w.ne[1]), kVecThreads, l.stream, w, q, d, cols);
  });
}

}  // namespace

size_t matmul_scratch_bytes(const Tensor& node) {
  if (node.op != OpKind::MatMul || !takes_int8_decode(node)) return 0;
  const int64_t cols = node.src[1]->ne[1], blocks = node.src[1]->ne[0] / 32;
  return size_t(round16(cols * blocks * 32) + cols * blocks * 8);
}

void matmul(const Launch& l, const Tensor& node) {
  const Tensor& wt = *node.src[0];
  const Tensor& xt = *node.src[1];
  const View w = view_of(wt), d = view_of(node);
  const int64_t m = xt.ne[1];
  if (l.int8_decode && l.scratch && takes_int8_decode(node)) {
    if (wt.type == DType::Q4_K)
      matvec_int8<DType::Q4_K>(l, node);
    else if (wt.type == DType::Q6_K)
      matvec_int8<DType::Q6_K>(l, node);
    else
      matvec_int8<DType::Q8_0>(l, node);
    check_launch("matmul");
    return;
  }
  with_weight_type(wt.type, [&]<DType T>() {
    if (m > kVecMaxCols) {
      const dim3 grid(unsigned((w.ne[1] + kTile - 1) / kTile), unsigned((m + kTile - 1) / kTile));
      PS_LAUNCH(matmul_tile_kernel<T>, grid, kTileThreads, l.stream, w, view_of(xt), d);
      return;
    }
    // Up to 8 activation rows in one pass.
    const View x = view_of(xt);
    const int cols = int(m);
    with_columns(cols, [&]<int C>() {
      auto* kernel = &matmul_vec_kernel<T, C>;
      PS_LAUNCH(kernel, row_blocks(l, w.ne[1]), kVecThreads, l.stream, w, x, d, cols);
    });
  });
  check_launch("matmul");
}

}  // namespace ps::gpu
