// Each op's typed parameters over Tensor's slots: the one place outside the
// graph builder that reads or writes iparams/fparams (lint.param_slots). Part of the IR library
// that backends link.
#include "graph/ops.h"

namespace ps {

void set_rms_norm_params(Tensor& node, const RmsNormParams& p) { node.fparams[0] = p.eps; }
RmsNormParams rms_norm_params(const Tensor& node) { return {node.fparams[0]}; }

void set_scale_params(Tensor& node, const ScaleParams& p) { node.fparams[0] = p.scale; }
ScaleParams scale_params(const Tensor& node) { return {node.fparams[0]}; }

void set_rope_params(Tensor& node, const RopeParams& p) {
  node.iparams[0] = p.n_rot;
  node.iparams[1] = int32_t(p.mode);
  node.fparams[0] = p.freq_base;
  node.fparams[1] = p.freq_scale;
  node.fparams[2] = p.attn_factor;
}
RopeParams rope_params(const Tensor& node) {
  return {node.iparams[0], RopeMode(node.iparams[1]), node.fparams[0], node.fparams[1],
          node.fparams[2]};
}

void set_softmax_params(Tensor& node, const SoftMaxParams& p) {
  node.fparams[0] = p.scale;
  node.iparams[0] = p.causal_offset;
}
SoftMaxParams softmax_params(const Tensor& node) { return {node.fparams[0], node.iparams[0]}; }

ElementwiseScalars elementwise_scalars(const Tensor& node) {
  if (node.op == OpKind::Scale) return {scale_params(node).scale, 0.0f};
  if (node.op == OpKind::SwiGluOai) {
    const SwiGluOaiParams p = swiglu_oai_params(node);
    return {p.alpha, p.limit};
  }
  return {};
}

void set_top_k_params(Tensor& node, const TopKParams& p) { node.iparams[0] = p.k; }
TopKParams top_k_params(const Tensor& node) { return {node.iparams[0]}; }

void set_expert_weights_params(Tensor& node, const ExpertWeightsParams& p) {
  node.iparams[0] = int32_t(p.gating);
  node.iparams[1] = p.normalize ? 1 : 0;
  node.fparams[0] = p.scale;
}

ExpertWeightsParams expert_weights_params(const Tensor& node) {
  return {ExpertGating(node.iparams[0]), node.iparams[1] != 0, node.fparams[0]};
}

void set_swiglu_oai_params(Tensor& node, const SwiGluOaiParams& p) {
  node.fparams[0] = p.alpha;
  node.fparams[1] = p.limit;
}
SwiGluOaiParams swiglu_oai_params(const Tensor& node) { return {node.fparams[0], node.fparams[1]}; }

void set_attention_params(Tensor& node, const AttentionParams& p) {
  node.iparams[0] = p.n_past;
  node.iparams[2] = p.window;
  node.iparams[3] = p.paged ? 1 : 0;
  node.fparams[0] = p.scale;
}

AttentionParams attention_params(const Tensor& node) {
  return {node.iparams[0], node.iparams[2], node.fparams[0], node.iparams[3] != 0};
}

}  // namespace ps
