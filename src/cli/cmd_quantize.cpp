// polystack quantize IN.gguf OUT.gguf TYPE: requantizes every weight matrix (model/quantize.h).
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include "cli/commands.h"
#include "core/error.h"
#include "model/quantize.h"

namespace ps::cli {
namespace {

struct QuantizeFlags {
  std::string in, out, type;
  int threads = 0;
  bool allow_requantize = false;
};

// One line on stderr that redraws itself on a terminal; elsewhere a line per tenth.
void show_progress(const QuantizeProgress& p) {
  const bool tty = isatty(fileno(stderr)) != 0;
  const size_t width = 30, filled = width * p.index / p.count;
  if (tty) {
    std::fprintf(stderr, "\rpolystack: quantize [%s%s] %3zu%% %zu/%zu %-40.40s %-5s",
                 std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                 100 * p.index / p.count, p.index, p.count, p.name->c_str(),
                 std::string(dtype_name(p.type)).c_str());
    if (p.index == p.count) std::fputc('\n', stderr);
  } else if (p.index == p.count || (10 * p.index / p.count) != (10 * (p.index - 1) / p.count)) {
    std::fprintf(stderr, "polystack: quantize: %zu/%zu tensors (%zu%%)\n", p.index, p.count,
                 100 * p.index / p.count);
  }
  std::fflush(stderr);
}

}  // namespace

Action add_quantize(CLI::App& app) {
  auto f = std::make_shared<QuantizeFlags>();
  std::string names;
  for (const std::string& n : quant_mix_names()) names += (names.empty() ? "" : ", ") + n;
  CLI::App* cmd = app.add_subcommand("quantize", "Convert a model's weights to another type");
  cmd->add_option("input", f->in, "GGUF model to read")->required();
  cmd->add_option("output", f->out, "GGUF file to write")->required();
  cmd->add_option("type", f->type,
                  "Target: " + names + " (Q3_K, Q4_K, Q5_K: the _M mixes, as in llama.cpp)")
      ->required();
  cmd->add_option("-t,--threads", f->threads, "Threads (0: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_flag("--allow-requantize", f->allow_requantize,
                "Convert weights that are already quantized (each conversion loses precision)");
  return [f]() {
    const std::optional<QuantMix> mix = find_quant_mix(f->type);
    if (!mix) {
      std::string names;
      for (const std::string& n : quant_mix_names()) names += (names.empty() ? "" : ", ") + n;
      throw UsageError(fmt::format("unknown quantization type '{}' (one of: {})", f->type, names));
    }
    // Writing over the input would pull the mapped weights from under the reader.
    std::error_code ec;
    if (f->in == f->out || std::filesystem::equivalent(f->in, f->out, ec))
      throw UsageError("the output file must differ from the input file");
    const int threads =
        f->threads > 0 ? f->threads : int(std::max(1u, std::thread::hardware_concurrency()));
    const QuantizeReport r =
        quantize_model(f->in, f->out, *mix, threads, f->allow_requantize, show_progress);
    for (const std::string& line : r.fallbacks)
      std::fprintf(stderr, "polystack: quantize fallback: %s\n", line.c_str());
    std::fprintf(stderr, "polystack: wrote %s (%s): %.2f MiB -> %.2f MiB\n", f->out.c_str(),
                 mix->name.c_str(), double(r.bytes_in) / (1 << 20),
                 double(r.bytes_out) / (1 << 20));
    return 0;
  };
}

}  // namespace ps::cli
