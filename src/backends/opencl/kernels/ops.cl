// The kernels that read no weights: element-wise ops, rms_norm, softmax, rope, copy, attention
// and the mixture-of-experts helpers. Each follows its Vulkan shader (backends/vulkan/shaders),
// with work-groups of WG items and reductions through local memory (no subgroups needed).

float silu(float v) { return v / (1.0f + exp(-v)); }
float gelu_tanh(float v) {
  const float k = 0.79788456080286535588f;
  return 0.5f * v * (1.0f + tanh(k * v * (1.0f + 0.044715f * v * v)));
}

// add, mul, swiglu (src1 broadcast over rows), silu, gelu, scale, sigmoid, swiglu_oai: one item
// per element; dimension 0 = element within the row, 1 = row.
kernel void elementwise(PS_ARGS) {
  const uint i0 = get_global_id(0), r = get_global_id(1);
  if (i0 >= p.ne[0] || r >= ROWS()) return;
  global const float* a = OPERAND(const float, 0);
  global const float* b = OPERAND(const float, 1);
  global float* d = OPERAND(float, 2);
  const uint3 at = ROW_INDEX(r);
  const float x = a[A_ROW(at) + i0];
  float y = 0.0f;
  if (p.op == PS_EW_ADD || p.op == PS_EW_MUL || p.op == PS_EW_SWIGLU || p.op == PS_EW_SWIGLU_OAI)
    y = b[B_ROW(at) + i0];
  float v;
  if (p.op == PS_EW_ADD)
    v = x + y;
  else if (p.op == PS_EW_MUL)
    v = x * y;
  else if (p.op == PS_EW_SILU)
    v = silu(x);
  else if (p.op == PS_EW_GELU)
    v = gelu_tanh(x);
  else if (p.op == PS_EW_SCALE)
    v = x * p.fparam0;
  else if (p.op == PS_EW_SIGMOID)
    v = 1.0f / (1.0f + exp(-x));
  else if (p.op == PS_EW_SWIGLU_OAI) {
    const float g = fmin(x, p.fparam1), u = clamp(y, -p.fparam1, p.fparam1);
    v = g / (1.0f + exp(-p.fparam0 * g)) * (u + 1.0f);
  } else
    v = silu(x) * y;
  d[D_ROW(at) + i0] = v;
}

// One work-group per row (dimension 1); fparam0 = eps.
kernel void rms_norm(PS_ARGS) {
  local float red[WG];
  const uint r = get_group_id(1), t = get_local_id(0);
  global const float* a = OPERAND(const float, 0);
  global float* d = OPERAND(float, 2);
  const uint3 at = ROW_INDEX(r);
  const uint src = A_ROW(at), dst = D_ROW(at), n = p.ne[0];
  float s = 0.0f;
  for (uint i = t; i < n; i += WG) s += a[src + i] * a[src + i];
  const float scale = rsqrt(group_sum(s, red) / (float)n + p.fparam0);
  for (uint i = t; i < n; i += WG) d[dst + i] = a[src + i] * scale;
}

// One work-group per row: fparam0 = scale; iparam >= 0: row i1 sees columns j <= i1 + iparam
// (the rest become 0).
kernel void softmax(PS_ARGS) {
  local float red[WG];
  const uint r = get_group_id(1), t = get_local_id(0);
  global const float* a = OPERAND(const float, 0);
  global float* d = OPERAND(float, 2);
  const uint3 at = ROW_INDEX(r);
  const uint src = A_ROW(at), dst = D_ROW(at), n = p.ne[0];
  const uint visible = p.iparam >= 0 ? min(n, at.x + (uint)p.iparam + 1) : n;
  float m = -INFINITY;
  for (uint j = t; j < visible; j += WG) m = fmax(m, a[src + j] * p.fparam0);
  m = group_max(m, red);
  float s = 0.0f;
  for (uint j = t; j < visible; j += WG) {
    const float e = exp(a[src + j] * p.fparam0 - m);
    d[dst + j] = e;
    s += e;
  }
  const float inv = 1.0f / group_sum(s, red);
  // Each item rescales the elements it wrote itself.
  for (uint j = t; j < visible; j += WG) d[dst + j] *= inv;
  for (uint j = visible + t; j < n; j += WG) d[dst + j] = 0.0f;
}

