#include <fmt/format.h>

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/text.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace ps::cli {
namespace {

constexpr uint64_t kArrayPreview = 8;     // elements shown in text output
constexpr uint64_t kJsonArrayFull = 256;  // longer arrays are summarized in JSON

uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

std::string json_text(std::string_view s) { return printable(s, false); }
std::string term_text(std::string_view s) { return printable(s, true); }

nlohmann::json scalar_json(const gguf::Value& v) {
  using gguf::ValueType;
  switch (v.type) {
    case ValueType::STRING:
      return json_text(v.str);
    case ValueType::BOOL:
      return v.u != 0;
    case ValueType::F32:
    case ValueType::F64:
      return v.f;
    case ValueType::U8:
    case ValueType::U16:
    case ValueType::U32:
    case ValueType::U64:
      return v.u;
    default:
      return v.i;
  }
}

nlohmann::json element_json(const gguf::Array& a, uint64_t i) {
  using gguf::ValueType;
  switch (a.elem_type) {
    case ValueType::STRING:
      return json_text(a.string_at(i));
    case ValueType::F32:
    case ValueType::F64:
      return a.double_at(i);
    case ValueType::BOOL:
      return a.int_at(i) != 0;
    case ValueType::U64:  // may be above int64's range; i < count, so raw holds it
      return load_u64(a.raw + i * 8);
    default:
      return a.int_at(i);
  }
}

nlohmann::json value_json(const gguf::Value& v) {
  if (v.type != gguf::ValueType::ARRAY) return scalar_json(v);
  const gguf::Array& a = *v.arr;
  nlohmann::json items = nlohmann::json::array();
  const uint64_t n = a.count <= kJsonArrayFull ? a.count : kArrayPreview;
  for (uint64_t i = 0; i < n; ++i) items.push_back(element_json(a, i));
  if (a.count <= kJsonArrayFull) return items;
  return {{"type", fmt::format("array[{}]", gguf::value_type_name(a.elem_type))},
          {"count", a.count},
          {"head", items}};
}

std::string value_text(const gguf::Value& v) {
  if (v.type == gguf::ValueType::STRING)
    return fmt::format("\"{}\"{}", term_text(v.str.substr(0, 120)),
                       v.str.size() > 120 ? "..." : "");
  if (v.type != gguf::ValueType::ARRAY) return scalar_json(v).dump();
  const gguf::Array& a = *v.arr;
  std::string s = fmt::format("[{} x {}]", a.count, gguf::value_type_name(a.elem_type));
  std::string items;
  for (uint64_t i = 0; i < std::min(a.count, kArrayPreview); ++i)
    items += (i ? ", " : "") + (a.elem_type == gguf::ValueType::STRING
                                    ? fmt::format("\"{}\"", term_text(a.string_at(i)))
                                    : element_json(a, i).dump());
  return s + " " + "[" + items + (a.count > kArrayPreview ? ", ..." : "") + "]";
}

std::string human_bytes(uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.2f} GiB", double(b) / double(1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.2f} MiB", double(b) / double(1ull << 20));
  if (b >= (1ull << 10)) return fmt::format("{:.2f} KiB", double(b) / double(1ull << 10));
  return fmt::format("{} B", b);
}

}  // namespace

Action add_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Show a GGUF file's metadata and tensors");
  auto path = std::make_shared<std::string>();
  auto flag_path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("model", *path, "GGUF file (or -m; default: as run finds one)");
  cmd->add_option("-m,--model", *flag_path, "GGUF file");
  cmd->add_flag("--json", *json, "Machine-readable output");
  return [path, flag_path, json] {
    if (!path->empty() && !flag_path->empty() && *path != *flag_path)
      throw UsageError(
          fmt::format("two models given: {} and -m {}; inspect reads one", *path, *flag_path));
    ModelFlags mf;
    mf.model = path->empty() ? *flag_path : *path;
    const ModelChoice choice = resolve_model_path(mf);
    if (choice.origin != "-m") fmt::print(stderr, "polystack: model: {}\n", choice.origin);
    auto f = gguf::File::open(choice.path);
    uint64_t total_bytes = 0, total_elems = 0;
    std::map<std::string, uint64_t> by_type;
    for (const auto& t : f->tensors()) {
      total_bytes += t.nbytes;
      total_elems += uint64_t(t.n_elements());
      by_type[std::string(dtype_name(t.type))] += 1;
    }
    // How polystack would run the file: its architecture's features, or why it cannot.
    std::unique_ptr<Model> model;
    std::string model_error;
    try {
      model = Model::load(*f);
    } catch (const Error& e) {  // metadata of a wrong type too: inspect still shows the file
      model_error = e.what();
    }
    if (*json) {
      nlohmann::json out;
      if (model) {
        const ModelParams& mp = model->params();
        out["model"] = {{"architecture", mp.architecture},
                        {"features", mp.features},
                        {"warnings", mp.warnings}};
      } else {
        out["model_error"] = json_text(model_error);
      }
      out["path"] = json_text(choice.path);
      out["version"] = f->version();
      out["alignment"] = f->alignment();
      out["file_size"] = f->file_size();
      out["data_offset"] = f->data_offset();
      out["n_elements"] = total_elems;
      out["tensor_bytes"] = total_bytes;
      nlohmann::json md = nlohmann::json::object();
      for (const auto& [k, v] : f->metadata()) md[json_text(k)] = value_json(v);
      out["metadata"] = md;
      nlohmann::json ts = nlohmann::json::array();
      for (const auto& t : f->tensors())
        ts.push_back({{"name", json_text(t.name)},
                      {"type", dtype_name(t.type)},
                      {"shape", t.dims},
                      {"offset", t.offset},
                      {"bytes", t.nbytes}});
      out["tensors"] = ts;
      // Every string above is valid UTF-8; replace is a last guard (a name inside a message).
      fmt::print("{}\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
      return 0;
    }
    fmt::print("file: {}\nGGUF version {}, alignment {}, {} ({} bytes)\n", choice.path,
               f->version(), f->alignment(), human_bytes(f->file_size()), f->file_size());
    fmt::print("\nmetadata ({} keys):\n", f->metadata().size());
    for (const auto& [k, v] : f->metadata())
      fmt::print("  {:<44} {}\n", term_text(k), value_text(v));
    fmt::print("\ntensors ({}, {} elements, {}):\n", f->tensors().size(), total_elems,
               human_bytes(total_bytes));
    for (const auto& t : f->tensors())
      fmt::print("  {:<36} {:<6} [{}]  {}\n", term_text(t.name), dtype_name(t.type),
                 fmt::join(t.dims, ", "), human_bytes(t.nbytes));
    fmt::print("\ntypes:");
    for (const auto& [t, n] : by_type) fmt::print(" {} x{}", t, n);
    fmt::print("\n");
    if (model) {
      const ModelParams& mp = model->params();
      fmt::print("\nmodel: {}, {} layers, head size {}, RoPE over {} dims ({})\n", mp.architecture,
                 mp.n_layer, mp.head_dim, mp.n_rot,
                 mp.rope_mode == RopeMode::NeoX ? "NeoX halves" : "adjacent pairs");
      for (const std::string& s : mp.features) fmt::print("  uses: {}\n", term_text(s));
      for (const std::string& s : mp.warnings) fmt::print("  warning: {}\n", term_text(s));
    } else {
      fmt::print("\nmodel: polystack cannot run this file: {}\n", term_text(model_error));
    }
    return 0;
  };
}

}  // namespace ps::cli
