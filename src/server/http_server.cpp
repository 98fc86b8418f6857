#include "server/http_server.h"

#include <dirent.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netdb.h>
#include <pthread.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "server/chat_template.h"
#include "server/engine.h"
#include "tokenizer/tokenizer.h"

namespace ps::server {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// A client error: the HTTP status, OpenAI's error type and the message.
struct ApiError : std::runtime_error {
  int status;
  std::string type;
  json extra;
  ApiError(int s, std::string t, const std::string& msg, json x = json::object())
      : std::runtime_error(msg), status(s), type(std::move(t)), extra(std::move(x)) {}
};

ApiError invalid(const std::string& msg) { return {400, "invalid_request_error", msg}; }

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

json parse_body(const httplib::Request& req) {
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded()) throw invalid("the request body is not valid JSON");
  if (!body.is_object()) throw invalid("the request body must be a JSON object");
  return body;
}

// Typed field readers: absent or null gives the default; a wrong type is a 400 naming it.
template <typename T>
T number(const json& b, const char* key, T dflt, double lo, double hi) {
  if (!b.contains(key) || b[key].is_null()) return dflt;
  const json& v = b[key];
  if (std::is_integral_v<T> ? !v.is_number_integer() : !v.is_number())
    throw invalid(
        fmt::format("'{}' must be {}", key, std::is_integral_v<T> ? "an integer" : "a number"));
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) throw invalid(fmt::format("'{}' must be in [{}, {}]", key, lo, hi));
  return v.get<T>();
}

bool boolean(const json& b, const char* key, bool dflt) {
  if (!b.contains(key) || b[key].is_null()) return dflt;
  if (!b[key].is_boolean()) throw invalid(fmt::format("'{}' must be a boolean", key));
  return b[key].get<bool>();
}

// content: a string, or an array of {"type": "text", "text": ...} parts.
std::string content_text(const json& c, const std::string& where) {
  if (c.is_string()) return c.get<std::string>();
  if (c.is_null()) return "";
  if (!c.is_array()) throw invalid(where + " must be a string or an array of text parts");
  std::string out;
  for (const json& part : c) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      throw invalid(where + ": each part must be an object with a 'type'");
    if (part["type"] != "text")
      throw invalid(fmt::format("{}: parts of type '{}' are not supported (text only)", where,
                                part["type"].get<std::string>()));
    if (!part.contains("text") || !part["text"].is_string())
      throw invalid(where + ": a text part needs a string 'text'");
    out += part["text"].get<std::string>();
  }
  return out;
}

struct Server {
  ServerOptions opts;
  std::shared_ptr<LoadedModel> model;
  std::unique_ptr<Engine> engine;
  std::string model_id;
  ChatFormat chat_format = ChatFormat::ChatML;
  std::atomic<bool> ready{false};
  std::atomic<uint64_t> next_id{1};
  mutable std::mutex stats_m;
  std::map<int, uint64_t> by_status;
  const Tokenizer& tok() const { return *model->tokenizer; }

  void count(int status) {
    std::lock_guard<std::mutex> lock(stats_m);
    ++by_status[status];
  }

  // The request's sampling, length and stop fields.
  CompletionRequest read_common(const json& b) {
    if (b.contains("model") && !b["model"].is_null() && !b["model"].is_string())
      throw invalid("'model' must be a string");
    if (number<int64_t>(b, "n", 1, -1e18, 1e18) != 1)
      throw invalid("'n' must be 1: one choice per request");
    CompletionRequest r;
    SamplerParams& sp = r.sampling;
    sp.temp = number<float>(b, "temperature", sp.temp, 0, 100);
    sp.top_p = number<float>(b, "top_p", sp.top_p, 0, 1);
    sp.top_k = number<int32_t>(b, "top_k", sp.top_k, 0, 1 << 30);
    sp.min_p = number<float>(b, "min_p", sp.min_p, 0, 1);
    sp.presence_penalty = number<float>(b, "presence_penalty", 0, -2, 2);
    sp.frequency_penalty = number<float>(b, "frequency_penalty", 0, -2, 2);
    sp.repeat_penalty = number<float>(b, "repeat_penalty", sp.repeat_penalty, 0, 100);
    if (sp.repeat_penalty <= 0) throw invalid("'repeat_penalty' must be positive");
    const int64_t seed = number<int64_t>(b, "seed", -1, -9.2e18, 9.2e18);
    sp.seed = seed >= 0 ? uint64_t(seed) : std::random_device{}();
    int64_t max = number<int64_t>(b, "max_tokens", -1, 1, 1e9);
    max = number<int64_t>(b, "max_completion_tokens", max, 1, 1e9);
    r.max_tokens = int(max);
    if (b.contains("stop") && !b["stop"].is_null()) {
      const json& s = b["stop"];
      if (s.is_string())
        r.stop.push_back(s.get<std::string>());
      else if (s.is_array() && s.size() <= 16 &&
               std::all_of(s.begin(), s.end(), [](const json& x) { return x.is_string(); }))
        for (const json& x : s) r.stop.push_back(x.get<std::string>());
      else
        throw invalid("'stop' must be a string or an array of at most 16 strings");
    }
    try {
      Sampler check(sp, tok().n_vocab());
    } catch (const UsageError& e) {
      throw invalid(e.what());
    }
    return r;
  }