// Rotary position embedding over x [head_dim, n_heads, n_tokens] with I32 positions (src1):
// iparam = n_rot, op = mode and flags (kernel_codes.h), fparam0 = frequency base, fparam1 =
// frequency scale, fparam2 = scale of the rotated values; PS_ROPE_FACTORS: per-pair frequency
// factors at operand 3. Elements past n_rot pass through.
kernel void rope(PS_ARGS) {
  const uint j = get_global_id(0), r = get_global_id(1);
  if (j >= p.ne[0] || r >= ROWS()) return;
  global const float* a = OPERAND(const float, 0);
  global const int* pos = OPERAND(const int, 1);
  global float* d = OPERAND(float, 2);
  global const float* factors = OPERAND(const float, 3);
  const uint3 at = ROW_INDEX(r);
  const uint src = A_ROW(at), dst = D_ROW(at);
  const uint n_rot = (uint)p.iparam, half_rot = n_rot / 2;
  if (j >= n_rot) {
    d[dst + j] = a[src + j];
    return;
  }
  const bool neox = (p.op & PS_ROPE_MODE_MASK) == PS_ROPE_NEOX;
  const uint i = neox ? j % half_rot : j / 2;
  const bool second = neox ? j >= half_rot : (j & 1u) == 1u;
  const uint ia = neox ? i : 2 * i, ib = neox ? i + half_rot : 2 * i + 1;
  float theta = (float)pos[at.y] * p.fparam1 * pow(p.fparam0, -2.0f * (float)i / (float)n_rot);
  if ((p.op & PS_ROPE_FACTORS) != 0u) theta /= factors[i];
  const float c = cos(theta) * p.fparam2, s = sin(theta) * p.fparam2;
  const float x0 = a[src + ia], x1 = a[src + ib];
  d[dst + j] = second ? x0 * s + x1 * c : x0 * c - x1 * s;
}

// F32 rows of src0 into the destination view (operand 2), F32 or F16 (iparam = 1): source and
// destination may differ in shape beyond dimension 0, each walked by its own row index.
kernel void copy(PS_ARGS) {
  const uint j = get_global_id(0), r = get_global_id(1);
  if (j >= p.ne[0] || r >= ROWS()) return;
  global const float* a = OPERAND(const float, 0);
  const uint3 sa = ROW_INDEX(r);
  const uint3 da =
      (uint3)(r % p.b_ne[1], (r / p.b_ne[1]) % p.b_ne[2], r / (p.b_ne[1] * p.b_ne[2]));
  const float v = a[A_ROW(sa) + j];
  if (p.iparam == 1)
    vstore_half_rte(v, D_ROW(da) + j, OPERAND(half, 2));
  else
    OPERAND(float, 2)[D_ROW(da) + j] = v;
}

#define CHUNK 256
#define MAX_HD 256
// The first element of position j's row for cache head kvh, counted from a cache's first
// element: in slot j % slots of the plane, or (paged) in the cell the block table gives.
uint row_of(Params p, global const int* info, uint j, uint kvh, uint plane, bool paged,
            uint slots, uint block) {
  const uint slot = j % slots;
  if (!paged) return kvh * p.b_nb[1] + slot * p.b_nb[2] + plane * p.b_nb[3];
  const uint cell = (uint)info[plane + slot / block] * block + slot % block;
  return kvh * p.b_nb[1] + cell * p.b_nb[2];
}

