#pragma once
// Requantizing a GGUF model: which type each tensor gets under a named mix (as llama.cpp's
// quantize tool chooses them), and the conversion itself, tensor by tensor.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "gguf/gguf.h"

namespace ps {

// A target such as Q4_K_M: the base type of the weight matrices and llama.cpp's file-type code
// (general.file_type).
struct QuantMix {
  std::string name;
  DType base;
  uint32_t file_type;
};
// The mixes `polystack quantize` takes (and llama.cpp's aliases Q3_K, Q4_K, Q5_K for the _M
// mixes), in any case; nullopt for any other name.
std::optional<QuantMix> find_quant_mix(std::string_view name);
std::vector<std::string> quant_mix_names();
// The name of llama.cpp's file-type code (general.file_type), e.g. 15 -> "Q4_K_M"; nullopt for
// codes it does not define.
std::optional<std::string> file_type_name(uint32_t code);

// Where a tensor sits in the model, for the mixes' per-tensor rules.
struct TensorRole {
  std::string name;
  std::vector<int64_t> dims;
  int layer = -1, n_layers = 0;  // for blk.N.* tensors
  bool tied_output = false;      // token_embd.weight when the model has no output.weight
  int n_gqa = 1;                 // query heads per KV head
};

// The type a tensor gets, or nullopt when it stays as it is (vectors, non-weights). When the
// mix's type cannot hold the rows (their length is not a multiple of its block), the choice
// falls back to one that can and *fallback says so.
std::optional<DType> choose_type(const QuantMix& mix, const TensorRole& t, std::string* fallback);

struct QuantizeProgress {
  size_t index, count;  // tensors done (1-based) and in all
  const std::string* name;
  DType type;
};
struct QuantizeReport {
  std::vector<std::string> fallbacks;
  uint64_t bytes_in = 0, bytes_out = 0;
};

// Reads `in`, writes `out` with every weight matrix converted; all metadata is kept except
// general.file_type (set to the mix's) and general.quantization_version (2). Throws
// UsageError / GgufError / ModelError naming the problem; UsageError too for a weight already
// quantized that would be converted, unless allow_requantize (as llama.cpp's quantize).
QuantizeReport quantize_model(const std::string& in, const std::string& out, const QuantMix& mix,
                              int threads, bool allow_requantize,
                              const std::function<void(const QuantizeProgress&)>& progress);

}  // namespace ps
