// The kernels that read weights of one GGUF type (WTYPE_*, weights.cl), built once per type:
// get_rows, matmul and matmul_id. Weights have byte strides (a_nb); activations and outputs
// are F32.

// out[i] = row ids[i] of the table, as F32: one item per element (dimension 0) and output row
// (dimension 1). op = rows in the table: an id outside it writes zeros (the CPU backend
// reports it as an error).
kernel void get_rows(PS_ARGS) {
  const uint j = get_global_id(0), i = get_global_id(1);
  if (j >= p.ne[0] || i >= p.b_ne[0]) return;
  global const uchar* w = OPERAND(const uchar, 0);
  global const int* ids = OPERAND(const int, 1);
  global float* d = OPERAND(float, 2);
  const int id = ids[i];
  d[i * p.d_nb[1] + j] = id < 0 || (uint)id >= p.op ? 0.0f : load_weight(w, (uint)id * p.a_nb[1], j);
}

// y[n, m] = dot(weight row n, activation row m): a work-group per weight row (dimension 0) and
// COLS activation rows (dimension 1). Each item takes runs of 32 weights (a block, or a
// k-quant's sub-block: weight_at's scales are read once per run), every 64th run, reading each
// weight once for all its columns; the partial sums meet in local memory.
#define COLS 4
kernel void matmul(PS_ARGS) {
  local float red[WG];
  const uint n = get_group_id(0), t = get_local_id(0);
  const uint m0 = get_group_id(1) * COLS;
  global const uchar* w = OPERAND(const uchar, 0);
  global const float* x = OPERAND(const float, 1);
  global float* y = OPERAND(float, 2);
  const uint K = p.b_ne[0], M = p.b_ne[1];
  const uint cols = min((uint)COLS, M - m0);
  const uint wr = n * p.a_nb[1];
  float s[COLS];
  for (uint c = 0; c < COLS; ++c) s[c] = 0.0f;
  for (uint run = t; run * 32u < K; run += WG) {
    const uint len = min(32u, K - run * 32u);  // the float types' last run may be short
    for (uint i = 0; i < len; ++i) {
      const float wv = weight_at(w, wr, run, i);
      const uint k = run * 32u + i;
      for (uint c = 0; c < COLS; ++c)
        if (c < cols) s[c] += wv * x[(m0 + c) * p.b_nb[1] + k];
    }
  }
  for (uint c = 0; c < cols; ++c) {
    const float v = group_sum(s[c], red);
    if (t == 0) y[n + (m0 + c) * p.d_nb[1]] = v;
  }
}

// The same product with a weight row per item (dimension 0, 64 rows per work-group) and COLS
// activation rows (dimension 1): no reduction between items, which is what a CPU driver (PoCL)
// runs best, its items being the SIMD lanes of a loop; GPUs take matmul above.
kernel void matmul_rows(PS_ARGS) {
  const uint n = get_global_id(0), m0 = get_global_id(1) * COLS;
  if (n >= p.ne[1]) return;
  global const uchar* w = OPERAND(const uchar, 0);
  global const float* x = OPERAND(const float, 1);
  global float* y = OPERAND(float, 2);
  const uint K = p.b_ne[0], M = p.b_ne[1];
  const uint cols = min((uint)COLS, M - m0);
  const uint wr = n * p.a_nb[1];
  float s[COLS];
  for (uint c = 0; c < COLS; ++c) s[c] = 0.0f;
  for (uint run = 0; run * 32u < K; ++run) {
    const uint len = min(32u, K - run * 32u);
    for (uint i = 0; i < len; ++i) {
      const float wv = weight_at(w, wr, run, i);
      const uint k = run * 32u + i;
      for (uint c = 0; c < COLS; ++c)
        if (c < cols) s[c] += wv * x[(m0 + c) * p.b_nb[1] + k];
    }
  }
  for (uint c = 0; c < cols; ++c) y[n + (m0 + c) * p.d_nb[1]] = s[c];
}

// The chosen experts' matmul (graph/ops.h): output column (j, tok) is weight matrix ids[j, tok]
// of src0 times src1's column (j, tok), or (0, tok) when src1 holds one column per token. A
// work-group per weight row (dimension 0) and (slot, token) pair (dimension 1). a_nb[2] = an
// expert's stride; ids at operand 3, k = iparam; op = the number of experts: an id outside
// them writes NaN.
kernel void matmul_id(PS_ARGS) {
  local float red[WG];
  const uint n = get_group_id(0), pair = get_group_id(1), t = get_local_id(0);
  global const uchar* w = OPERAND(const uchar, 0);
  global const float* x = OPERAND(const float, 1);
  global float* y = OPERAND(float, 2);
  global const int* ids = OPERAND(const int, 3);
  const uint k = (uint)p.iparam;
  const uint j = pair % k, tok = pair / k;
  const int e = ids[pair];
  const uint at = n + j * p.d_nb[1] + tok * p.d_nb[2];
  if (e < 0 || (uint)e >= p.op) {  // uniform over the work-group
    if (t == 0) y[at] = NAN;
    return;
  }
  const uint K = p.b_ne[0];
  const uint xr = (p.b_ne[1] == 1u ? 0u : j) * p.b_nb[1] + tok * p.b_nb[2];
  const uint wr = (uint)e * p.a_nb[2] + n * p.a_nb[1];
  float s = 0.0f;
  for (uint run = t; run * 32u < K; run += WG) {  // runs of 32, as matmul's
    const uint len = min(32u, K - run * 32u);
    for (uint i = 0; i < len; ++i) s += weight_at(w, wr, run, i) * x[xr + run * 32u + i];
  }
  const float v = group_sum(s, red);
  if (t == 0) y[at] = v;
}
