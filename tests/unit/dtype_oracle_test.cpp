// Checks ps::quantize_row / ps::dequantize_row against vectors made by the gguf Python package
// (tests/oracle/make_dtype_vectors.py). The package's quantizers reproduce llama.cpp's
// reference ones (same float32 operation order, round-half-away-from-zero for Q8_0, truncation
// after +0.5 / +8.5 / +16.5 for the 4- and 5-bit types, round-to-nearest-even for the fp16
// and bf16 casts), so both directions must match bit for bit: a GGUF quantized by us must be
// byte-identical to one written by llama.cpp's tools, and dequantized weights must be exact.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/fp16.h"
#include "gguf/gguf.h"

namespace {

constexpr const char* kVectorsEnv = "POLYSTACK_DTYPE_VECTORS";

struct OracleTensors {
  const ps::gguf::TensorInfo* src;
  const ps::gguf::TensorInfo* quantized;
  const ps::gguf::TensorInfo* ref;
};

class DtypeOracle : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const char* path = std::getenv(kVectorsEnv);
    if (path == nullptr || *path == '\0') {
      GTEST_SKIP()
          << kVectorsEnv
          << " is not set; the CTest test oracle.dtype_vectors.check sets it after writing the "
             "vectors with tests/oracle/make_dtype_vectors.py";
    }
    if (!std::filesystem::exists(path)) {
      GTEST_SKIP() << kVectorsEnv << "=" << path << " does not exist";
    }
    file_ = ps::gguf::File::open(path);
    const auto type = ps::dtype_from_name(GetParam());
    ASSERT_TRUE(type.has_value()) << GetParam();
    type_ = *type;
    const std::string name = GetParam();
    t_.src = file_->find_tensor("src." + name);
    t_.quantized = file_->find_tensor("q." + name);
    t_.ref = file_->find_tensor("ref." + name);
    // src.T is absent for the types the package only dequantizes (the k-quants).
    ASSERT_NE(t_.quantized, nullptr) << "q." << name << " missing from " << path;
    ASSERT_NE(t_.ref, nullptr) << "ref." << name << " missing from " << path;
    ASSERT_EQ(t_.ref->type, ps::DType::F32);
    ASSERT_EQ(t_.quantized->type, type_);
    ASSERT_EQ(t_.quantized->dims.size(), 2u);
    ASSERT_EQ(t_.ref->dims, t_.quantized->dims);
    if (t_.src) {
      ASSERT_EQ(t_.src->type, ps::DType::F32);
      ASSERT_EQ(t_.src->dims, t_.quantized->dims);
    }
    cols_ = t_.quantized->dims[0];
    rows_ = t_.quantized->dims[1];
    ASSERT_EQ(cols_ % ps::block_size(type_), 0);
    ASSERT_EQ(t_.quantized->nbytes, size_t(rows_) * ps::row_bytes(type_, cols_));
  }

  // GGUF does not promise float alignment inside the data section, so rows are copied out.
  std::vector<float> f32_row(const ps::gguf::TensorInfo& t, int64_t row) const {
    std::vector<float> out(static_cast<size_t>(cols_));
    std::memcpy(out.data(), t.data + size_t(row * cols_) * sizeof(float), out.size() * 4);
    return out;
  }
  const uint8_t* quantized_row(int64_t row) const {
    return t_.quantized->data + size_t(row) * ps::row_bytes(type_, cols_);
  }

  std::unique_ptr<ps::gguf::File> file_;
  ps::DType type_ = ps::DType::F32;
  OracleTensors t_{};
  int64_t rows_ = 0, cols_ = 0;

  void expect_dequantize_matches() const {
    int mismatches = 0;
    bool any_nonzero = false;
    for (int64_t r = 0; r < rows_; ++r) {
      std::vector<float> ours(static_cast<size_t>(cols_));
      ps::dequantize_row(type_, quantized_row(r), ours.data(), cols_);
      const std::vector<float> ref = f32_row(*t_.ref, r);
      for (int64_t c = 0; c < cols_; ++c) {
        const uint32_t a = ps::f32_to_bits(ours[size_t(c)]), b = ps::f32_to_bits(ref[size_t(c)]);
        any_nonzero |= (b & 0x7fffffffu) != 0;
        if (a != b && ++mismatches <= 8) {
          ADD_FAILURE() << GetParam() << " row " << r << " col " << c << " (block "
                        << c / ps::block_size(type_) << "): ours " << ours[size_t(c)] << " (0x"
                        << std::hex << a << ") ref " << ref[size_t(c)] << " (0x" << b << std::dec
                        << ")";
        }
      }
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_TRUE(any_nonzero) << "the reference vectors are all zero";
  }
};

TEST_P(DtypeOracle, DequantizeMatchesGgufPackageBitForBit) { expect_dequantize_matches(); }

TEST_P(DtypeOracle, QuantizeMatchesGgufPackageByteForByte) {
  ASSERT_NE(t_.src, nullptr) << "src." << GetParam() << " missing";
  const size_t rb = ps::row_bytes(type_, cols_);
  const size_t block_bytes = ps::dtype_info(type_).block_bytes;
  int mismatches = 0;
  for (int64_t r = 0; r < rows_; ++r) {
    const std::vector<float> src = f32_row(*t_.src, r);
    std::vector<uint8_t> ours(rb, 0xAA);
    ps::quantize_row(type_, src.data(), ours.data(), cols_);
    const uint8_t* ref = quantized_row(r);
    for (size_t i = 0; i < rb; ++i) {
      if (ours[i] != ref[i] && ++mismatches <= 8) {
        ADD_FAILURE() << GetParam() << " row " << r << " block " << i / block_bytes << " byte "
                      << i % block_bytes << ": ours 0x" << std::hex << int(ours[i]) << " ref 0x"
                      << int(ref[i]) << std::dec;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(GgufPackage, DtypeOracle,
                         ::testing::Values("F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                           "MXFP4"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

// The k-quants, IQ4_NL and IQ4_XS: the gguf package dequantizes them (from random blocks) but
// has no quantizer.
class KQuantDtypeOracle : public DtypeOracle {};

TEST_P(KQuantDtypeOracle, DequantizeMatchesGgufPackageBitForBit) { expect_dequantize_matches(); }

INSTANTIATE_TEST_SUITE_P(GgufPackage, KQuantDtypeOracle,
                         ::testing::Values("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL",
                                           "IQ4_XS"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
