#include "model/quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <memory>

#include "core/error.h"
#include "core/thread_pool.h"
#include "gguf/writer.h"

namespace ps {
namespace {

// llama.cpp's file-type codes (general.file_type).
const QuantMix kMixes[] = {
    {"F16", DType::F16, 1},          {"BF16", DType::BF16, 32},     {"Q8_0", DType::Q8_0, 7},
    {"Q4_0", DType::Q4_0, 2},        {"Q4_1", DType::Q4_1, 3},      {"Q5_0", DType::Q5_0, 8},
    {"Q5_1", DType::Q5_1, 9},        {"Q2_K", DType::Q2_K, 10},     {"Q3_K_S", DType::Q3_K, 11},
    {"Q3_K_M", DType::Q3_K, 12},     {"Q3_K_L", DType::Q3_K, 13},   {"Q4_K_S", DType::Q4_K, 14},
    {"Q4_K_M", DType::Q4_K, 15},     {"Q5_K_S", DType::Q5_K, 16},   {"Q5_K_M", DType::Q5_K, 17},
    {"Q6_K", DType::Q6_K, 18},       {"IQ4_NL", DType::IQ4_NL, 25}, {"IQ4_XS", DType::IQ4_XS, 30},
    {"MXFP4_MOE", DType::MXFP4, 38},
};
// llama.cpp's quantize takes these names for the medium mixes.
const std::pair<const char*, const char*> kMixAliases[] = {
    {"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"}};

bool same_name(std::string_view name, std::string_view m) {
  if (m.size() != name.size()) return false;
  for (size_t i = 0; i < name.size(); ++i)
    if (std::toupper(static_cast<unsigned char>(name[i])) != m[i]) return false;
  return true;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// llama.cpp's rule for spending more bits on some layers: the first and last eighth, and every
// third layer between them.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// The type a row length can hold instead of t (as llama.cpp falls back).
DType fallback_for(DType t) {
  switch (t) {
    case DType::Q2_K:
    case DType::Q3_K:
      return DType::Q4_0;
    case DType::Q4_K:
      return DType::Q5_0;
    case DType::Q5_K:
      return DType::Q5_1;
    case DType::Q6_K:
      return DType::Q8_0;
    case DType::IQ4_XS:
      return DType::IQ4_NL;
    default:
      return DType::F16;
  }
}

}  // namespace

std::optional<QuantMix> find_quant_mix(std::string_view name) {
  for (auto [alias, full] : kMixAliases)
    if (same_name(name, alias)) name = full;
  for (const QuantMix& m : kMixes)
    if (same_name(name, m.name)) return m;
  return std::nullopt;
}

std::vector<std::string> quant_mix_names() {
  std::vector<std::string> out;
  for (const QuantMix& m : kMixes) out.push_back(m.name);
  return out;
}

std::optional<std::string> file_type_name(uint32_t code) {
  for (const QuantMix& m : kMixes)
    if (m.file_type == code) return m.name;
  // Codes of llama.cpp's mixes that polystack runs but does not write.
  static const std::pair<uint32_t, const char*> kOthers[] = {{0, "F32"}};
  for (auto [c, name] : kOthers)
    if (c == code) return std::string(name);
  return std::nullopt;
}

std::optional<DType> choose_type(const QuantMix& mix, const TensorRole& t, std::string* fallback) {
  if (t.dims.size() < 2 || !ends_with(t.name, "weight")) return std::nullopt;
  // A mixture of experts' router: small, and a rounding there can change which experts run.
  if (ends_with(t.name, "ffn_gate_inp.weight")) return std::nullopt;
  const bool k_mix = block_size(mix.base) == QK_K;
  const bool iq4 = mix.name == "IQ4_NL" || mix.name == "IQ4_XS";
  DType type = mix.base;
  const bool output = t.name == "output.weight" || t.tied_output;
  if (mix.name == "MXFP4_MOE") {
    // The experts' stacked weights in MXFP4, everything else (the output too) in Q8_0.
    type = t.dims.size() >= 3 && t.dims[2] > 1 && !output ? DType::MXFP4 : DType::Q8_0;
  } else if (output) {
    // The output projection decides every token: 6 bits for every 2- to 6-bit mix.
    if (type != DType::F16 && type != DType::BF16 && type != DType::Q8_0) type = DType::Q6_K;
  } else if (iq4 && t.layer >= 0) {
    // llama.cpp's rules for the IQ4 mixes without an importance matrix.
    if (ends_with(t.name, "attn_v.weight") && t.n_gqa >= 4) type = DType::Q5_K;
    if ((ends_with(t.name, "ffn_down.weight") || ends_with(t.name, "ffn_down_exps.weight") ||
         ends_with(t.name, "ffn_down_shexp.weight")) &&
        t.layer < t.n_layers / 8)
      type = DType::Q5_K;
  } else if (k_mix && t.layer >= 0) {
    const int i = t.layer, n = t.n_layers;
    if (ends_with(t.name, "attn_v.weight")) {
      if (mix.name == "Q2_K") type = t.n_gqa >= 4 ? DType::Q4_K : DType::Q3_K;
      if (mix.name == "Q3_K_M") type = i < 2 ? DType::Q5_K : DType::Q4_K;
      if (mix.name == "Q3_K_L") type = DType::Q5_K;
      if ((mix.name == "Q4_K_M" || mix.name == "Q5_K_M") && use_more_bits(i, n)) type = DType::Q6_K;
      if (mix.name == "Q4_K_S" && i < 4) type = DType::Q5_K;
    } else if (ends_with(t.name, "ffn_down.weight") || ends_with(t.name, "ffn_down_exps.weight") ||
               ends_with(t.name, "ffn_down_shexp.weight")) {
      if (mix.name == "Q2_K") type = DType::Q3_K;
      if (mix.name == "Q3_K_M") type = i < n / 16 ? DType::Q5_K : DType::Q4_K;
      if (mix.name == "Q3_K_L") type = DType::Q5_K;
      if ((mix.name == "Q4_K_M" || mix.name == "Q5_K_M") && use_more_bits(i, n)) type = DType::Q6_K;
      if (mix.name == "Q4_K_S" && i < n / 8) type = DType::Q5_K;
    } else if (ends_with(t.name, "attn_output.weight")) {
      if (mix.name == "Q2_K") type = DType::Q3_K;
      if (mix.name == "Q3_K_M") type = DType::Q4_K;
      if (mix.name == "Q3_K_L") type = DType::Q5_K;
    } else if (ends_with(t.name, "attn_qkv.weight")) {  // phi3's fused Q, K and V
      if (mix.name == "Q3_K_M" || mix.name == "Q3_K_L") type = DType::Q4_K;
      if (mix.name == "Q4_K_M") type = DType::Q5_K;
      if (mix.name == "Q5_K_M") type = DType::Q6_K;
    }
  }
  if (t.dims[0] % block_size(type) != 0) {
    DType alt = fallback_for(type);
    if (t.dims[0] % block_size(alt) != 0) alt = DType::F16;
    if (fallback)
      *fallback = fmt::format("{}: rows of {} do not fit {} blocks of {}; using {}", t.name,
                              t.dims[0], dtype_name(type), block_size(type), dtype_name(alt));
    type = alt;
  }
  return type;
}

QuantizeReport quantize_model(const std::string& in, const std::string& out, const QuantMix& mix,
                              int threads, bool allow_requantize,
                              const std::function<void(const QuantizeProgress&)>& progress) {
  const auto file = gguf::File::open(in);
  const std::string arch = file->get_string("general.architecture");
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  const int n_layers = int(file->get_int(arch + ".block_count", 0, 0, kMaxDim));
  const int64_t n_head = file->get_int(arch + ".attention.head_count", 1, 1, kMaxDim);
  const int64_t n_head_kv = file->get_int(arch + ".attention.head_count_kv", n_head, 1, kMaxDim);
  const bool tied = file->find_tensor("output.weight") == nullptr;

  QuantizeReport report;
  gguf::Writer w(out, file->alignment());
  for (const auto& [key, v] : file->metadata())
    if (key != "general.file_type" && key != "general.quantization_version") w.add(key, v);
  w.add_u32("general.quantization_version", 2);
  w.add_u32("general.file_type", mix.file_type);

  std::vector<DType> types;
  for (const gguf::TensorInfo& t : file->tensors()) {
    TensorRole role{t.name, t.dims};
    role.n_layers = n_layers;
    role.tied_output = tied && t.name == "token_embd.weight";
    role.n_gqa = int(n_head / std::max<int64_t>(n_head_kv, 1));
    if (t.name.rfind("blk.", 0) == 0) role.layer = std::atoi(t.name.c_str() + 4);
    std::string fallback;
    const std::optional<DType> chosen = choose_type(mix, role, &fallback);
    const DType type = chosen ? *chosen : t.type;
    if (chosen && !dtype_info(t.type).computable && t.type != DType::F32)
      throw UsageError(fmt::format("{}: tensor {} is {}, which polystack cannot read to requantize",
                                   in, t.name, dtype_name(t.type)));
    const bool source_quantized =
        t.type != DType::F32 && t.type != DType::F16 && t.type != DType::BF16;
    if (chosen && *chosen != t.type && source_quantized && !allow_requantize)
      throw UsageError(fmt::format(
          "{}: tensor {} is already quantized ({}): quantizing it again loses more than "
          "quantizing the original; start from an F16/BF16/F32 file, or pass --allow-requantize",
          in, t.name, dtype_name(t.type)));
    if (!fallback.empty()) report.fallbacks.push_back(fallback);
    types.push_back(type);
    w.add_tensor(t.name, t.dims, type);
  }
  w.begin();

  ThreadPool pool(std::max(threads, 1));
  const auto& tensors = file->tensors();
  for (size_t k = 0; k < tensors.size(); ++k) {
    const gguf::TensorInfo& t = tensors[k];
    report.bytes_in += t.nbytes;
    if (types[k] == t.type) {
      w.write_tensor(t.data, t.nbytes);
      report.bytes_out += t.nbytes;
    } else {
      const int64_t cols = t.dims[0], rows = t.n_elements() / cols;
      const size_t in_row = row_bytes(t.type, cols), out_row = row_bytes(types[k], cols);
      std::vector<uint8_t> dst(size_t(rows) * out_row);
      constexpr int64_t kRowsPerTask = 16;
      pool.parallel_for((rows + kRowsPerTask - 1) / kRowsPerTask, [&](int64_t task, int) {
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = task * kRowsPerTask; r < std::min(rows, (task + 1) * kRowsPerTask); ++r) {
          dequantize_row(t.type, t.data + size_t(r) * in_row, row.data(), cols);
          quantize_row(types[k], row.data(), dst.data() + size_t(r) * out_row, cols);
        }
      });
      w.write_tensor(dst.data(), dst.size());
      report.bytes_out += dst.size();
    }
    if (progress) progress({k + 1, tensors.size(), &t.name, types[k]});
  }
  w.finish();
  return report;
}

}  // namespace ps
