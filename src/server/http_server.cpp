#include "server/http_server.h"

#include <dirent.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netdb.h>
#include <pthread.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/error.h"
#include "engine/chat_setup.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "server/browser_policy.h"
#include "server/request.h"
#include "server/request_limits.h"
#include "server/ui_files.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ps::server {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Whether the client of a request is still connected. cpp-httplib 0.11 gives a handler no way
// to ask (later versions have Request::is_connection_closed), but the connection's socket is
// one of this process's descriptors: the one whose local and peer addresses are the request's.
// A client has gone once a read would see the end of its stream (or the socket failed).
class ClientWatch {
 public:
  explicit ClientWatch(const httplib::Request& req) {
    DIR* dir = opendir("/proc/self/fd");
    if (!dir) return;
    while (const dirent* d = readdir(dir)) {
      char* end = nullptr;
      const long fd = std::strtol(d->d_name, &end, 10);
      if (end == d->d_name || *end != '\0') continue;
      if (matches(int(fd), req)) {
        fd_ = int(fd);
        break;
      }
    }
    closedir(dir);
  }
  bool found() const { return fd_ >= 0; }
  bool gone() const {
    if (fd_ < 0) return false;
    char c;
    const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }

 private:
  static bool address(int fd, bool peer, std::string& host, int& port) {
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    if ((peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
              : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len)) != 0)
      return false;
    if (a.ss_family != AF_INET && a.ss_family != AF_INET6) return false;
    char h[NI_MAXHOST], p[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<sockaddr*>(&a), len, h, sizeof(h), p, sizeof(p),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
      return false;
    host = h;
    port = std::atoi(p);
    return true;
  }
  static bool matches(int fd, const httplib::Request& req) {
    std::string host;
    int port = -1;
    if (!address(fd, false, host, port) || port != req.local_port) return false;
    return address(fd, true, host, port) && port == req.remote_port && host == req.remote_addr;
  }
  int fd_ = -1;
};

std::string dump(const json& j) {
  // Text from the model may hold invalid UTF-8 (a cut character): replaced, never a throw.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void send_error(httplib::Response& res, int status, const std::string& type,
                const std::string& message, const json& extra = json::object()) {
  json e = {{"code", status}, {"message", message}, {"type", type}};
  for (auto it = extra.begin(); it != extra.end(); ++it) e[it.key()] = it.value();
  res.status = status;
  res.set_content(dump({{"error", e}}), "application/json");
}

struct Server {
  ServerOptions opts;
  std::shared_ptr<LoadedModel> model;
  std::unique_ptr<Engine> engine;
  std::string model_id;
  std::unique_ptr<jinja::ChatTemplate> chat_template;
  ChatSetup chat;
  std::atomic<bool> ready{false};
  std::atomic<bool> stopping{false};  // SIGINT or SIGTERM came: streams end cut short
  std::atomic<uint64_t> next_id{1};
  mutable std::mutex stats_m;
  std::map<int, uint64_t> by_status;
  const Tokenizer& tok() const { return *model->tokenizer; }

  void count(int status) {
    std::lock_guard<std::mutex> lock(stats_m);
    ++by_status[status];
  }

