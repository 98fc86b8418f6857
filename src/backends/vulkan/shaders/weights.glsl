// Element j of a row of GGUF type WTYPE_* that starts at byte `row` of the bound buffer `wq`,
// read as 32-bit words (no 8- or 16-bit storage needed). Blocks and rows of every type start
// on 2-byte boundaries, so the fp16 scales are whole halves of a word.
uint byte_at(uint b) { return (wq[b >> 2] >> ((b & 3u) * 8u)) & 0xffu; }
float half_at(uint b) { return unpackHalf2x16((wq[b >> 2] >> ((b & 2u) * 8u)) & 0xffffu).x; }
uint u32_at(uint b) {
  return byte_at(b) | (byte_at(b + 1) << 8) | (byte_at(b + 2) << 16) | (byte_at(b + 3) << 24);
}

#if defined(WTYPE_IQ4_NL) || defined(WTYPE_IQ4_XS)
const float CODEBOOK[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0,
                                     13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
#elif defined(WTYPE_MXFP4)
const float CODEBOOK[16] = float[16](0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 0.0, -1.0, -2.0,
                                     -3.0, -4.0, -6.0, -8.0, -12.0);
#endif

float load_weight(uint row, uint j) {
#if defined(WTYPE_F32)
  return uintBitsToFloat(wq[(row >> 2) + j]);
#elif defined(WTYPE_F16)
  return half_at(row + 2 * j);
#elif defined(WTYPE_BF16)
  const uint b = row + 2 * j;
  return uintBitsToFloat(((wq[b >> 2] >> ((b & 2u) * 8u)) & 0xffffu) << 16);
#elif defined(WTYPE_Q2_K)
  const uint blk = row + (j / 256u) * 84u, e = j % 256u, s = e / 16u;
  const uint q = (byte_at(blk + 16u + 32u * (s / 8u) + 16u * (s % 2u) + e % 16u) >>
                  (2u * ((s % 8u) / 2u))) & 3u;
  const uint sc = byte_at(blk + s);
  return half_at(blk + 80u) * float(sc & 15u) * float(q) - half_at(blk + 82u) * float(sc >> 4);
#elif defined(WTYPE_Q3_K)
  const uint blk = row + (j / 256u) * 110u, e = j % 256u, s = e / 16u;
  const uint g = s / 8u, pair = (s % 8u) / 2u, l = 16u * (s % 2u) + e % 16u;
  const uint low = (byte_at(blk + 96u + s % 8u) >> (4u * (s / 8u))) & 15u;
  const uint high = (byte_at(blk + 104u + s % 4u) >> (2u * (s / 4u))) & 3u;
  const int q = int((byte_at(blk + 32u + 32u * g + l) >> (2u * pair)) & 3u) -
                (((byte_at(blk + l) >> (4u * g + pair)) & 1u) != 0u ? 0 : 4);
  return half_at(blk + 108u) * float(int(low | (high << 4)) - 32) * float(q);
#elif defined(WTYPE_Q4_K) || defined(WTYPE_Q5_K)
#if defined(WTYPE_Q4_K)
  const uint blk = row + (j / 256u) * 144u, qs = 16u;
#else
  const uint blk = row + (j / 256u) * 176u, qs = 48u;
#endif
  const uint e = j % 256u, sub = e / 32u, l = e % 32u, sb = blk + 4u;
  // get_scale_min_k4 (core/kquants.h)
  uint sc, m;
  if (sub < 4u) {
    sc = byte_at(sb + sub) & 63u;
    m = byte_at(sb + sub + 4u) & 63u;
  } else {
    sc = (byte_at(sb + sub + 4u) & 15u) | ((byte_at(sb + sub - 4u) >> 6) << 4);
    m = (byte_at(sb + sub + 4u) >> 4) | ((byte_at(sb + sub) >> 6) << 4);
  }
  uint q = (byte_at(blk + qs + 32u * (sub / 2u) + l) >> (4u * (sub % 2u))) & 15u;
#if defined(WTYPE_Q5_K)
  q |= ((byte_at(blk + 16u + l) >> sub) & 1u) << 4;
#endif
  return half_at(blk) * float(sc) * float(q) - half_at(blk + 2u) * float(m);
#elif defined(WTYPE_Q6_K)
  const uint blk = row + (j / 256u) * 210u, e = j % 256u;
  const uint h = e / 128u, k = (e % 128u) / 32u, l = e % 32u;
  const uint lo = (byte_at(blk + 64u * h + l + 32u * (k % 2u)) >> (4u * (k / 2u))) & 15u;
  const uint hi = (byte_at(blk + 128u + 32u * h + l) >> (2u * k)) & 3u;
  const int sc = int(byte_at(blk + 192u + 8u * h + 2u * k + l / 16u) << 24) >> 24;
  return half_at(blk + 208u) * float(sc) * float(int(lo | (hi << 4)) - 32);
#elif defined(WTYPE_IQ4_NL) || defined(WTYPE_MXFP4)
  // The codebook types (core/dtype.h): a nibble indexes CODEBOOK. MXFP4's blocks are 17 bytes
  // (read byte by byte); its scale is 2^(e - 128).
  const uint i = j % 32u;
#if defined(WTYPE_IQ4_NL)
  const uint blk = row + (j / 32u) * 18u, qs = blk + 2u;
  const float d = half_at(blk);
#else
  const uint blk = row + (j / 32u) * 17u, qs = blk + 1u, e = byte_at(blk);
  const float d = uintBitsToFloat(e < 2u ? (0x00200000u << e) : ((e - 1u) << 23));
#endif
  const uint q = byte_at(qs + (i % 16u));
  return d * CODEBOOK[i < 16u ? q & 15u : q >> 4];
#elif defined(WTYPE_IQ4_XS)
  const uint blk = row + (j / 256u) * 136u, e = j % 256u, ib = e / 32u, i = e % 32u;
  const uint lo = (byte_at(blk + 4u + ib / 2u) >> (4u * (ib % 2u))) & 15u;
  const uint hi = ((byte_at(blk + 2u) | (byte_at(blk + 3u) << 8)) >> (2u * ib)) & 3u;
  const float dl = half_at(blk) * float(int(lo | (hi << 4)) - 32);
  const uint q = byte_at(blk + 8u + 16u * ib + (i % 16u));
  return dl * CODEBOOK[i < 16u ? q & 15u : q >> 4];
#else
  const uint i = j % 32u;
#if defined(WTYPE_Q8_0)
  const uint blk = row + (j / 32u) * 34u;
  return half_at(blk) * float(int(byte_at(blk + 2 + i) << 24) >> 24);
#elif defined(WTYPE_Q4_0)
  const uint blk = row + (j / 32u) * 18u;
  const uint q = byte_at(blk + 2 + (i % 16u));
  return half_at(blk) * (float(i < 16u ? q & 15u : q >> 4) - 8.0);
#elif defined(WTYPE_Q4_1)
  const uint blk = row + (j / 32u) * 20u;
  const uint q = byte_at(blk + 4 + (i % 16u));
  return half_at(blk) * float(i < 16u ? q & 15u : q >> 4) + half_at(blk + 2);
#elif defined(WTYPE_Q5_0)
  const uint blk = row + (j / 32u) * 22u;
  const uint q = byte_at(blk + 6 + (i % 16u));
  const uint hi = (u32_at(blk + 2) >> i) & 1u;
  return half_at(blk) * (float((i < 16u ? q & 15u : q >> 4) | (hi << 4)) - 16.0);
#elif defined(WTYPE_Q5_1)
  const uint blk = row + (j / 32u) * 24u;
  const uint q = byte_at(blk + 8 + (i % 16u));
  const uint hi = (u32_at(blk + 4) >> i) & 1u;
  return half_at(blk) * float((i < 16u ? q & 15u : q >> 4) | (hi << 4)) + half_at(blk + 2);
#else
#error "define one WTYPE_*"
#endif
#endif
}

// Types of 32-element blocks, read whole by load_block (the k-quants go element by element).
#if defined(WTYPE_Q8_0) || defined(WTYPE_Q4_0) || defined(WTYPE_Q4_1) || defined(WTYPE_Q5_0) || \
    defined(WTYPE_Q5_1)
#define WEIGHTS_QUANTIZED 1
// Bytes of one block.
#if defined(WTYPE_Q8_0)
const uint BLOCK_BYTES = 34;
#elif defined(WTYPE_Q4_0)
const uint BLOCK_BYTES = 18;
#elif defined(WTYPE_Q4_1)
const uint BLOCK_BYTES = 20;
#elif defined(WTYPE_Q5_0)
const uint BLOCK_BYTES = 22;
#else
const uint BLOCK_BYTES = 24;
#endif

// Block `blk` (its first byte) is read as the fewest aligned words that hold it: blocks start
// on 2-byte boundaries, so it sits 0 or 2 bytes into the first. Every read of a buffer is costly
// on some drivers (CPU drivers load lane by lane), and half the blocks of the odd-sized types
// would otherwise cost two reads per word.
#define BLOCK_WINDOW ((BLOCK_BYTES + 5u) / 4u)
// In a block that sits `odd` halfwords into the words W: the halfword j of the block, and the
// 32 bits starting there (j a constant once loops are unrolled, so W never needs indexing by
// a variable).
#define WIN_HALF(h) ((W[(h) >> 1] >> (((h) & 1u) * 16u)) & 0xffffu)
#define WIN_WORD(h) (((h) & 1u) == 0u ? W[(h) >> 1] : (W[(h) >> 1] >> 16) | (W[((h) >> 1) + 1] << 16))
#define BLOCK_HALF(j) unpackHalf2x16(odd ? WIN_HALF((j) + 1u) : WIN_HALF(j)).x
#define BLOCK_WORD(j) (odd ? WIN_WORD((j) + 1u) : WIN_WORD(j))

// The words that hold block `blk`; those past its end stay 0 and are never read from memory.
void load_window(uint blk, out uint W[BLOCK_WINDOW]) {
  const uint first = blk >> 2, words = (blk % 4u + BLOCK_BYTES + 3u) / 4u;
  for (uint i = 0; i < BLOCK_WINDOW; ++i) {
    W[i] = 0u;
    if (i < words) W[i] = wq[first + i];  // a branch, not a select: never read past the block
  }
}

// The 32 weights of block `blk` as small integers q, four to a word in element order (element
// 4i + j in byte j of word i), with w = d q + m: for integer dot products (matmul_dot.comp)
// and, expanded, for load_block.
// Bit j of x (j < 4) to bit 4 of byte j.
uint spread_bits(uint x) {
  return ((x & 1u) << 4) | ((x & 2u) << 11) | ((x & 4u) << 18) | ((x & 8u) << 25);
}

void load_block_ints(uint blk, out uint q[8], out float d, out float m) {
  const bool odd = (blk & 2u) != 0u;
  uint W[BLOCK_WINDOW];
  load_window(blk, W);
  d = BLOCK_HALF(0);
#if defined(WTYPE_Q8_0)
  m = 0.0;
  for (uint k = 0; k < 8; ++k) q[k] = BLOCK_WORD(1 + 2 * k);
#else
#if defined(WTYPE_Q4_0)
  m = -8.0 * d;
  const uint qs = 1, qh = 0;
#elif defined(WTYPE_Q4_1)
  m = BLOCK_HALF(1);
  const uint qs = 2, qh = 0;
#elif defined(WTYPE_Q5_0)
  m = -16.0 * d;
  const uint qs = 3, qh = BLOCK_WORD(1);
#elif defined(WTYPE_Q5_1)
  m = BLOCK_HALF(1);
  const uint qs = 4, qh = BLOCK_WORD(2);
#endif
  for (uint k = 0; k < 4; ++k) {
    const uint v = BLOCK_WORD(qs + 2 * k);
    q[k] = (v & 0x0f0f0f0fu) | spread_bits((qh >> (4 * k)) & 15u);
    q[k + 4] = ((v >> 4) & 0x0f0f0f0fu) | spread_bits((qh >> (16 + 4 * k)) & 15u);
  }
#endif
}

// The 32 weights of block `blk`, dequantized: d q + m from the integers above.
void load_block(uint blk, out float w[32]) {
  uint q[8];
  float d, m;
  load_block_ints(blk, q, d, m);
  for (uint k = 0; k < 8; ++k)
    for (uint i = 0; i < 4; ++i) {
      const float v = float(int(q[k] << (24 - 8 * i)) >> 24);  // signed bytes (only Q8_0's < 0)
#if defined(WTYPE_Q8_0)
      w[4 * k + i] = d * v;
#else
      w[4 * k + i] = d * v + m;
#endif
    }
}

#endif
