// Element j of a row of GGUF type WTYPE_* that starts at byte `row` of the bound buffer `wq`,
// read as 32-bit words (no 8- or 16-bit storage needed). Blocks and rows of every type start
// on 2-byte boundaries, so the fp16 scales are whole halves of a word.
uint byte_at(uint b) { return (wq[b >> 2] >> ((b & 3u) * 8u)) & 0xffu; }
float half_at(uint b) { return unpackHalf2x16((wq[b >> 2] >> ((b & 2u) * 8u)) & 0xffffu).x; }
uint u32_at(uint b) {
  return byte_at(b) | (byte_at(b + 1) << 8) | (byte_at(b + 2) << 16) | (byte_at(b + 3) << 24);
}

float load_weight(uint row, uint j) {
#if defined(WTYPE_F32)
  return uintBitsToFloat(wq[(row >> 2) + j]);
#elif defined(WTYPE_F16)
  return half_at(row + 2 * j);
#elif defined(WTYPE_BF16)
  const uint b = row + 2 * j;
  return uintBitsToFloat(((wq[b >> 2] >> ((b & 2u) * 8u)) & 0xffffu) << 16);
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

#if !defined(WTYPE_F32) && !defined(WTYPE_F16) && !defined(WTYPE_BF16)
#define WEIGHTS_QUANTIZED 1
// The 32-bit word at byte b, for b on a 2-byte boundary.
uint word_at(uint b) {
  const uint i = b >> 2;
  return (b & 2u) == 0u ? wq[i] : (wq[i] >> 16) | (wq[i + 1] << 16);
}

// The 32 weights of block `blk` (its first byte), dequantized: whole words at a time.
void load_block(uint blk, out float w[32]) {
#if defined(WTYPE_Q8_0)
  const float d = half_at(blk);
  for (uint k = 0; k < 8; ++k) {
    const uint v = word_at(blk + 2 + 4 * k);
    for (uint i = 0; i < 4; ++i) w[4 * k + i] = d * float(int(v << (24 - 8 * i)) >> 24);
  }
#else
#if defined(WTYPE_Q4_0)
  const float d = half_at(blk), m = -8.0 * d;
  const uint qs = blk + 2, qh = 0;
#elif defined(WTYPE_Q4_1)
  const float d = half_at(blk), m = half_at(blk + 2);
  const uint qs = blk + 4, qh = 0;
#elif defined(WTYPE_Q5_0)
  const float d = half_at(blk), m = -16.0 * d;
  const uint qs = blk + 6, qh = word_at(blk + 2);
#elif defined(WTYPE_Q5_1)
  const float d = half_at(blk), m = half_at(blk + 2);
  const uint qs = blk + 8, qh = word_at(blk + 4);
#endif
  for (uint k = 0; k < 4; ++k) {
    const uint v = word_at(qs + 4 * k);
    for (uint i = 0; i < 4; ++i) {
      const uint j = 4 * k + i;
      const uint lo = ((v >> (8 * i)) & 15u) | (((qh >> j) & 1u) << 4);
      const uint hi = ((v >> (8 * i + 4)) & 15u) | (((qh >> (j + 16)) & 1u) << 4);
      w[j] = d * float(lo) + m;
      w[j + 16] = d * float(hi) + m;
    }
  }
#endif
}

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
#endif