// Causal attention of queries [head_dim, n_head, T] over F16 KV caches with grouped-query
// heads, as Vulkan's attention.comp: one work-group per (head, token) (dimensions 0 and 1),
// the visible positions in chunks, an online softmax. iparam = n_past, or < 0: operand 4 holds
// each token's (position, cache plane); -2: a paged cache (graph/ops.h). fparam0 = scale, op =
// the sliding window (0: none), fparam1 != 0: operand 5 holds a sink per head.
kernel void attention(PS_ARGS) {
  local float qs[MAX_HD];
  local float scores[CHUNK];
  local float red[WG];
  const uint h = get_group_id(0), t = get_group_id(1), tid = get_local_id(0);
  global const float* q = OPERAND(const float, 0);
  global const half* kc = OPERAND(const half, 1);
  global float* d = OPERAND(float, 2);
  global const half* vc = OPERAND(const half, 3);
  global const int* info = OPERAND(const int, 4);
  global const float* sinks = OPERAND(const float, 5);
  const uint hd = p.ne[0], n_head = p.ne[1];
  const uint n_kv_head = p.b_ne[1];
  const uint kvh = h / (n_head / n_kv_head);
  const bool per_token = p.iparam < 0, paged = p.iparam == -2;
  const uint pairs = paged ? 2 : 0;
  const uint slots = paged ? (uint)info[0] : p.b_ne[2];
  const uint block = paged ? (uint)info[1] : 1;
  const uint plane = per_token ? (uint)info[pairs + 2 * t + 1] : 0;
  const uint end = (per_token ? (uint)info[pairs + 2 * t] : (uint)p.iparam + t) + 1;
  const uint first = p.op > 0 && end > p.op ? end - p.op : 0;
  const uint qrow = h * p.a_nb[1] + t * p.a_nb[2];
  for (uint i = tid; i < hd; i += WG) qs[i] = q[qrow + i];
  barrier(CLK_LOCAL_MEM_FENCE);
  float acc[MAX_HD / WG];
  for (uint k = 0; k < MAX_HD / WG; ++k) acc[k] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (uint c = first; c < end; c += CHUNK) {
    const uint len = min((uint)CHUNK, end - c);
    float cmax = -INFINITY;
    for (uint j = tid; j < len; j += WG) {
      const uint krow = row_of(p, info, c + j, kvh, plane, paged, slots, block);
      float s = 0.0f;
      for (uint i = 0; i < hd; ++i) s += qs[i] * vload_half(krow + i, kc);
      s *= p.fparam0;
      scores[j] = s;
      cmax = fmax(cmax, s);
    }
    const float new_m = fmax(m, group_max(cmax, red));  // its barriers publish scores too
    const float rescale = exp(m - new_m);
    l *= rescale;
    for (uint k = 0; k < MAX_HD / WG; ++k) acc[k] *= rescale;
    for (uint j = 0; j < len; ++j) {
      const float pj = exp(scores[j] - new_m);
      l += pj;
      const uint vrow = row_of(p, info, c + j, kvh, plane, paged, slots, block);
      for (uint k = 0; k < MAX_HD / WG; ++k) {
        const uint i = tid + WG * k;
        if (i < hd) acc[k] += pj * vload_half(vrow + i, vc);
      }
    }
    m = new_m;
    barrier(CLK_LOCAL_MEM_FENCE);  // scores are rewritten by the next chunk
  }
  if (p.fparam1 != 0.0f) {
    const float s = sinks[h], new_m = fmax(m, s), rescale = exp(m - new_m);
    l = l * rescale + exp(s - new_m);
    for (uint k = 0; k < MAX_HD / WG; ++k) acc[k] *= rescale;
  }
  const uint orow = h * p.d_nb[1] + t * p.d_nb[2];
  for (uint k = 0; k < MAX_HD / WG; ++k) {
    const uint i = tid + WG * k;
    if (i < hd) d[orow + i] = acc[k] / l;
  }
}

