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
