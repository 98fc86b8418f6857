// The per-tensor rules of the quantization mixes, as llama.cpp's quantize tool applies them
// (src/llama-quant.cpp): here the fused tensors of phi3 beside the separate ones of llama.
#include <gtest/gtest.h>

#include "model/quantize.h"

namespace ps {
namespace {

DType choose(const char* mix, const char* name, int layer = 0) {
  TensorRole role{name, {3072, 9216}};
  role.layer = layer;
  role.n_layers = 32;
  role.n_gqa = 1;
  const std::optional<DType> t = choose_type(*find_quant_mix(mix), role, nullptr);
  EXPECT_TRUE(t.has_value()) << name;
  return t.value_or(DType::F32);
}

TEST(QuantizeRules, FusedQkvGetsMoreBitsThanTheMix) {
  EXPECT_EQ(choose("Q3_K_M", "blk.5.attn_qkv.weight", 5), DType::Q4_K);
  EXPECT_EQ(choose("Q4_K_M", "blk.5.attn_qkv.weight", 5), DType::Q5_K);
  EXPECT_EQ(choose("Q5_K_M", "blk.5.attn_qkv.weight", 5), DType::Q6_K);
  EXPECT_EQ(choose("Q2_K", "blk.5.attn_qkv.weight", 5), DType::Q2_K);
  EXPECT_EQ(choose("Q6_K", "blk.5.attn_qkv.weight", 5), DType::Q6_K);
  EXPECT_EQ(choose("Q8_0", "blk.5.attn_qkv.weight", 5), DType::Q8_0);
}

TEST(QuantizeRules, FusedGateUpKeepsTheMixAsSeparateUpDoes) {
  EXPECT_EQ(choose("Q4_K_M", "blk.5.ffn_up.weight", 5), DType::Q4_K);
  EXPECT_EQ(choose("Q3_K_M", "blk.5.ffn_up.weight", 5), DType::Q3_K);
}

TEST(QuantizeRules, VectorsStayAsTheyAre) {
  TensorRole role{"rope_factors_long.weight", {48}};
  EXPECT_FALSE(choose_type(*find_quant_mix("Q4_K_M"), role, nullptr).has_value());
  TensorRole bias{"blk.0.attn_q.bias", {896}};
  EXPECT_FALSE(choose_type(*find_quant_mix("Q4_K_M"), bias, nullptr).has_value());
}

}  // namespace
}  // namespace ps