// top_k (graph/ops.h): the indices of the k (iparam) largest values of each row, largest
// first, equal values in index order, NaN below every number. One item per element, which
// writes its index at its rank when that is below k. Dimension 1 = row.
bool above(float v, uint i, float w, uint iw) {
  if (isnan(v) || isnan(w)) return !isnan(v) || (isnan(w) && i < iw);
  return v > w || (v == w && i < iw);
}
kernel void top_k(PS_ARGS) {
  const uint i = get_global_id(0), r = get_global_id(1);
  const uint n = p.ne[0];
  if (i >= n || r >= p.ne[1]) return;
  global const float* a = OPERAND(const float, 0);
  global int* d = OPERAND(int, 2);
  const uint row = r * p.a_nb[1];
  const float v = a[row + i];
  uint rank = 0;
  for (uint q = 0; q < n; ++q) rank += above(a[row + q], q, v, i) ? 1u : 0u;
  if (rank < (uint)p.iparam) d[r * p.d_nb[1] + rank] = (int)i;
}

// expert_weights (graph/ops.h): the chosen experts' weights from the router's logits, one item
// per token. op = gating (0 softmax over all, 1 sigmoid, 2 softmax over the chosen), iparam =
// normalize, fparam0 = scale. An id outside [0, E) gives NaN.
kernel void expert_weights(PS_ARGS) {
  const uint t = get_global_id(0);
  if (t >= p.ne[1]) return;
  global const float* z = OPERAND(const float, 0);
  global const int* ids = OPERAND(const int, 1);
  global float* w = OPERAND(float, 2);
  const uint E = p.ne[0], k = p.b_ne[0];
  const uint zr = t * p.a_nb[1], ir = t * p.b_nb[1], wr = t * p.d_nb[1];
  bool bad = false;
  for (uint j = 0; j < k; ++j) bad = bad || ids[ir + j] < 0 || (uint)ids[ir + j] >= E;
  if (bad) {
    for (uint j = 0; j < k; ++j) w[wr + j] = NAN;
    return;
  }
  if (p.op == 1u) {
    for (uint j = 0; j < k; ++j) w[wr + j] = 1.0f / (1.0f + exp(-z[zr + (uint)ids[ir + j]]));
  } else {
    float mx = -INFINITY, sum = 0.0f;
    if (p.op == 0u) {
      for (uint e = 0; e < E; ++e) mx = fmax(mx, z[zr + e]);
      for (uint e = 0; e < E; ++e) sum += exp(z[zr + e] - mx);
    } else {
      for (uint j = 0; j < k; ++j) mx = fmax(mx, z[zr + (uint)ids[ir + j]]);
      for (uint j = 0; j < k; ++j) sum += exp(z[zr + (uint)ids[ir + j]] - mx);
    }
    for (uint j = 0; j < k; ++j) w[wr + j] = exp(z[zr + (uint)ids[ir + j]] - mx) / sum;
  }
  if (p.iparam != 0) {
    float s = 0.0f;
    for (uint j = 0; j < k; ++j) s += w[wr + j];
    for (uint j = 0; j < k; ++j) w[wr + j] /= s;
  }
  if (p.fparam0 != 1.0f)
    for (uint j = 0; j < k; ++j) w[wr + j] *= p.fparam0;
}

// expert_sum (graph/ops.h): out[i, t] = sum over j of w[j, t] * x[i, j, t], j in order. One
// item per element; dimension 1 = token.
kernel void expert_sum(PS_ARGS) {
  const uint i = get_global_id(0), t = get_global_id(1);
  if (i >= p.ne[0] || t >= p.ne[2]) return;
  global const float* x = OPERAND(const float, 0);
  global const float* w = OPERAND(const float, 1);
  global float* d = OPERAND(float, 2);
  const uint wr = t * p.b_nb[1];
  float s = 0.0f;
  for (uint j = 0; j < p.ne[1]; ++j) s += x[i + j * p.a_nb[1] + t * p.a_nb[2]] * w[wr + j];
  d[i + t * p.d_nb[1]] = s;
}