  json usage(const StreamEvent& e) const {
    return {{"prompt_tokens", e.prompt_tokens},
            {"completion_tokens", e.completion_tokens},
            {"total_tokens", e.prompt_tokens + e.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", e.cached_tokens}}}};
  }

  void log(uint64_t id, const std::string& path, int status, const StreamEvent* e, double s,
           const std::string& prompt_text) {
    std::string what =
        e ? fmt::format(", {} prompt tokens ({} cached), {} generated, {} ({})", e->prompt_tokens,
                        e->cached_tokens, e->completion_tokens, e->finish_reason, e->stop_detail)
        : status == 499 ? ", the client closed the connection"
                        : "";
    fmt::print(
        stderr, "polystack: request {} {} {}{} in {:.3f} s on {}{}\n", id, path, status, what, s,
        engine->context().device().info().id,
        opts.verbose && !prompt_text.empty() ? fmt::format(", prompt {:?}", prompt_text) : "");
  }

  // A stream that ended without its last event: its headers said 200, but it did not finish.
  void log_cut(uint64_t id, const std::string& path, const std::string& why, double s) {
    fmt::print(stderr, "polystack: request {} {} stream cut short ({}) after {:.3f} s on {}\n", id,
               path, why, s, engine->context().device().info().id);
  }

  void completion(const httplib::Request& req, httplib::Response& res, bool chat) {
    const auto t0 = Clock::now();
    const uint64_t id = next_id++;
    CompletionBody body = parse_completion(req.body, chat, tok(), this->chat, engine->n_ctx());
    CompletionRequest r = std::move(body.request);
    if (r.max_tokens < 0) r.max_tokens = opts.n_predict;  // the server's default (-n)
    const bool stream = body.stream, include_usage = body.include_usage;
    const std::string prompt_text = opts.verbose ? tok().decode(r.prompt) : "";
    std::shared_ptr<Stream> events = engine->submit(std::move(r));
    if (!events)
      throw ApiError(503, "unavailable_error",
                     "the server is busy: every slot is taken and the queue is full; retry later");
    const std::string oid = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", id);
    const int64_t created = std::time(nullptr);
    const std::string object = chat ? "chat.completion" : "text_completion";
    if (!stream) {
      const ClientWatch client(req);
      auto checked = Clock::now();
      std::string text;
      for (;;) {
        std::optional<StreamEvent> e = events->pop(std::chrono::milliseconds(200));
        const bool check = Clock::now() - checked >= std::chrono::milliseconds(200);
        if (check) checked = Clock::now();
        if (check && (!e || !e->done) && client.gone()) {
          // Nobody is left to answer: the engine frees the slot at its next step.
          engine->cancel(events);
          send_error(res, 499, "client_closed_request", "the client closed the connection");
          log(id, req.path, 499, nullptr, std::chrono::duration<double>(Clock::now() - t0).count(),
              prompt_text);
          return;
        }
        if (!e) continue;
        if (!e->done) {
          text += e->text;
          continue;
        }
        if (e->finish_reason == "error") throw ApiError(500, "server_error", e->error);
        json choice = {{"index", 0}, {"finish_reason", e->finish_reason}};
        if (chat)
          choice["message"] = {{"role", "assistant"}, {"content", text}};
        else
          choice["text"] = text, choice["logprobs"] = nullptr;
        res.set_content(dump({{"id", oid},
                              {"object", object},
                              {"created", created},
                              {"model", model_id},
                              {"choices", json::array({choice})},
                              {"usage", usage(*e)}}),
                        "application/json");
        log(id, req.path, 200, &*e, std::chrono::duration<double>(Clock::now() - t0).count(),
            prompt_text);
        return;
      }
    }
    const std::string chunk_object = chat ? "chat.completion.chunk" : "text_completion";
    auto chunk = [=, this](json choice) {
      return "data: " +
             dump({{"id", oid},
                   {"object", chunk_object},
                   {"created", created},
                   {"model", model_id},
                   {"choices", choice.is_null() ? json::array() : json::array({choice})}}) +
             "\n\n";
    };
    auto started = std::make_shared<bool>(false);
    auto finished = std::make_shared<std::optional<StreamEvent>>();
    res.set_chunked_content_provider(
        "text/event-stream",
        [=, this](size_t, httplib::DataSink& sink) {
          const auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
          if (chat && !*started) {
            *started = true;
            if (!write(chunk({{"index", 0},
                              {"delta", {{"role", "assistant"}, {"content", ""}}},
                              {"finish_reason", nullptr}})))
              return false;
          }
          std::optional<StreamEvent> e = events->pop(std::chrono::milliseconds(200));
          if (!e) return sink.is_writable();             // called again: a client gone is seen here
          if (!e->done && e->text.empty()) return true;  // a token whose text is held back
          if (!e->done) {
            json choice = {{"index", 0}, {"finish_reason", nullptr}};
            if (chat)
              choice["delta"] = {{"content", e->text}};
            else
              choice["text"] = e->text;
            return write(chunk(choice));
          }
          if (e->finish_reason == "error") {
            write("data: " +
                  dump({{"error",
                         {{"code", 500}, {"message", e->error}, {"type", "server_error"}}}}) +
                  "\n\n");
            *finished = *e;
            sink.done();
            return true;
          }
          json last = {{"index", 0}, {"finish_reason", e->finish_reason}};
          if (chat)
            last["delta"] = json::object();
          else
            last["text"] = "";
          bool ok = write(chunk(last));
          if (ok && include_usage) {
            std::string u = chunk(json());
            json j = json::parse(u.substr(6));
            j["usage"] = usage(*e);
            ok = write("data: " + dump(j) + "\n\n");
          }
          if (ok) ok = write("data: [DONE]\n\n");
          *finished = *e;
          sink.done();
          return ok;
        },
        [=, this](bool success) {
          const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
          if (!success || !finished->has_value()) {
            engine->cancel(events);
            log_cut(id, req.path,
                    stopping ? "the server is stopping" : "the client closed the connection",
                    seconds);
          } else if ((*finished)->finish_reason == "error") {
            log_cut(id, req.path, (*finished)->error, seconds);
          } else {
            log(id, req.path, 200, &**finished, seconds, prompt_text);
          }
        });
  }

  std::string metrics() const {
    const EngineStats s = engine->stats();
    std::string out;
    const auto metric = [&](const std::string& name, const std::string& type,
                            const std::string& help, const std::string& lines) {
      out += fmt::format("# HELP polystack_{} {}\n# TYPE polystack_{} {}\n{}", name, help, name,
                         type, lines);
    };
    std::string by;
    {
      std::lock_guard<std::mutex> lock(stats_m);
      for (auto [status, n] : by_status)
        by += fmt::format("polystack_requests_total{{status=\"{}\"}} {}\n", status, n);
    }
    metric("requests_total", "counter", "HTTP requests answered, by status", by);
    metric("prompt_tokens_total", "counter",
           "Prompt tokens of finished requests, as their usage reports them (cached ones too)",
           fmt::format("polystack_prompt_tokens_total {}\n", s.usage_prompt_tokens));
    metric("generated_tokens_total", "counter",
           "Tokens generated for finished requests, as their usage reports them",
           fmt::format("polystack_generated_tokens_total {}\n", s.usage_completion_tokens));
    metric("prompt_tokens_evaluated_total", "counter",
           "Prompt tokens the model evaluated (those taken from cached sequences are not)",
           fmt::format("polystack_prompt_tokens_evaluated_total {}\n", s.prompt_tokens));
    metric("tokens_per_second", "gauge", "Tokens evaluated per second of engine time",
           fmt::format("polystack_tokens_per_second {:.3f}\n",
                       s.busy_seconds > 0
                           ? double(s.prompt_tokens + s.generated_tokens) / s.busy_seconds
                           : 0.0));
    metric("prompt_tokens_cached_total", "counter",
           "Prompt tokens taken from cached sequences instead of evaluated",
           fmt::format("polystack_prompt_tokens_cached_total {}\n", s.cached_tokens));
    metric("kv_cells", "gauge",
           "Cells of the KV pool: held by running requests, kept for reuse, free",
           fmt::format(
               "polystack_kv_cells{{state=\"running\"}} {}\npolystack_kv_cells{{state=\"cached\"}} "
               "{}\npolystack_kv_cells{{state=\"free\"}} {}\n",
               s.kv_cells_running, s.kv_cells_cached,
               s.kv_cells - s.kv_cells_running - s.kv_cells_cached));
    metric("queue_length", "gauge", "Requests waiting for a slot",
           fmt::format("polystack_queue_length {}\n", s.queue_length));
    metric("busy_slots", "gauge", "Slots serving a request",
           fmt::format("polystack_busy_slots {}\npolystack_slots {}\n", s.busy_slots, s.n_slots));
    std::string mem;
    const PlacementPlan& plan = engine->context().plan();
    for (size_t d = 0; d < plan.devices.size(); ++d)
      mem += fmt::format("polystack_device_memory_bytes{{device=\"{}\"}} {}\n", plan.devices[d].id,
                         plan.need[d]);
    metric("device_memory_bytes", "gauge", "Bytes the model's plan puts on each device", mem);
    return out;
  }
};

// Routes a handler's exceptions to error responses.
httplib::Server::Handler guarded(
    Server& s, std::function<void(const httplib::Request&, httplib::Response&)> fn) {
  return [&s, fn](const httplib::Request& req, httplib::Response& res) {
    try {
      if (!s.ready) {
        send_error(res, 503, "unavailable_error", "the model is loading");
        return;
      }
      fn(req, res);
    } catch (const ApiError& e) {
      send_error(res, e.status, e.type, e.what(), e.extra);
    } catch (const UsageError& e) {
      send_error(res, 400, "invalid_request_error", e.what());
    } catch (const std::exception& e) {
      send_error(res, 500, "server_error", e.what());
    }
  };
}

}  // namespace

int serve(const std::string& model_path, const ServerOptions& opts) {
  // SIGINT and SIGTERM are taken by one thread (sigwait), not by whichever thread runs.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  httplib::Server http;
  // Enough threads for every slot, the queue and a few quick requests beside them.
  const size_t threads = size_t(opts.n_slots + opts.max_queue + 4);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(size_t(64) << 20);
  // SO_REUSEADDR (a restart binds while old connections linger) but not cpp-httplib's default
  // SO_REUSEPORT, with which a second server on the same port would silently share it.
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // Replies go out as written: with Nagle's algorithm against the client's delayed ACK, every
  // request after the first on a keep-alive connection waited about 40 ms. (Linux gives the
  // accepted connections the listening socket's TCP_NODELAY.)
  http.set_tcp_nodelay(true);
  // The port before the model: a port in use is said at once, not after a long load.
  errno = 0;
  if (!http.bind_to_port(opts.host, opts.port)) {
    const int err = errno;
    throw UsageError(
        err == EADDRINUSE ? fmt::format("port {} is in use on {}; choose another with --port",
                                        opts.port, opts.host)
        : err == 0        ? fmt::format("cannot listen on {}:{}: not an address of this machine "
                                               "(--host)",
                                        opts.host, opts.port)
                          : fmt::format("cannot listen on {}:{}: {} (--host, --port)", opts.host,
                                        opts.port, std::strerror(err)));
  }

  Server s;
  s.opts = opts;

  const BrowserPolicy browser{opts.host, opts.allowed_hosts, opts.cors};
  http.set_pre_routing_handler([&](const httplib::Request& req, httplib::Response& res) {
    // Browsers first (server/browser_policy.h): a page of another site reaching this server
    // through the user's browser, by DNS rebinding or a cross-origin request.
    const std::string host = req.get_header_value("Host");
    const std::string origin = req.get_header_value("Origin");
    std::string refused = check_host(browser, host);
    if (refused.empty()) refused = check_origin(browser, origin, host);
    if (!refused.empty()) {
      send_error(res, 403, "permission_error", refused);
      return httplib::Server::HandlerResponse::Handled;
    }
    // The headers before the body is read (server/request_limits.h).
    const HeaderVerdict v = check_request_headers({req.headers.begin(), req.headers.end()});
    if (v.status != 0) {
      send_error(res, v.status, v.type, v.message);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (const std::string allow = allow_origin_header(browser, origin, host); !allow.empty()) {
      res.set_header("Access-Control-Allow-Origin", allow);
      res.set_header("Vary", "Origin");
      if (req.method == "OPTIONS") {  // a preflight: what the page may send
        res.status = 204;
        res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
        res.set_header("Access-Control-Max-Age", "600");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    // The page itself asks for the key; /health is for load balancers.
    if (opts.api_key.empty() || req.path == "/health" ||
        (opts.ui && req.method == "GET" && (req.path == "/" || req.path.starts_with("/ui/"))))
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    if (auth == "Bearer " + opts.api_key) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, 401, "authentication_error",
               auth.empty() ? "an API key is required (Authorization: Bearer ...)"
                            : "the API key is not valid");
    return httplib::Server::HandlerResponse::Handled;
  });
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404 && res.body.empty())
      send_error(res, 404, "not_found_error",
                 fmt::format("no route for {} {}", req.method, req.path));
    else if (res.body.empty())
      send_error(res, res.status, res.status >= 500 ? "server_error" : "invalid_request_error",
                 fmt::format("HTTP {}", res.status));
  });
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          send_error(res, 500, "server_error", e.what());
        } catch (...) {
          send_error(res, 500, "server_error", "unknown error");
        }
      });
  http.set_logger([&](const httplib::Request& req, const httplib::Response& res) {
    // Counted from the moment the model is ready: the 503s of health checks during the load
    // say nothing of how the model is served.
    if (s.ready) s.count(res.status);
    if (req.path.find("completions") == std::string::npos || res.status != 200)
      fmt::print(stderr, "polystack: {} {} {}\n", req.method, req.path, res.status);
  });

  http.Get("/health", [&](const httplib::Request&, httplib::Response& res) {
    if (!s.ready) {
      res.status = 503;
      res.set_content(R"({"status":"loading"})", "application/json");
      return;
    }
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  const auto models = guarded(s, [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump({{"object", "list"},
                          {"data", json::array({{{"id", s.model_id},
                                                 {"object", "model"},
                                                 {"created", 0},
                                                 {"owned_by", "polystack"}}})}}),
                    "application/json");
  });
  http.Get("/v1/models", models);
  http.Get("/models", models);
  const auto completions = guarded(s, [&](const httplib::Request& req, httplib::Response& res) {
    s.completion(req, res, false);
  });
  const auto chat = guarded(s, [&](const httplib::Request& req, httplib::Response& res) {
    s.completion(req, res, true);
  });
  for (const char* prefix : {"/v1", ""}) {
    http.Post(std::string(prefix) + "/completions", completions);
    http.Post(std::string(prefix) + "/chat/completions", chat);
  }
  http.Post(
      "/tokenize", guarded(s, [&](const httplib::Request& req, httplib::Response& res) {
        res.set_content(dump({{"tokens", parse_tokenize(req.body, s.tok())}}), "application/json");
      }));
  http.Post("/detokenize", guarded(s, [&](const httplib::Request& req, httplib::Response& res) {
              const std::vector<int32_t> ids = parse_detokenize(req.body, s.tok());
              res.set_content(dump({{"content", s.tok().decode(ids)}}), "application/json");
            }));
  http.Post(
      "/apply-template", guarded(s, [&](const httplib::Request& req, httplib::Response& res) {
        res.set_content(dump({{"prompt", render_chat(req.body, s.chat)}}), "application/json");
      }));
  http.Get("/props", guarded(s, [&](const httplib::Request&, httplib::Response& res) {
             const DeviceInfo& d = s.engine->context().device().info();
             res.set_content(dump({{"model", s.model_id},
                                   {"device", fmt::format("{} ({})", d.id, d.name)},
                                   {"chat_template", s.chat_template->choice().name},
                                   {"n_ctx", s.engine->n_ctx()},
                                   {"slots", opts.n_slots},
                                   {"api_key_required", !opts.api_key.empty()}}),
                             "application/json");
           }));
  if (opts.ui) {
    const auto page = [](const char* name) {
      return [name](const httplib::Request&, httplib::Response& res) {
        const UiFile* f = find_ui_file(name);
        res.set_content(reinterpret_cast<const char*>(f->data), f->size, f->content_type);
      };
    };
    http.Get("/", page("index.html"));
    http.Get("/ui/chat.css", page("chat.css"));
    http.Get("/ui/chat.js", page("chat.js"));
  }
  http.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    if (!opts.metrics) {
      send_error(res, 501, "not_implemented_error", "metrics are off (start with --metrics)");
      return;
    }
    if (!s.ready) {
      send_error(res, 503, "unavailable_error", "the model is loading");
      return;
    }
    res.set_content(s.metrics(), "text/plain; version=0.0.4");
  });

  // Listening from here on: while the model loads, /health answers {"status":"loading"} with
  // 503 and the other routes 503 too, rather than leaving connections waiting.
  std::atomic<bool> listener_done{false}, listened{true};
  std::thread listener([&] {
    listened = http.listen_after_bind();
    listener_done = true;
  });
  while (!http.is_running() && !listener_done)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  try {
    s.model = LoadedModel::load(model_path);
    s.model_id =
        opts.alias.empty() ? std::filesystem::path(model_path).filename().string() : opts.alias;
    s.chat_template = model_chat_template(*s.model, opts.chat_template);
    s.chat = {s.chat_template.get(), opts.enable_thinking};
    s.engine = std::make_unique<Engine>(s.model, opts.context, opts.n_slots, opts.max_queue);
    if (opts.on_loaded) opts.on_loaded(s.engine->context());
    fmt::print(stderr,
               "polystack: {} slots over one KV pool of {} cells ({} MiB; up to {} per request), "
               "model id '{}'\n",
               opts.n_slots, s.engine->context().kv_pool().total_cells(),
               s.engine->context().kv_cache_bytes() >> 20, s.engine->n_ctx(), s.model_id);
    fmt::print(stderr, "polystack: chat template: {}\n",
               describe_chat_template(*s.chat_template, opts.enable_thinking));
  } catch (...) {
    http.stop();
    listener.join();
    throw;
  }

  std::thread signals([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (sig != 0) {
      fmt::print(stderr, "polystack: {}: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
      s.stopping = true;
      s.engine->stop();
      http.stop();
    }
  });
  s.ready = true;
  fmt::print(stderr, "polystack: listening on http://{}:{}\n", opts.host, opts.port);
  listener.join();
  const bool ok = listened;
  // The signal thread ends with a signal of our own when the listener stopped for another
  // reason.
  if (http.is_running()) http.stop();
  pthread_kill(signals.native_handle(), SIGTERM);
  signals.join();
  s.engine->stop();
  return ok ? 0 : 1;
}

}  // namespace ps::server
