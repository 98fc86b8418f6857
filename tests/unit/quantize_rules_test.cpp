// The per-tensor rules of the quantization mixes, as llama.cpp's quantize tool applies them
// (src/llama-quant.cpp): here the fused tensors of phi3 beside the separate ones of llama.
#include <gtest/gtest.h>

#include <string>

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

// The small and large mixes by llama.cpp's rules (32 layers: the first eighth is layers 0-3).
TEST(QuantizeRules, SmallAndLargeMixes) {
  EXPECT_EQ(choose("Q4_K_S", "blk.3.attn_v.weight", 3), DType::Q5_K);
  EXPECT_EQ(choose("Q4_K_S", "blk.4.attn_v.weight", 4), DType::Q4_K);
  EXPECT_EQ(choose("Q4_K_S", "blk.3.ffn_down.weight", 3), DType::Q5_K);
  EXPECT_EQ(choose("Q4_K_S", "blk.4.ffn_down.weight", 4), DType::Q4_K);
  EXPECT_EQ(choose("Q4_K_S", "blk.9.attn_q.weight", 9), DType::Q4_K);
  EXPECT_EQ(choose("Q3_K_L", "blk.9.attn_v.weight", 9), DType::Q5_K);
  EXPECT_EQ(choose("Q3_K_L", "blk.9.ffn_down.weight", 9), DType::Q5_K);
  EXPECT_EQ(choose("Q3_K_L", "blk.9.attn_output.weight", 9), DType::Q5_K);
  EXPECT_EQ(choose("Q3_K_L", "blk.9.attn_qkv.weight", 9), DType::Q4_K);
  EXPECT_EQ(choose("Q3_K_L", "blk.9.ffn_up.weight", 9), DType::Q3_K);
  EXPECT_EQ(choose("Q3_K_S", "blk.0.attn_v.weight", 0), DType::Q3_K);
  EXPECT_EQ(choose("Q3_K_S", "blk.0.ffn_down.weight", 0), DType::Q3_K);
  EXPECT_EQ(choose("Q5_K_S", "blk.0.attn_v.weight", 0), DType::Q5_K);
  EXPECT_EQ(choose("Q5_K_S", "output.weight", -1), DType::Q6_K);
  EXPECT_EQ(choose("Q3_K_S", "output.weight", -1), DType::Q6_K);
}

// The IQ4 mixes without an importance matrix, and MXFP4_MOE: experts in MXFP4, the rest Q8_0.
TEST(QuantizeRules, CodebookMixes) {
  for (const char* mix : {"IQ4_NL", "IQ4_XS"}) {
    SCOPED_TRACE(mix);
    const DType base = *dtype_from_name(mix);
    EXPECT_EQ(choose(mix, "blk.9.attn_q.weight", 9), base);
    EXPECT_EQ(choose(mix, "blk.3.ffn_down.weight", 3), DType::Q5_K);
    EXPECT_EQ(choose(mix, "blk.4.ffn_down.weight", 4), base);
    EXPECT_EQ(choose(mix, "blk.2.ffn_down_exps.weight", 2), DType::Q5_K);
    EXPECT_EQ(choose(mix, "blk.0.attn_v.weight", 0), base);  // n_gqa 1 here
    EXPECT_EQ(choose(mix, "output.weight", -1), DType::Q6_K);
  }
  TensorRole gqa{"blk.9.attn_v.weight", {3072, 1024}};
  gqa.layer = 9;
  gqa.n_layers = 32;
  gqa.n_gqa = 4;
  EXPECT_EQ(choose_type(*find_quant_mix("IQ4_XS"), gqa, nullptr), DType::Q5_K);
  // Rows of 96 hold no IQ4_XS super-block: IQ4_NL, as llama.cpp falls back.
  TensorRole narrow{"blk.9.attn_q.weight", {96, 96}};
  narrow.layer = 9;
  narrow.n_layers = 32;
  std::string why;
  EXPECT_EQ(choose_type(*find_quant_mix("IQ4_XS"), narrow, &why), DType::IQ4_NL);
  EXPECT_NE(why.find("using IQ4_NL"), std::string::npos) << why;

  const QuantMix mx = *find_quant_mix("mxfp4_moe");  // a copy: the optional is a temporary
  EXPECT_EQ(mx.file_type, 38u);
  TensorRole experts{"blk.1.ffn_up_exps.weight", {3072, 768, 32}};
  experts.layer = 1;
  experts.n_layers = 32;
  EXPECT_EQ(choose_type(mx, experts, nullptr), DType::MXFP4);
  EXPECT_EQ(choose("MXFP4_MOE", "blk.1.attn_q.weight", 1), DType::Q8_0);
  EXPECT_EQ(choose("MXFP4_MOE", "output.weight", -1), DType::Q8_0);
  EXPECT_EQ(find_quant_mix("IQ4_NL")->file_type, 25u);
  EXPECT_EQ(find_quant_mix("IQ4_XS")->file_type, 30u);
}

TEST(QuantizeRules, LlamaCppNamesAndFileTypes) {
  EXPECT_EQ(find_quant_mix("Q4_K")->name, "Q4_K_M");
  EXPECT_EQ(find_quant_mix("q5_k")->name, "Q5_K_M");
  EXPECT_EQ(find_quant_mix("Q3_K")->name, "Q3_K_M");
  EXPECT_EQ(find_quant_mix("Q4_K_S")->file_type, 14u);
  EXPECT_EQ(find_quant_mix("Q5_K_S")->file_type, 16u);
  EXPECT_EQ(find_quant_mix("Q3_K_S")->file_type, 11u);
  EXPECT_EQ(find_quant_mix("Q3_K_L")->file_type, 13u);
  EXPECT_FALSE(find_quant_mix("Q4_K_X").has_value());
  EXPECT_EQ(file_type_name(14).value_or(""), "Q4_K_S");
}

TEST(QuantizeRules, VectorsStayAsTheyAre) {
  TensorRole role{"rope_factors_long.weight", {48}};
  EXPECT_FALSE(choose_type(*find_quant_mix("Q4_K_M"), role, nullptr).has_value());
  TensorRole bias{"blk.0.attn_q.bias", {896}};
  EXPECT_FALSE(choose_type(*find_quant_mix("Q4_K_M"), bias, nullptr).has_value());
}

}  // namespace
}  // namespace ps
