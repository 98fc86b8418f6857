#version 450
// top_k (graph/ops.h): the indices of the k largest values of each row, largest first, equal
// values in index order, NaN below every number. One invocation per element: its rank in that
// total order is the number of elements above it, and an element of rank below k writes its
// index there (ranks are distinct, so each slot is written once). x = element, y/z = row.
// src0 F32 [n, rows] (ne, a_nb); output I32 [k, rows] (d_nb); k = iparam.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 2) writeonly buffer D { int d[]; };

bool above(float v, uint i, float w, uint iw) {
  if (isnan(v) || isnan(w)) return !isnan(v) || (isnan(w) && i < iw);
  return v > w || (v == w && i < iw);
}

void main() {
  const uint i = gl_GlobalInvocationID.x;
  const uint r = gl_GlobalInvocationID.y + gl_GlobalInvocationID.z * gl_NumWorkGroups.y;
  const uint n = p.ne[0];
  if (i >= n || r >= p.ne[1]) return;
  const uint row = p.a_off + r * p.a_nb[1];
  const float v = a[row + i];
  uint rank = 0;
  for (uint q = 0; q < n; ++q) rank += above(a[row + q], q, v, i) ? 1u : 0u;
  if (rank < uint(p.iparam)) d[p.d_off + r * p.d_nb[1] + rank] = int(i);
}
