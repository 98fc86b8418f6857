#pragma once
// The 64 x 64 output tiles that matmul's prompt kernel and matmul_id's grouped one share: a
// block of 256 threads, 4 x 4 outputs each (rows ty + 16 r, columns tx + 16 c); each step stages
// 32 values of 64 weight rows and of 64 activation rows in shared memory.
#include "backends/cuda/weights.cuh"

namespace ps::gpu {

constexpr int kTile = 64, kTileThreads = 256;

// Threads 0..63 decode their weight row's 32-value group g into ws[tid] (zeros when row is
// null: past the last row).
template <DType T>
__device__ inline void stage_weights(const uint8_t* row, int64_t g, int64_t k, float (*ws)[33],
                                     int tid) {
  if (tid >= kTile) return;
  float v[32];
  if (row) {
    decode32<T>(row, g, k, v);
  } else {
    for (int i = 0; i < 32; ++i) v[i] = 0.0f;
  }
  for (int i = 0; i < 32; ++i) ws[tid][i] = v[i];
}

// acc[r][c] += the dot of staged weight row ty + 16 r and activation row tx + 16 c.
__device__ inline void tile_step(const float (*ws)[33], const float (*xs)[33], int tx, int ty,
                                 float (&acc)[4][4]) {
  for (int i = 0; i < 32; ++i) {
    float a[4], b[4];
    for (int r = 0; r < 4; ++r) a[r] = ws[ty + 16 * r][i];
    for (int c = 0; c < 4; ++c) b[c] = xs[tx + 16 * c][i];
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) acc[r][c] += a[r] * b[c];
  }
}

}  // namespace ps::gpu
