#include <fmt/format.h>

#include <cctype>
#include <nlohmann/json.hpp>

#include "backend/device_choice.h"
#include "backend/physical_device.h"
#include "backend/registry.h"
#include "cli/commands.h"
#include "core/error.h"
#include "grammar/json_schema.h"
#include "template/chat_template.h"

namespace ps::cli {

void add_chat_template_flags(CLI::App* cmd, std::string& chat_template, std::string& reasoning) {
  cmd->add_option("--chat-template", chat_template,
                  "Chat template: a built-in (" + jinja::builtin_template_list() +
                      ") or a Jinja file (default: the model's own)");
  cmd->add_option("--reasoning", reasoning,
                  "on|off: enable_thinking for templates that take it (default: the template's)")
      ->check(CLI::IsMember({"on", "off"}));
}

void add_grammar_flags(CLI::App* cmd, GrammarFlags& g) {
  CLI::Option* const opts[] = {
      cmd->add_option("--grammar", g.text,
                      "Constrain the output to a grammar (llama.cpp's GBNF, start rule 'root')")
          ->type_name("GBNF"),
      cmd->add_option("--grammar-file", g.file, "Read the --grammar from a file")
          ->type_name("FILE"),
      cmd->add_option("-j,--json-schema", g.json_schema,
                      "Constrain the output to JSON that is an instance of this JSON Schema "
                      "(a subset: see the README; what is not supported is an error)")
          ->type_name("SCHEMA"),
      cmd->add_option("--json-schema-file", g.json_schema_file,
                      "Read the --json-schema from a file")
          ->type_name("FILE"),
  };
  for (CLI::Option* a : opts)
    for (CLI::Option* b : opts)
      if (a != b) a->excludes(b);
}

std::shared_ptr<const grammar::Grammar> load_grammar(const GrammarFlags& g) {
  std::string src, flag;
  if (!g.json_schema.empty() || !g.json_schema_file.empty()) {
    const bool file = !g.json_schema_file.empty();
    flag = file ? "--json-schema-file " + g.json_schema_file : "--json-schema";
    nlohmann::ordered_json schema;
    try {
      // ordered: the properties come out in the schema's order.
      schema =
          nlohmann::ordered_json::parse(file ? read_file_bytes(g.json_schema_file) : g.json_schema);
    } catch (const nlohmann::json::parse_error& e) {
      throw UsageError(fmt::format("{}: not JSON: {}", flag, e.what()));
    }
    try {
      src = grammar::json_schema_to_gbnf(schema);
    } catch (const grammar::GrammarError& e) {
      throw UsageError(fmt::format("{}: {}", flag, e.what()));
    }
  } else if (!g.text.empty() || !g.file.empty()) {
    flag = g.file.empty() ? "--grammar" : g.file;
    src = g.file.empty() ? g.text : read_file_bytes(g.file);
  } else {
    return nullptr;
  }
  try {
    return std::make_shared<const grammar::Grammar>(grammar::Grammar::parse(src));
  } catch (const grammar::GrammarError& e) {
    throw UsageError(fmt::format("{}: {}", flag, e.what()));
  }
}

namespace {

// "3,1" or "3/1": proportions of zero or more.
std::vector<double> parse_proportions(const std::string& flag, const std::string& v) {
  std::vector<double> out;
  size_t at = 0;
  while (at <= v.size()) {
    const size_t comma = v.find_first_of(",/", at);
    const std::string item = v.substr(at, comma == std::string::npos ? comma : comma - at);
    char* end = nullptr;
    const double x = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(x >= 0) || x > 1e9)
      throw CLI::ValidationError(flag, "'" + v + "' is not a list of proportions like 3,1");
    out.push_back(x);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

}  // namespace

void add_model_flags(CLI::App* cmd, ModelFlags& f, bool model_required) {
  auto* m = cmd->add_option("-m,--model", f.model,
                            "GGUF model file (default: POLYSTACK_MODEL, else the default model; "
                            "see the README)");
  if (model_required) m->required();
  cmd->add_option("-c,--ctx-size", f.context.n_ctx,
                  "Context size in tokens: the KV pool's cells, shared by every sequence (0: the "
                  "model's, at most 4096)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("-b,--batch-size", f.context.n_batch, "Prompt tokens per forward pass")
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("-t,--threads", f.context.n_threads, "CPU threads (0: physical cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--device", f.context.device,
                  "Device: auto (default), cpu, gpu, an API (cuda, vulkan, ...), an id "
                  "(vulkan:0), a UUID or pci:0000:41:00.0; default POLYSTACK_DEVICE");
  cmd->add_flag("--strict", f.context.strict,
                "Fail instead of falling back: a device passed over for a failure, ops run "
                "elsewhere");
  cmd->add_flag("--deterministic", f.context.deterministic,
                "CPU: compute each token the same way whatever else shares its batch, so a "
                "greedy answer does not depend on other requests (slower: docs/PERFORMANCE.md)");
  cmd->add_flag_callback(
      "--no-self-check", [&f] { f.context.self_check = false; },
      "Run on a GPU without checking it against the CPU first");
  cmd->add_option_function<std::string>(
      "--n-gpu-layers",
      [&f](const std::string& v) { f.context.n_gpu_layers = parse_gpu_layers(v); },
      "Layers on the GPU: auto (default: as many as its free memory holds), all, or N (the "
      "last N; above the layer count, everything); the rest on the CPU");
  cmd->add_option_function<std::string>(
      "--split-mode",
      [&f](const std::string& v) {
        if (v == "row")
          throw CLI::ValidationError("--split-mode",
                                     "row (one matmul across GPUs) is not supported; use layer");
        if (v != "none" && v != "layer")
          throw CLI::ValidationError("--split-mode", "'" + v + "' is not none or layer");
        f.context.split_layers = v == "layer";
      },
      "none (default): one GPU; layer: the layers spread over every GPU that passed its checks");
  cmd->add_option_function<std::string>(
      "--tensor-split",
      [&f](const std::string& v) {
        f.context.tensor_split = parse_proportions("--tensor-split", v);
        f.context.split_layers = true;
      },
      "Shares of the layers per GPU in id order, like 3,1 (implies --split-mode layer)");
  cmd->add_flag("--mpi", f.context.mpi,
                "Spread the layers over the ranks of the MPI job this runs in (mpirun -np N "
                "polystack ... --mpi): rank 0 runs the command, each rank holds a range of "
                "layers on its own devices");
  cmd->add_option_function<std::string>(
      "--rank-split",
      [&f](const std::string& v) { f.context.rank_split = parse_proportions("--rank-split", v); },
      "With --mpi, shares of the layers per rank, like 2,1,1 (default: by each rank's free "
      "memory)");
  cmd->add_flag_callback(
      "--cpu-moe", [&f] { f.context.n_cpu_moe = LayerRequest::kAllLayers; },
      "Keep every layer's routed experts (a mixture of experts' ffn_*_exps) on the CPU, the rest "
      "of the layers where -ngl puts them");
  cmd->add_option("--n-cpu-moe", f.context.n_cpu_moe,
                  "Keep the routed experts of the first N layers on the CPU (default: with their "
                  "layers, or on the CPU first when -ngl auto cannot fit every layer whole)")
      ->check(CLI::Range(0, LayerRequest::kAllLayers - 1));
  cmd->add_option("--main-gpu", f.context.main_gpu,
                  "With --split-mode none: the GPU to use, an index into the GPUs that passed "
                  "their checks in id order (default: the best)")
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_flag("--recheck", f.context.recheck,
                "Run the device self-check again even when its result is cached");
}

int parse_gpu_layers(const std::string& v) {
  if (v == "auto") return ContextOptions::kNglAuto;
  if (v == "all") return ContextOptions::kNglAll;
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 0 || n > (1 << 20) || !std::isdigit(uint8_t(v[0])))
    throw CLI::ValidationError("--n-gpu-layers",
                               "'" + v + "' is not auto, all or a count of layers");
  return int(n);
}

void check_device_flag(const ModelFlags& f) {
  // The spec's form and the named device's presence, before a model is loaded; the self-check
  // comes with the model (it needs the weight types).
  const DeviceSpec spec = parse_device_spec(device_spec_text(f.context.device));
  if (spec.kind == DeviceSpec::Kind::Auto || spec.kind == DeviceSpec::Kind::Cpu) return;
  ChoiceOptions c;
  c.spec = f.context.device;
  c.self_check = false;
  choose_device(Registry::global(), c);
}

void print_device_choice(const ModelContext& s, bool verbose) {
  const ChosenDevice& c = s.device_choice();
  for (const auto& line : c.notes) fmt::print(stderr, "polystack: {}\n", line);
  const DeviceInfo& dev = s.device().info();
  fmt::print(stderr, "polystack: running on {} ({}): {}\n", dev.id, describe_device(dev), c.reason);
  fmt::print(stderr, "polystack: plan: {}\n", s.plan().summary);
  if (const auto& ranks = s.plan().ranks; !ranks.empty()) {
    std::vector<std::string> parts;
    for (size_t r = 0; r < ranks.size(); ++r)
      parts.push_back(fmt::format("rank {} on {}: {} ({})", r, ranks[r].host,
                                  s.plan().rank_units_text(int(r)), ranks[r].devices));
    fmt::print(stderr, "polystack: MPI job of {} ranks: {}\n", ranks.size(),
               fmt::join(parts, "; "));
  }
  for (const auto& line : c.passed) fmt::print(stderr, "polystack: not chosen: {}\n", line);
  for (const auto& line : s.warnings()) fmt::print(stderr, "polystack: warning: {}\n", line);
  if (verbose)
    for (const auto& line : c.absent) fmt::print(stderr, "polystack: not present: {}\n", line);
  for (const auto& line : s.plan().fallbacks) fmt::print(stderr, "polystack: fallback: {}\n", line);
}

void print_plan_detail(const ModelContext& s) {
  const PlacementPlan& p = s.plan();
  fmt::print(stderr, "polystack: placement ({}), compute buffer {} per device:\n", p.mode,
             human_bytes(p.compute));
  for (size_t d = 0; d < p.devices.size(); ++d) {
    const PlacementDevice& dev = p.devices[d];
    fmt::print(stderr, "polystack:   {:<10} {:<28} needs {:>10}, free {}{}\n", dev.id,
               p.units_text(int(d)), human_bytes(p.need[d]),
               dev.free ? human_bytes(dev.free) : "unknown",
               dev.free ? fmt::format(" (headroom {})", human_bytes(p.headroom[d])) : "");
  }
  if (const std::string e = p.experts_text(); !e.empty())
    fmt::print(stderr, "polystack:   routed experts of {} on {}: {}\n", e, p.devices.back().id,
               p.experts_note);
  for (size_t r = 0; r < p.ranks.size(); ++r)
    fmt::print(stderr, "polystack: {}\n", p.rank_text(int(r)));
}

}  // namespace ps::cli