  void check_fits(const CompletionRequest& r) const {
    const int n_ctx = engine->n_ctx();
    if (r.prompt.empty()) throw invalid("the prompt is empty");
    if (int64_t(r.prompt.size()) >= n_ctx)
      throw ApiError(
          400, "exceed_context_size_error",
          fmt::format("the prompt has {} tokens but a slot holds {} (-c)", r.prompt.size(), n_ctx),
          {{"n_prompt_tokens", r.prompt.size()}, {"n_ctx", n_ctx}});
  }

  std::vector<int32_t> tokenize_prompt(const json& b) const {
    if (!b.contains("prompt")) throw invalid("'prompt' is required");
    const json& p = b["prompt"];
    std::string text;
    if (p.is_string()) {
      text = p.get<std::string>();
    } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
      text = p[0].get<std::string>();
    } else if (p.is_array() && !p.empty() && std::all_of(p.begin(), p.end(), [](const json& x) {
                 return x.is_number_integer();
               })) {
      std::vector<int32_t> ids;
      for (const json& x : p) {
        const int64_t id = x.get<int64_t>();
        if (id < 0 || id >= tok().n_vocab())
          throw invalid(fmt::format("token id {} is outside the vocabulary", id));
        ids.push_back(int32_t(id));
      }
      return ids;
    } else {
      throw invalid("'prompt' must be a string, an array of one string or an array of token ids");
    }
    return tok().encode(text, true, true);
  }

  std::vector<int32_t> chat_prompt(const json& b) const {
    if (!b.contains("messages") || !b["messages"].is_array() || b["messages"].empty())
      throw invalid("'messages' must be a non-empty array");
    std::vector<ChatMessage> msgs;
    for (size_t i = 0; i < b["messages"].size(); ++i) {
      const json& m = b["messages"][i];
      const std::string where = fmt::format("messages[{}]", i);
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
        throw invalid(where + " must be an object with a string 'role'");
      std::string role = m["role"].get<std::string>();
      if (role == "developer") role = "system";
      if (role != "system" && role != "user" && role != "assistant")
        throw invalid(
            fmt::format("{}: unknown role '{}' (system, user or assistant)", where, role));
      msgs.push_back(
          {role, content_text(m.contains("content") ? m["content"] : json(), where + ".content")});
    }
    return tok().encode(format_chat(chat_format, msgs), true, true);
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
        e ? fmt::format(", {} prompt tokens ({} cached), {} generated, {}", e->prompt_tokens,
                        e->cached_tokens, e->completion_tokens, e->finish_reason)
        : status == 499 ? ", the client closed the connection"
                        : "";
    fmt::print(
        stderr, "polystack: request {} {} {}{} in {:.3f} s on {}{}\n", id, path, status, what, s,
        engine->session().device().info().id,
        opts.verbose && !prompt_text.empty() ? fmt::format(", prompt {:?}", prompt_text) : "");
  }

  void completion(const httplib::Request& req, httplib::Response& res, bool chat) {
    const auto t0 = Clock::now();
    const uint64_t id = next_id++;
    const json b = parse_body(req);
    CompletionRequest r = read_common(b);
    r.prompt = chat ? chat_prompt(b) : tokenize_prompt(b);
    if (chat) r.stop.push_back(chat_turn_end(chat_format));
    check_fits(r);
    const bool stream = boolean(b, "stream", false);
    bool include_usage = false;
    if (b.contains("stream_options") && !b["stream_options"].is_null()) {
      if (!b["stream_options"].is_object()) throw invalid("'stream_options' must be an object");
      include_usage = boolean(b["stream_options"], "include_usage", false);
    }
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
          events->cancel();
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
          if (!e) return sink.is_writable();  // called again: a client gone is seen here
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
          if (!success || !finished->has_value()) events->cancel();
          log(id, req.path, 200, finished->has_value() ? &**finished : nullptr,
              std::chrono::duration<double>(Clock::now() - t0).count(), prompt_text);
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
    metric("prompt_tokens_total", "counter", "Prompt tokens evaluated",
           fmt::format("polystack_prompt_tokens_total {}\n", s.prompt_tokens));
    metric("generated_tokens_total", "counter", "Tokens generated",
           fmt::format("polystack_generated_tokens_total {}\n", s.generated_tokens));
    metric("tokens_per_second", "gauge", "Tokens evaluated per second of engine time",
           fmt::format("polystack_tokens_per_second {:.3f}\n",
                       s.busy_seconds > 0
                           ? double(s.prompt_tokens + s.generated_tokens) / s.busy_seconds
                           : 0.0));
    metric("queue_length", "gauge", "Requests waiting for a slot",
           fmt::format("polystack_queue_length {}\n", s.queue_length));
    metric("busy_slots", "gauge", "Slots serving a request",
           fmt::format("polystack_busy_slots {}\npolystack_slots {}\n", s.busy_slots, s.n_slots));
    std::string mem;
    const PlacementPlan& plan = engine->session().plan();
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

  Server s;
  s.opts = opts;
  s.model = LoadedModel::load(model_path);
  s.model_id =
      opts.alias.empty() ? std::filesystem::path(model_path).filename().string() : opts.alias;
  const gguf::Value* tmpl = s.model->file->find("tokenizer.chat_template");
  s.chat_format = detect_chat_format(
      tmpl && tmpl->type == gguf::ValueType::STRING ? tmpl->str : std::string_view(),
      s.model->model->params().architecture);
  s.engine = std::make_unique<Engine>(s.model, opts.session, opts.n_slots, opts.max_queue);
  if (opts.on_loaded) opts.on_loaded(s.engine->session());
  fmt::print(stderr, "polystack: {} slots of {} tokens, chat format {}, model id '{}'\n",
             opts.n_slots, s.engine->n_ctx(), chat_format_name(s.chat_format), s.model_id);

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
  http.set_pre_routing_handler([&](const httplib::Request& req, httplib::Response& res) {
    if (opts.api_key.empty() || req.path == "/health")
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
    s.count(res.status);
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
        const json b = parse_body(req);
        if (!b.contains("content") || !b["content"].is_string())
          throw invalid("'content' must be a string");
        const bool special = boolean(b, "add_special", false);
        res.set_content(
            dump({{"tokens", s.tok().encode(b["content"].get<std::string>(), special, true)}}),
            "application/json");
      }));
  http.Post("/detokenize", guarded(s, [&](const httplib::Request& req, httplib::Response& res) {
              const json b = parse_body(req);
              if (!b.contains("tokens") || !b["tokens"].is_array())
                throw invalid("'tokens' must be an array of token ids");
              std::vector<int32_t> ids;
              for (const json& x : b["tokens"]) {
                if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
                    x.get<int64_t>() >= s.tok().n_vocab())
                  throw invalid("'tokens' must hold token ids of this vocabulary");
                ids.push_back(x.get<int32_t>());
              }
              res.set_content(dump({{"content", s.tok().decode(ids)}}), "application/json");
            }));
  http.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    if (!opts.metrics) {
      send_error(res, 501, "not_implemented_error", "metrics are off (start with --metrics)");
      return;
    }
    res.set_content(s.metrics(), "text/plain; version=0.0.4");
  });

  if (!http.bind_to_port(opts.host, opts.port))
    throw UsageError(fmt::format("cannot listen on {}:{} (in use, or not an address here)",
                                 opts.host, opts.port));
  std::thread signals([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (sig != 0) {
      fmt::print(stderr, "polystack: {}: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
      s.engine->stop();
      http.stop();
    }
  });
  s.ready = true;
  fmt::print(stderr, "polystack: listening on http://{}:{}\n", opts.host, opts.port);
  const bool ok = http.listen_after_bind();
  // The signal thread ends with a signal of our own when the listener stopped for another
  // reason.
  if (http.is_running()) http.stop();
  pthread_kill(signals.native_handle(), SIGTERM);
  signals.join();
  s.engine->stop();
  return ok ? 0 : 1;
}

}  // namespace ps::server
