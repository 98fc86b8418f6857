#pragma once
// `polystack serve`: the OpenAI-compatible HTTP API over the engine (engine/engine.h), with
// server/transport.h (Boost.Beast and Asio) for HTTP and nlohmann-json for JSON. Routes: GET
// /health, GET /v1/models, POST /v1/completions, POST /v1/chat/completions (both streaming as
// server-sent events), POST /tokenize, POST /detokenize, POST /apply-template, GET /props, GET
// /metrics, and the web chat page at GET / (its files under /ui/). Client errors are 4xx with an
// OpenAI error object, never a 500, and never stop the server.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/model_context.h"

namespace ps::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  int n_slots = 4;      // -np
  int max_queue = 64;   // requests waiting for a slot beyond the free ones (--queue)
  std::string api_key;  // empty: none asked for
  // Browsers (server/browser_policy.h): Host names served beside loopback ones, and the origin
  // whose pages may call the API ("*": any; empty: none but the server's own).
  std::vector<std::string> allowed_hosts;
  std::string cors;
  // The transport's bounds (server/transport.h): connections at once, in all and per client
  // address (then 503); seconds for a request's head from its first byte, for its body, for an
  // idle connection between requests, for a reply the client does not read.
  int max_connections = 256;
  int max_connections_per_client = 64;
  double header_timeout = 10, body_timeout = 60, keep_alive = 30, write_timeout = 30;
  std::string alias;         // the model id; empty: the file name
  bool metrics = false;      // GET /metrics served (else 501)
  bool verbose = false;      // log prompt text
  bool ui = true;            // the web chat page at / (--no-ui)
  int thinking_budget = -1;  // --reasoning-budget: for requests that name none
  // --pooling none|mean|cls|last for embeddings; "": the file's <arch>.pooling_type, else mean.
  std::string pooling;
  int n_predict = -1;  // -n: most tokens of a reply whose request names no max_tokens
  // --chat-template: a built-in's name or a file; empty: the model's own (see
  // jinja::choose_chat_template).
  std::string chat_template;
  std::optional<bool> enable_thinking;  // --reasoning on|off; unset: the template's default
  ContextOptions context;
  // Called once the model is on its devices, before the server listens (the CLI prints the
  // device choice).
  std::function<void(const ModelContext&)> on_loaded;
};

// Loads the model, listens, serves until SIGINT or SIGTERM; returns the exit code. Prints
// "polystack: listening on http://HOST:PORT" on stderr once it accepts requests.
int serve(const std::string& model_path, const ServerOptions& opts);

}  // namespace ps::server
