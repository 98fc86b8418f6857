// `polystack serve`: the OpenAI-compatible server (server/http_server.h).
#include <fmt/format.h>

#include "cli/commands.h"
#include "core/error.h"
#include "server/browser_policy.h"
#include "server/http_server.h"

namespace ps::cli {

Action add_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API");
  struct Opts {
    ModelFlags mf;
    server::ServerOptions so;
    std::string api_key_file, reasoning;
  };
  auto o = std::make_shared<Opts>();
  add_model_flags(cmd, o->mf, false);
  cmd->get_option("--model")->description(
      "GGUF model file (default: POLYSTACK_CHAT_MODEL, else the default chat model; see the "
      "README)");
  cmd->add_option("--host", o->so.host, "Address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", o->so.port, "Port to listen on (default 8080)")
      ->check(CLI::Range(1, 65535));
  cmd->add_option("--parallel", o->so.n_slots,
                  "Slots: requests served at once, their KV cells from one pool of -c (-np)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--ctx-per-seq", o->mf.context.n_ctx_per_seq,
                  "Positions one request may use of the pool (0: all of -c)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--queue", o->so.max_queue,
                  "Requests that may wait for a slot beyond the free ones (then 503)")
      ->check(CLI::Range(0, 4096));
  auto* key = cmd->add_option("--api-key", o->so.api_key,
                              "Require 'Authorization: Bearer KEY' (not for /health)");
  auto* key_file =
      cmd->add_option("--api-key-file", o->api_key_file, "Read the API key from a file");
  key->excludes(key_file);
  cmd->add_option("--alias", o->so.alias, "The model id /v1/models gives (default: file name)");
  cmd->add_option("--allowed-hosts", o->so.allowed_hosts,
                  "Host names served beside loopback ones (comma-separated; *: any): requests "
                  "naming another Host get 403, against DNS rebinding")
      ->delimiter(',');
  cmd->add_option("--cors", o->so.cors,
                  "The origin whose web pages may call the API (like https://app.example, or "
                  "*); default: none but the server's own page");
  cmd->add_flag("--metrics", o->so.metrics, "Serve Prometheus metrics at /metrics");
  cmd->add_option("--max-connections", o->so.max_connections,
                  "Connections open at once; past it a new one gets 503")
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--max-connections-per-client", o->so.max_connections_per_client,
                  "Connections open at once from one client address; past it 503")
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--header-timeout", o->so.header_timeout,
                  "Seconds a request's line and headers may take from its first byte (then "
                  "408); also the longest pause within a body")
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--body-timeout", o->so.body_timeout,
                  "Seconds a request's body may take (then 408)")
      ->check(CLI::Range(0.1, 86400.0));
  cmd->add_option("--keep-alive", o->so.keep_alive,
                  "Seconds an idle connection stays open for its next request")
      ->check(CLI::Range(0.1, 86400.0));
  cmd->add_option("--write-timeout", o->so.write_timeout,
                  "Seconds a reply may wait for the client to read it; then the request is "
                  "stopped")
      ->check(CLI::Range(0.1, 86400.0));
  add_chat_template_flags(cmd, o->so.chat_template, o->reasoning);
  cmd->add_option("-n,--n-predict", o->so.n_predict,
                  "Most tokens of a reply when the request names no max_tokens (-1: until the "
                  "end of its turn or of the context)")
      ->check(CLI::Range(-1, 1 << 30));
  cmd->add_option("--reasoning-budget", o->so.thinking_budget,
                  "Most tokens a reply may think (<think>) before it is made to answer, for "
                  "requests without thinking_budget_tokens (-1: no bound; 0: none)")
      ->check(CLI::Range(-1, 1 << 30));
  cmd->add_option("--pooling", o->so.pooling,
                  "How /v1/embeddings pools a text's final hidden states (default: the "
                  "file's pooling_type, else mean)")
      ->check(CLI::IsMember({"none", "mean", "cls", "last"}));
  cmd->add_flag("!--no-ui", o->so.ui, "Do not serve the web chat page at /");
  cmd->add_flag("-v,--verbose", o->so.verbose, "Log each request's prompt text too");
  // Against an explicit -c now (a usage error, exit 2); against the model's own context once
  // it is loaded.
  cmd->parse_complete_callback([o] {
    const ContextOptions& c = o->mf.context;
    if (c.n_ctx > 0 && c.n_ctx_per_seq > c.n_ctx)
      throw CLI::ValidationError(
          "--ctx-per-seq",
          fmt::format("{} is more than the {} cells of the pool (-c)", c.n_ctx_per_seq, c.n_ctx));
  });
  return [o] {
    if (!o->api_key_file.empty()) {
      std::string k = read_file_bytes(o->api_key_file);
      while (!k.empty() && (k.back() == '\n' || k.back() == '\r' || k.back() == ' ')) k.pop_back();
      if (k.empty())
        throw UsageError(fmt::format("{}: the API key file is empty", o->api_key_file));
      o->so.api_key = k;
    }
    if (!o->reasoning.empty()) o->so.enable_thinking = o->reasoning == "on";
    if (!server::is_loopback_host(o->so.host) && o->so.api_key.empty())
      fmt::print(stderr,
                 "polystack: warning: listening on {} without --api-key: anyone who can reach "
                 "this machine can use the model\n",
                 o->so.host);
    const ModelChoice choice = resolve_chat_model_path(o->mf);
    if (choice.origin != "-m") fmt::print(stderr, "polystack: model: {}\n", choice.origin);
    check_device_flag(o->mf);
    o->so.context = o->mf.context;
    // A copy of the flag, not of `o`: o->so holding a lambda that holds o would never be freed.
    const bool verbose = o->so.verbose;
    o->so.on_loaded = [verbose](const ModelContext& s) { print_device_choice(s, verbose); };
    return server::serve(choice.path, o->so);
  };
}

}  // namespace ps::cli
