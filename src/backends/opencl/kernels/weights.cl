// Element i of the c-th run of 32 elements of a row of GGUF type WTYPE_* that starts at byte
// `row` of q (element 32 c + i), as Vulkan's weights.glsl reads it (the layouts are
// core/dtype.h's). Taking the run and the element apart lets a loop over i keep what depends
// on c alone (a block's or sub-block's scales) out of the loop: the k-quants' sub-blocks and
// every other quantized type's blocks are runs of 32. Blocks and rows of every type start on
// 2-byte boundaries, so the fp16 scales load with vload_half (no cl_khr_fp16 needed).
uint byte_at(global const uchar* q, uint b) { return q[b]; }
float half_at(global const uchar* q, uint b) { return vload_half(0, (global const half*)(q + b)); }
uint u32_at(global const uchar* q, uint b) {
  return q[b] | ((uint)q[b + 1] << 8) | ((uint)q[b + 2] << 16) | ((uint)q[b + 3] << 24);
}

#if defined(WTYPE_IQ4_NL) || defined(WTYPE_IQ4_XS)
constant float CODEBOOK[16] = {-127.0f, -104.0f, -83.0f, -65.0f, -49.0f, -35.0f, -22.0f, -10.0f,
                               1.0f,    13.0f,   25.0f,  38.0f,  53.0f,  69.0f,  89.0f,  113.0f};
#elif defined(WTYPE_MXFP4)
constant float CODEBOOK[16] = {0.0f, 1.0f,  2.0f,  3.0f,  4.0f,  6.0f,  8.0f,  12.0f,
                               0.0f, -1.0f, -2.0f, -3.0f, -4.0f, -6.0f, -8.0f, -12.0f};
#endif

