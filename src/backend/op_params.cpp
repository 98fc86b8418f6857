#include "backend/op_params.h"

#include "backend/kernel_codes.h"
#include "graph/ops.h"

namespace ps {

void set_shape(uint32_t (&ne)[4], uint32_t (&nb)[4], const Tensor& t, size_t unit) {
  for (int d = 0; d < 4; ++d) {
    ne[d] = uint32_t(t.ne[size_t(d)]);
    nb[d] = uint32_t(t.nb[size_t(d)] / unit);
  }
}

void set_strides(uint32_t (&nb)[4], const Tensor& t, size_t unit) {
  for (int d = 0; d < 4; ++d) nb[d] = uint32_t(t.nb[size_t(d)] / unit);
}

KernelParams kernel_params_for(const Tensor& n) {
  KernelParams p{};
  const Tensor* a = n.src[0];
  switch (n.op) {
    case OpKind::None:
    case OpKind::View:
    case OpKind::Count:
      break;
    case OpKind::Add:
    case OpKind::Mul:
    case OpKind::SwiGlu:
    case OpKind::SwiGluOai:
    case OpKind::Silu:
    case OpKind::Gelu:
    case OpKind::Scale:
    case OpKind::Sigmoid: {
      // src1 (add, mul, swiglu) repeats over the rows where its extent is 1.
      set_shape(p.ne, p.a_nb, *a, sizeof(float));
      set_shape(p.b_ne, p.b_nb, n.src[1] ? *n.src[1] : *a, sizeof(float));
      set_strides(p.d_nb, n, sizeof(float));
      p.op = elementwise_code(n.op);
      const ElementwiseScalars s = elementwise_scalars(n);
      p.fparam0 = s.s0;
      p.fparam1 = s.s1;
      break;
    }
    case OpKind::RmsNorm:
      set_shape(p.ne, p.a_nb, *a, sizeof(float));
      set_strides(p.d_nb, n, sizeof(float));
      p.fparam0 = rms_norm_params(n).eps;
      break;
    case OpKind::SoftMax: {
      set_shape(p.ne, p.a_nb, *a, sizeof(float));
      set_strides(p.d_nb, n, sizeof(float));
      const SoftMaxParams sp = softmax_params(n);
      p.fparam0 = sp.scale;
      p.iparam = sp.causal_offset;
      break;
    }
    case OpKind::Rope: {
      set_shape(p.ne, p.a_nb, *a, sizeof(float));
      set_strides(p.d_nb, n, sizeof(float));
      const RopeParams rp = rope_params(n);
      p.iparam = rp.n_rot;
      p.op = (rp.mode == RopeMode::NeoX ? PS_ROPE_NEOX : 0u) | (n.src[2] ? PS_ROPE_FACTORS : 0u);
      p.fparam0 = rp.freq_base;
      p.fparam1 = rp.freq_scale;
      p.fparam2 = rp.attn_factor;
      break;
    }
    case OpKind::MatMul:
      set_shape(p.ne, p.a_nb, *a, 1);
      set_shape(p.b_ne, p.b_nb, *n.src[1], sizeof(float));
      set_strides(p.d_nb, n, sizeof(float));
      break;
    case OpKind::GetRows:
      // op: the rows of the whole table (an id outside them reads nothing).
      set_shape(p.ne, p.a_nb, *a, 1);
      set_shape(p.b_ne, p.b_nb, *n.src[1], sizeof(int32_t));
      set_strides(p.d_nb, n, sizeof(float));
      p.op = uint32_t(a->ne[1]);
      break;
    case OpKind::Copy: {
      // Into src1's bytes, walked by src1's own shape (b_ne) and strides (d_nb); iparam = 1 for
      // an F16 destination.
      const Tensor& dst = *n.src[1];
      const size_t unit = dtype_info(dst.type).block_bytes;
      set_shape(p.ne, p.a_nb, *a, sizeof(float));
      set_shape(p.b_ne, p.b_nb, dst, unit);
      set_strides(p.d_nb, dst, unit);
      p.iparam = dst.type == DType::F16 ? 1 : 0;
      break;
    }
    case OpKind::Attention: {
      // K and V caches share one layout (b_ne, b_nb in halves). iparam < 0: each token's
      // position and plane come from the per-token operand (-2: a paged cache's block table);
      // op = the sliding window; fparam1 != 0: the sinks are bound.
      set_shape(p.ne, p.a_nb, *a, sizeof(float));
      set_shape(p.b_ne, p.b_nb, *n.src[1], sizeof(uint16_t));
      set_strides(p.d_nb, n, sizeof(float));
      const AttentionParams ap = attention_params(n);
      p.iparam = ap.paged ? -2 : attention_token_info(n) ? -1 : ap.n_past;
      p.fparam0 = ap.scale;
      p.op = uint32_t(ap.window);
      p.fparam1 = attention_sinks(n) ? 1.0f : 0.0f;
      break;
    }
    case OpKind::TopK:
      set_shape(p.ne, p.a_nb, *a, sizeof(float));
      set_strides(p.d_nb, n, sizeof(int32_t));
      p.iparam = top_k_params(n).k;
      break;
    case OpKind::ExpertWeights: {
      set_shape(p.ne, p.a_nb, *a, sizeof(float));
      set_shape(p.b_ne, p.b_nb, *n.src[1], sizeof(int32_t));
      set_strides(p.d_nb, n, sizeof(float));
      const ExpertWeightsParams ew = expert_weights_params(n);
      p.op = uint32_t(ew.gating);
      p.iparam = ew.normalize ? 1 : 0;
      p.fparam0 = ew.scale;
      break;
    }
    case OpKind::MatMulId:
      // iparam = experts chosen per token; op = the experts in src0 (an id outside writes NaN).
      set_shape(p.ne, p.a_nb, *a, 1);
      set_shape(p.b_ne, p.b_nb, *n.src[1], sizeof(float));
      set_strides(p.d_nb, n, sizeof(float));
      p.iparam = int32_t(n.src[2]->ne[0]);
      p.op = uint32_t(a->ne[2]);
      break;
    case OpKind::ExpertSum:
      set_shape(p.ne, p.a_nb, *a, sizeof(float));
      set_shape(p.b_ne, p.b_nb, *n.src[1], sizeof(float));
      set_strides(p.d_nb, n, sizeof(float));
      break;
  }
  return p;
}

}  // namespace ps
