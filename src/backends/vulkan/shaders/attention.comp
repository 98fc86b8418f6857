#version 450
// Causal attention of queries q [head_dim, n_head, T] (F32) over the F16 KV caches
// [head_dim, n_kv_head, n_ctx] with grouped-query heads: one workgroup per (head, token), the
// visible positions in chunks whose scores go through shared memory, and a running (online)
// softmax so no array of n_ctx scores is needed. iparam = n_past, fparam0 = scale, op = the
// sliding window (0: none). Position j is in cache slot j % b_ne[2] (a sliding layer's ring).
// Bindings: 0 = q, 1 = K cache, 2 = output; the V cache is binding 3. iparam < 0: binding 4
// holds each token's (position, cache plane), so tokens of several sequences share the op;
// the caches then have a plane per sequence (stride b_nb[3]). iparam == -2: a paged cache
// (graph/ops.h): binding 4 holds (slots, block), each token's (position, table offset), then the
// block tables, and position j of a token's sequence is in cell
// table[(j % slots) / block] * block + (j % slots) % block of the one plane. fparam1 != 0:
// binding 5 holds a sink per head (graph/ops.h), folded into the softmax's sum at the end.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer A { float q[]; };
layout(std430, binding = 1) readonly buffer B { uint kc[]; };
layout(std430, binding = 2) writeonly buffer D { float d[]; };
layout(std430, binding = 3) readonly buffer V { uint vc[]; };
layout(std430, binding = 4) readonly buffer E { int info[]; };
layout(std430, binding = 5) readonly buffer F { float sinks[]; };

const uint CHUNK = 256;
const uint MAX_HD = 256;
shared float qs[MAX_HD];
shared float scores[CHUNK];
shared float red[64];

// Element e (in halves) of a cache bound at word 0.
float half_of(uint e, bool v) {
  const uint w = v ? vc[e >> 1] : kc[e >> 1];
  return unpackHalf2x16(w >> ((e & 1u) * 16u)).x;
}

// The first element of position j's row for cache head kvh, counted from a cache's first
// element: in slot j % slots of the plane, or (paged) in the cell the block table gives.
uint row_of(uint j, uint kvh, uint plane, bool paged, uint slots, uint block) {
  const uint slot = j % slots;
  if (!paged) return kvh * p.b_nb[1] + slot * p.b_nb[2] + plane * p.b_nb[3];
  const uint cell = uint(info[p.e_off + plane + slot / block]) * block + slot % block;
  return kvh * p.b_nb[1] + cell * p.b_nb[2];
}

void main() {
  const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint hd = p.ne[0], n_head = p.ne[1];
  const uint n_kv_head = p.b_ne[1];
  const uint kvh = h / (n_head / n_kv_head);
  const bool per_token = p.iparam < 0, paged = p.iparam == -2;
  const uint pairs = p.e_off + (paged ? 2 : 0);
  const uint slots = paged ? uint(info[p.e_off]) : p.b_ne[2];
  const uint block = paged ? uint(info[p.e_off + 1]) : 1;
  // plane: the cache plane, or (paged) where the token's block table starts in binding 4.
  const uint plane = per_token ? uint(info[pairs + 2 * t + 1]) : 0;
  // Visible cache positions: [first, end).
  const uint end = (per_token ? uint(info[pairs + 2 * t]) : uint(p.iparam) + t) + 1;
  const uint first = p.op > 0 && end > p.op ? end - p.op : 0;
  const uint qrow = p.a_off + h * p.a_nb[1] + t * p.a_nb[2];
  for (uint i = tid; i < hd; i += 64) qs[i] = q[qrow + i];
  barrier();

  float acc[MAX_HD / 64];
  for (uint k = 0; k < MAX_HD / 64; ++k) acc[k] = 0.0;
  float m = -1.0 / 0.0, l = 0.0;
  for (uint c = first; c < end; c += CHUNK) {
    const uint len = min(CHUNK, end - c);
    float cmax = -1.0 / 0.0;
    for (uint j = tid; j < len; j += 64) {
      const uint krow = p.b_off + row_of(c + j, kvh, plane, paged, slots, block);
      float s = 0.0;
      for (uint i = 0; i < hd; ++i) s += qs[i] * half_of(krow + i, false);
      s *= p.fparam0;
      scores[j] = s;
      cmax = max(cmax, s);
    }
    red[tid] = cmax;
    barrier();
    for (uint w = 32; w > 0; w >>= 1) {
      if (tid < w) red[tid] = max(red[tid], red[tid + w]);
      barrier();
    }
    const float new_m = max(m, red[0]);
    const float rescale = exp(m - new_m);
    l *= rescale;
    for (uint k = 0; k < MAX_HD / 64; ++k) acc[k] *= rescale;
    for (uint j = 0; j < len; ++j) {
      const float pj = exp(scores[j] - new_m);
      l += pj;
      const uint vrow = p.v_off + row_of(c + j, kvh, plane, paged, slots, block);
      for (uint k = 0; k < MAX_HD / 64; ++k) {
        const uint i = tid + 64 * k;
        if (i < hd) acc[k] += pj * half_of(vrow + i, true);
      }
    }
    m = new_m;
    barrier();
  }
  if (p.fparam1 != 0.0) {
    const float s = sinks[p.f_off + h], new_m = max(m, s), rescale = exp(m - new_m);
    l = l * rescale + exp(s - new_m);
    for (uint k = 0; k < MAX_HD / 64; ++k) acc[k] *= rescale;
  }
  const uint orow = p.d_off + h * p.d_nb[1] + t * p.d_nb[2];
  for (uint k = 0; k < MAX_HD / 64; ++k) {
    const uint i = tid + 64 * k;
    if (i < hd) d[orow + i] = acc[k] / l;
  }
}