float weight_at(global const uchar* q, uint row, uint c, uint i) {
#if defined(WTYPE_F32)
  return *(global const float*)(q + row + 4 * (32u * c + i));
#elif defined(WTYPE_F16)
  return half_at(q, row + 2 * (32u * c + i));
#elif defined(WTYPE_BF16)
  const uint b = row + 2 * (32u * c + i);
  return as_float(((uint)q[b] | ((uint)q[b + 1] << 8)) << 16);
#elif defined(WTYPE_Q2_K)
  const uint blk = row + (c / 8u) * 84u, e = (c % 8u) * 32u + i, s = e / 16u;
  const uint qv = (byte_at(q, blk + 16u + 32u * (s / 8u) + 16u * (s % 2u) + e % 16u) >>
                   (2u * ((s % 8u) / 2u))) & 3u;
  const uint sc = byte_at(q, blk + s);
  return half_at(q, blk + 80u) * (float)(sc & 15u) * (float)qv -
         half_at(q, blk + 82u) * (float)(sc >> 4);
#elif defined(WTYPE_Q3_K)
  const uint blk = row + (c / 8u) * 110u, e = (c % 8u) * 32u + i, s = e / 16u;
  const uint g = s / 8u, pair = (s % 8u) / 2u, l = 16u * (s % 2u) + e % 16u;
  const uint low = (byte_at(q, blk + 96u + s % 8u) >> (4u * (s / 8u))) & 15u;
  const uint high = (byte_at(q, blk + 104u + s % 4u) >> (2u * (s / 4u))) & 3u;
  const int qv = (int)((byte_at(q, blk + 32u + 32u * g + l) >> (2u * pair)) & 3u) -
                 (((byte_at(q, blk + l) >> (4u * g + pair)) & 1u) != 0u ? 0 : 4);
  return half_at(q, blk + 108u) * (float)((int)(low | (high << 4)) - 32) * (float)qv;
#elif defined(WTYPE_Q4_K) || defined(WTYPE_Q5_K)
#if defined(WTYPE_Q4_K)
  const uint blk = row + (c / 8u) * 144u, qs = 16u;
#else
  const uint blk = row + (c / 8u) * 176u, qs = 48u;
#endif
  const uint sub = c % 8u, l = i, sb = blk + 4u;
  // get_scale_min_k4 (core/kquants.h)
  uint sc, m;
  if (sub < 4u) {
    sc = byte_at(q, sb + sub) & 63u;
    m = byte_at(q, sb + sub + 4u) & 63u;
  } else {
    sc = (byte_at(q, sb + sub + 4u) & 15u) | ((byte_at(q, sb + sub - 4u) >> 6) << 4);
    m = (byte_at(q, sb + sub + 4u) >> 4) | ((byte_at(q, sb + sub) >> 6) << 4);
  }
  uint qv = (byte_at(q, blk + qs + 32u * (sub / 2u) + l) >> (4u * (sub % 2u))) & 15u;
#if defined(WTYPE_Q5_K)
  qv |= ((byte_at(q, blk + 16u + l) >> sub) & 1u) << 4;
#endif
  return half_at(q, blk) * (float)sc * (float)qv - half_at(q, blk + 2u) * (float)m;
#elif defined(WTYPE_Q6_K)
  const uint blk = row + (c / 8u) * 210u;
  const uint h = (c % 8u) / 4u, k = c % 4u, l = i;
  const uint lo = (byte_at(q, blk + 64u * h + l + 32u * (k % 2u)) >> (4u * (k / 2u))) & 15u;
  const uint hi = (byte_at(q, blk + 128u + 32u * h + l) >> (2u * k)) & 3u;
  const int sc = (char)byte_at(q, blk + 192u + 8u * h + 2u * k + l / 16u);
  return half_at(q, blk + 208u) * (float)sc * (float)((int)(lo | (hi << 4)) - 32);
#elif defined(WTYPE_IQ4_NL) || defined(WTYPE_MXFP4)
  // The codebook types (core/dtype.h): a nibble indexes CODEBOOK. MXFP4's blocks are 17 bytes;
  // its scale is 2^(e - 128).
#if defined(WTYPE_IQ4_NL)
  const uint blk = row + c * 18u, qs = blk + 2u;
  const float d = half_at(q, blk);
#else
  const uint blk = row + c * 17u, qs = blk + 1u, e = byte_at(q, blk);
  const float d = as_float(e < 2u ? (0x00200000u << e) : ((e - 1u) << 23));
#endif
  const uint qv = byte_at(q, qs + (i % 16u));
  return d * CODEBOOK[i < 16u ? qv & 15u : qv >> 4];
#elif defined(WTYPE_IQ4_XS)
  const uint blk = row + (c / 8u) * 136u, ib = c % 8u;
  const uint lo = (byte_at(q, blk + 4u + ib / 2u) >> (4u * (ib % 2u))) & 15u;
  const uint hi = ((byte_at(q, blk + 2u) | (byte_at(q, blk + 3u) << 8)) >> (2u * ib)) & 3u;
  const float dl = half_at(q, blk) * (float)((int)(lo | (hi << 4)) - 32);
  const uint qv = byte_at(q, blk + 8u + 16u * ib + (i % 16u));
  return dl * CODEBOOK[i < 16u ? qv & 15u : qv >> 4];
#else
#if defined(WTYPE_Q8_0)
  const uint blk = row + c * 34u;
  return half_at(q, blk) * (float)(char)byte_at(q, blk + 2 + i);
#elif defined(WTYPE_Q4_0)
  const uint blk = row + c * 18u;
  const uint qv = byte_at(q, blk + 2 + (i % 16u));
  return half_at(q, blk) * ((float)(i < 16u ? qv & 15u : qv >> 4) - 8.0f);
#elif defined(WTYPE_Q4_1)
  const uint blk = row + c * 20u;
  const uint qv = byte_at(q, blk + 4 + (i % 16u));
  return half_at(q, blk) * (float)(i < 16u ? qv & 15u : qv >> 4) + half_at(q, blk + 2);
#elif defined(WTYPE_Q5_0)
  const uint blk = row + c * 22u;
  const uint qv = byte_at(q, blk + 6 + (i % 16u));
  const uint hi = (u32_at(q, blk + 2) >> i) & 1u;
  return half_at(q, blk) * ((float)((i < 16u ? qv & 15u : qv >> 4) | (hi << 4)) - 16.0f);
#elif defined(WTYPE_Q5_1)
  const uint blk = row + c * 24u;
  const uint qv = byte_at(q, blk + 8 + (i % 16u));
  const uint hi = (u32_at(q, blk + 4) >> i) & 1u;
  return half_at(q, blk) * (float)((i < 16u ? qv & 15u : qv >> 4) | (hi << 4)) +
         half_at(q, blk + 2);
#else
#error "define one WTYPE_*"
#endif
#endif
}

// Element j of the row.
float load_weight(global const uchar* q, uint row, uint j) { return weight_at(q, row, j / 32u, j % 32u); }
