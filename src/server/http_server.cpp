#include "server/http_server.h"

#include <fmt/format.h>
#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/error.h"
#include "engine/chat_setup.h"
#include "engine/engine.h"
#include "engine/reply_reader.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "server/browser_policy.h"
#include "server/request.h"
#include "server/request_limits.h"
#include "server/transport.h"
#include "server/ui_files.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ps::server {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string dump(const json& j) {
  // Text from the model may hold invalid UTF-8 (a cut character): replaced, never a throw.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// One generated token's log-probabilities, as the engine gave them.
struct TokenLogprob {
  int32_t id;
  float logprob;
  std::vector<TokenLogit> top;
};

json bytes_of(const std::string& s) {
  json a = json::array();
  for (const char c : s) a.push_back(int(uint8_t(c)));
  return a;
}

// Chat's form: {"content": [{token, logprob, bytes, top_logprobs: [...]}, ...]}.
json chat_logprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& lps) {
  json content = json::array();
  for (const TokenLogprob& t : lps) {
    const std::string piece = tok.token_to_piece(t.id, false);
    json alts = json::array();
    for (const TokenLogit& a : t.top) {
      const std::string p = tok.token_to_piece(a.id, false);
      alts.push_back({{"token", p}, {"logprob", a.logit}, {"bytes", bytes_of(p)}});
    }
    content.push_back({{"token", piece},
                       {"logprob", t.logprob},
                       {"bytes", bytes_of(piece)},
                       {"top_logprobs", alts}});
  }
  return {{"content", content}};
}

// The legacy completions form: tokens, token_logprobs, top_logprobs (a map per token) and
// text_offset (from `offset`, the text's length before these tokens).
json completion_logprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& lps,
                         size_t& offset) {
  json tokens = json::array(), values = json::array(), tops = json::array(),
       offsets = json::array();
  for (const TokenLogprob& t : lps) {
    const std::string piece = tok.token_to_piece(t.id, false);
    tokens.push_back(piece);
    values.push_back(t.logprob);
    json m = json::object();
    for (const TokenLogit& a : t.top) m[tok.token_to_piece(a.id, false)] = a.logit;
    tops.push_back(m);
    offsets.push_back(offset);
    offset += piece.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", values},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

// An id for a call whose syntax gave none: "call_" and 24 letters and digits, as OpenAI's.
std::string call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  constexpr std::string_view kChars =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[rng() % kChars.size()];
  return id;
}

// message.tool_calls; each call's id is filled in where the model gave none.
json tool_calls_json(std::vector<ToolCall>& calls) {
  json out = json::array();
  for (ToolCall& c : calls) {
    if (c.id.empty()) c.id = call_id();
    out.push_back({{"id", c.id},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

void send_error(HttpResponse& res, int status, const std::string& type, const std::string& message,
                const json& extra = json::object()) {
  json e = {{"code", status}, {"message", message}, {"type", type}};
  for (auto it = extra.begin(); it != extra.end(); ++it) e[it.key()] = it.value();
  res.status = status;
  res.set_content(dump({{"error", e}}), "application/json");
  res.detail = message;
}

// The pooling of embeddings: --pooling, else the file's <arch>.pooling_type, else mean.
Pooling embedding_pooling(const LoadedModel& m, const std::string& flag) {
  for (Pooling p : {Pooling::none, Pooling::mean, Pooling::cls, Pooling::last})
    if (flag == pooling_name(p)) return p;
  if (!flag.empty())
    throw UsageError(fmt::format("--pooling {}: not one of none, mean, cls, last", flag));
  const std::string key = m.model->params().architecture + ".pooling_type";
  switch (m.file->get_int(key, 1, 0, 4)) {
    case 0:
      return Pooling::none;
    case 2:
      return Pooling::cls;
    case 3:
      return Pooling::last;
    case 4:
      throw UsageError(fmt::format(
          "{}: {} is rank (a reranker), which polystack does not serve; --pooling picks "
          "another",
          m.file->path(), key));
    default:
      return Pooling::mean;
  }
}

struct Server {
  ServerOptions opts;
  std::shared_ptr<LoadedModel> model;
  std::unique_ptr<Engine> engine;
  std::string model_id;
  std::unique_ptr<jinja::ChatTemplate> chat_template;
  ChatSetup chat;
  Pooling pooling = Pooling::mean;  // of embeddings
  std::atomic<bool> ready{false};
  std::atomic<bool> stopping{false};  // SIGINT or SIGTERM came: streams end cut short
  mutable std::mutex stats_m;
  std::map<std::pair<int, Outcome>, uint64_t> by_status;
  const Tokenizer& tok() const { return *model->tokenizer; }

  json usage(const StreamEvent& e) const {
    return {{"prompt_tokens", e.prompt_tokens},
            {"completion_tokens", e.completion_tokens},
            {"total_tokens", e.prompt_tokens + e.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", e.cached_tokens}}}};
  }

  // Words for a finished generation in the request's log line.
  std::string generated(const StreamEvent& e, const std::string& prompt_text) const {
    return fmt::format(
        "{} prompt tokens ({} cached), {} generated, {} ({}){}", e.prompt_tokens, e.cached_tokens,
        e.completion_tokens, e.finish_reason, e.stop_detail,
        opts.verbose && !prompt_text.empty() ? fmt::format(", prompt {:?}", prompt_text) : "");
  }

  // Every request's end: one log line saying how it ended, and its count for /metrics (from
  // the moment the model is ready: the 503s of health checks during the load say nothing of
  // how the model is served).
  void finished(const RequestEnd& e) {
    if (ready) {
      std::lock_guard<std::mutex> lock(stats_m);
      ++by_status[{e.status, e.outcome}];
    }
    const char* how = e.outcome == Outcome::done          ? "done"
                      : e.outcome == Outcome::refused     ? "refused"
                      : e.outcome == Outcome::client_left ? "client left"
                                                          : "shutdown";
    const bool generation = e.path.find("completions") != std::string::npos && ready;
    fmt::print(stderr, "polystack: request {} {} {} {} {}{} in {:.3f} s{}\n", e.id, e.method,
               e.path, e.status == 0 ? std::string("-") : std::to_string(e.status), how,
               e.detail.empty() ? "" : ": " + e.detail, e.seconds,
               generation ? " on " + engine->context().device().info().id : "");
  }

  void completion(const HttpRequest& req, HttpResponse& res, ReplyWriter& client, bool chat) {
    const uint64_t id = req.id;
    CompletionBody body = parse_completion(req.body, chat, tok(), this->chat, engine->n_ctx());
    CompletionRequest r = std::move(body.request);
    if (r.max_tokens < 0) r.max_tokens = opts.n_predict;  // the server's default (-n)
    if (chat && !body.budget_given && !r.grammar) r.thinking_budget = opts.thinking_budget;
    const bool stream = body.stream, include_usage = body.include_usage;
    // A reasoning model's thinking and its tool calls, apart from its answer (chat only).
    const ReplyReader::Options read_as{body.split_reasoning, body.starts_thinking,
                                       body.tools.active(), this->chat.tool_format};
    const bool want_logprobs = r.logprobs >= 0;
    const std::string prompt_text = opts.verbose ? tok().decode(r.prompt) : "";
    std::shared_ptr<Stream> events = engine->submit(std::move(r));
    if (!events)
      throw ApiError(503, "unavailable_error",
                     "the server is busy: every slot is taken and the queue is full; retry later");
    const std::string oid = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", id);
    const int64_t created = std::time(nullptr);
    const std::string object = chat ? "chat.completion" : "text_completion";
    if (!stream) {
      std::string text;
      std::vector<TokenLogprob> lps;
      auto checked = Clock::now();
      for (;;) {
        std::optional<StreamEvent> e = events->pop(std::chrono::milliseconds(200));
        // Tokens may come faster than the check's interval: it is made by time, not by event.
        const bool check = !e || Clock::now() - checked >= std::chrono::milliseconds(200);
        if (check) checked = Clock::now();
        if (check && (!e || !e->done) && !client.alive()) {
          // Nobody is left to answer, or the server stops: the engine frees the slot at its
          // next step.
          engine->cancel(events);
          if (stopping || client.stopping())
            send_error(res, 503, "unavailable_error", "the server is stopping");
          else
            send_error(res, 499, "client_closed_request", "the client closed the connection");
          return;
        }
        if (!e) continue;
        if (!e->done) {
          text += e->text;
          if (e->has_logprob) lps.push_back({e->token, e->logprob, std::move(e->top_logprobs)});
          continue;
        }
        if (e->finish_reason == "cancelled" ||
            (e->finish_reason == "error" && (stopping || client.stopping()))) {
          send_error(res, 503, "unavailable_error", "the server is stopping");
          return;
        }
        if (e->finish_reason == "error") throw ApiError(500, "server_error", e->error);
        json choice = {{"index", 0}, {"finish_reason", e->finish_reason}};
        if (chat) {
          ReplyReader::Parts parts = ReplyReader(read_as).feed(text, true);
          json m = {{"role", "assistant"}, {"content", parts.content}};
          if (!parts.reasoning.empty()) m["reasoning_content"] = parts.reasoning;
          if (!parts.calls.empty()) {
            if (parts.content.find_first_not_of(" \t\r\n") == std::string::npos)
              m["content"] = nullptr;
            m["tool_calls"] = tool_calls_json(parts.calls);
            choice["finish_reason"] = "tool_calls";
          }
          choice["message"] = std::move(m);
        } else {
          choice["text"] = text, choice["logprobs"] = nullptr;
        }
        if (want_logprobs) {
          size_t offset = 0;
          choice["logprobs"] =
              chat ? chat_logprobs(tok(), lps) : completion_logprobs(tok(), lps, offset);
        } else if (chat) {
          choice["logprobs"] = nullptr;
        }
        res.set_content(dump({{"id", oid},
                              {"object", object},
                              {"created", created},
                              {"model", model_id},
                              {"choices", json::array({choice})},
                              {"usage", usage(*e)}}),
                        "application/json");
        res.detail = generated(*e, prompt_text);
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
    res.content_type = "text/event-stream";
    res.set_header("Cache-Control", "no-cache");
    auto reader = std::make_shared<ReplyReader>(read_as);
    auto called = std::make_shared<bool>(false);  // the reply's tool calls went out
    // Log-probabilities of tokens whose text is not sent yet (held back), and the text's length
    // so far (the legacy form's offsets).
    auto pending = std::make_shared<std::vector<TokenLogprob>>();
    auto offset = std::make_shared<size_t>(0);
    res.stream = [=, this](ReplyWriter& sink, std::string& detail) {
      // Unless it ends with its last event, the request is cancelled: the slot is freed.
      const auto cut = [&](const std::string& why) {
        engine->cancel(events);
        detail = "stream cut short (" + why + ")";
        return false;
      };
      const auto write = [&](const std::string& s) { return sink.write(s); };
      // Text as deltas: the thinking as reasoning_content, the rest as content; the tool
      // calls, once the reply has ended, each as its head (id, name) then its arguments.
      const auto send_text = [&](const std::string& piece, bool last) {
        std::string thinking, answer = piece;
        std::vector<ToolCall> calls;
        if (chat) {
          ReplyReader::Parts parts = reader->feed(piece, last);
          thinking = std::move(parts.reasoning), answer = std::move(parts.content);
          calls = std::move(parts.calls);
        }
        const auto delta = [&](const char* key, const json& t) {
          json choice = {{"index", 0}, {"finish_reason", nullptr}};
          if (chat)
            choice["delta"] = {{key, t}};
          else
            choice["text"] = t;
          // The log-probabilities go with the first text after their tokens.
          if (want_logprobs && !pending->empty()) {
            choice["logprobs"] = chat ? chat_logprobs(tok(), *pending)
                                      : completion_logprobs(tok(), *pending, *offset);
            pending->clear();
          }
          return write(chunk(choice));
        };
        if (last && thinking.empty() && answer.empty() && calls.empty() && !pending->empty())
          return delta("content", "");
        if (!(thinking.empty() || delta("reasoning_content", thinking)) ||
            !(answer.empty() || delta("content", answer)))
          return false;
        json all = tool_calls_json(calls);
        for (size_t i = 0; i < all.size(); ++i) {
          json head = all[i];
          head["index"] = i;
          head["function"]["arguments"] = "";
          if (!delta("tool_calls", json::array({head})) ||
              !delta(
                  "tool_calls",
                  json::array({{{"index", i},
                                {"function", {{"arguments", all[i]["function"]["arguments"]}}}}})))
            return false;
        }
        if (!calls.empty()) *called = true;
        return true;
      };
      if (chat && !write(chunk({{"index", 0},
                                {"delta", {{"role", "assistant"}, {"content", ""}}},
                                {"finish_reason", nullptr}})))
        return cut("the client closed the connection");
      for (;;) {
        std::optional<StreamEvent> e = events->pop(std::chrono::milliseconds(200));
        if (!e) {
          if (stopping || sink.stopping()) return cut("the server is stopping");
          if (!sink.alive()) return cut("the client closed the connection");
          continue;
        }
        if (!e->done && e->has_logprob)
          pending->push_back({e->token, e->logprob, std::move(e->top_logprobs)});
        if (!e->done && e->text.empty()) continue;  // a token whose text is held back
        if (!e->done) {
          if (!send_text(e->text, false))
            return cut((stopping || sink.stopping()) ? "the server is stopping"
                                                     : "the client closed the connection");
          continue;
        }
        // What the splitter held back (a piece that might have begun a tag).
        if (!send_text("", true))
          return cut((stopping || sink.stopping()) ? "the server is stopping"
                                                   : "the client closed the connection");
        // The engine ends what it runs when the server stops: an "error" event then.
        if (e->finish_reason == "cancelled" ||
            (e->finish_reason == "error" && (stopping || sink.stopping())))
          return cut("the server is stopping");
        if (e->finish_reason == "error") {
          detail = "the stream ended with an error: " + e->error;
          return write(
              "data: " +
              dump({{"error", {{"code", 500}, {"message", e->error}, {"type", "server_error"}}}}) +
              "\n\n");
        }
        json last = {{"index", 0}, {"finish_reason", *called ? "tool_calls" : e->finish_reason}};
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
        detail = generated(*e, prompt_text);
        if (!ok) detail += "; the client left before the end";
        return ok;
      }
    };
  }

  // POST /v1/embeddings (openai: one L2-normalized vector per input) and /embeddings
  // (llama-server's form: [{index, embedding: [[...], ...]}], with --pooling none a vector per
  // token, not normalized). The inputs go through the engine a few at a time, side by side in
  // its slots.
  void embeddings(const HttpRequest& req, HttpResponse& res, ReplyWriter& client, bool openai) {
    const int64_t n_embd = engine->context().model().model->params().n_embd;
    if (openai && pooling == Pooling::none)
      throw invalid(
          "the server pools embeddings with 'none' (a vector per token, --pooling): "
          "/v1/embeddings gives one vector per input; ask /embeddings");
    EmbeddingBody body = parse_embeddings(req.body, tok(), engine->n_ctx(), n_embd);
    const size_t n = body.inputs.size();
    std::vector<std::vector<float>> out(n);
    std::deque<std::pair<size_t, std::shared_ptr<Stream>>> running;
    size_t next = 0, prompt_tokens = 0;
    const size_t window = size_t(opts.n_slots) + 1;
    const auto cancel_all = [&] {
      for (auto& [i, st] : running) engine->cancel(st);
    };
    auto checked = Clock::now();
    while (next < n || !running.empty()) {
      while (next < n && running.size() < window) {
        CompletionRequest r;
        r.prompt = std::move(body.inputs[next]);
        r.embed = true;
        r.pooling = pooling;
        std::shared_ptr<Stream> st = engine->submit(std::move(r));
        if (!st) break;  // the queue is full: wait for ours to make room
        running.emplace_back(next++, std::move(st));
      }
      if (running.empty())
        throw ApiError(503, "unavailable_error",
                       "the server is busy: every slot is taken and the queue is full; retry "
                       "later");
      std::optional<StreamEvent> e = running.front().second->pop(std::chrono::milliseconds(200));
      if (!e || Clock::now() - checked >= std::chrono::milliseconds(200)) {
        checked = Clock::now();
        if (!client.alive() || stopping || client.stopping()) {
          cancel_all();
          if (stopping || client.stopping())
            send_error(res, 503, "unavailable_error", "the server is stopping");
          else
            send_error(res, 499, "client_closed_request", "the client closed the connection");
          return;
        }
      }
      if (!e || !e->done) continue;
      if (e->finish_reason != "stop") {
        cancel_all();
        if (e->finish_reason == "cancelled" || stopping)
          throw ApiError(503, "unavailable_error", "the server is stopping");
        throw ApiError(500, "server_error", e->error);
      }
      prompt_tokens += size_t(e->prompt_tokens);
      out[running.front().first] = std::move(e->embedding);
      running.pop_front();
    }
    json data = json::array();
    for (size_t i = 0; i < n; ++i) {
      std::vector<float>& v = out[i];
      if (pooling != Pooling::none) {  // L2-normalized, as OpenAI's
        double sum = 0;
        for (const float x : v) sum += double(x) * x;
        if (sum > 0)
          for (float& x : v) x = float(double(x) / std::sqrt(sum));
      }
      if (openai) {
        data.push_back({{"object", "embedding"},
                        {"index", i},
                        {"embedding", body.base64 ? json(base64_floats(v)) : json(v)}});
      } else {
        json rows = json::array();
        for (size_t at = 0; at < v.size(); at += size_t(n_embd))
          rows.push_back(std::vector<float>(v.begin() + ptrdiff_t(at),
                                            v.begin() + ptrdiff_t(at + size_t(n_embd))));
        data.push_back({{"index", i}, {"embedding", rows}});
      }
    }
    const json usage = {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}};
    res.set_content(
        openai ? dump({{"object", "list"}, {"data", data}, {"model", model_id}, {"usage", usage}})
               : dump(data),
        "application/json");
    res.detail =
        fmt::format("{} input(s), {} tokens, {} pooling", n, prompt_tokens, pooling_name(pooling));
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
      for (const auto& [key, n] : by_status)
        by += fmt::format("polystack_requests_total{{status=\"{}\",outcome=\"{}\"}} {}\n",
                          key.first, outcome_name(key.second), n);
    }
    metric("requests_total", "counter",
           "HTTP requests, by status (0: none was sent) and how they ended (done, refused, "
           "client_left, shutdown)",
           by);
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
    if (!plan.ranks.empty()) {
      std::string info, need, rss;
      for (size_t r = 0; r < plan.ranks.size(); ++r) {
        const PlacementRank& pr = plan.ranks[r];
        info += fmt::format(
            "polystack_rank_info{{rank=\"{}\",host=\"{}\",units=\"{}\",devices=\"{}\"}} 1\n", r,
            pr.host, plan.rank_units_text(int(r)), pr.devices);
        need += fmt::format("polystack_rank_memory_bytes{{rank=\"{}\"}} {}\n", r, pr.need);
        rss += fmt::format("polystack_rank_resident_bytes{{rank=\"{}\"}} {}\n", r, pr.rss);
      }
      metric("rank_info", "gauge", "The ranks of the MPI job: which units each holds, where", info);
      metric("rank_memory_bytes", "gauge", "Bytes of the model's units each rank holds", need);
      metric("rank_resident_bytes", "gauge",
             "Each rank's resident memory once its layers were loaded", rss);
    }
    return out;
  }
};

using Route = std::function<void(const HttpRequest&, HttpResponse&, ReplyWriter&)>;

// The routes by method and path; HEAD is GET without the body.
class Router {
 public:
  void add(const std::string& method, const std::string& path, Route fn) {
    routes_[{method, path}] = std::move(fn);
  }
  void handle(const HttpRequest& req, HttpResponse& res, ReplyWriter& w) const {
    const std::string method = req.method == "HEAD" ? "GET" : req.method;
    if (auto it = routes_.find({method, req.path}); it != routes_.end())
      return it->second(req, res, w);
    std::string allowed;
    for (const auto& [key, fn] : routes_)
      if (key.second == req.path) allowed += (allowed.empty() ? "" : ", ") + key.first;
    if (!allowed.empty()) {
      send_error(res, 405, "invalid_request_error",
                 fmt::format("{} takes {}, not {}", req.path, allowed, req.method));
      res.set_header("Allow", allowed);
      return;
    }
    send_error(res, 404, "not_found_error",
               fmt::format("no route for {} {}", req.method, req.path));
  }

 private:
  std::map<std::pair<std::string, std::string>, Route> routes_;
};

// A route that needs the model: 503 while it loads, and its exceptions as error objects.
Route guarded(Server& s, Route fn) {
  return [&s, fn](const HttpRequest& req, HttpResponse& res, ReplyWriter& w) {
    try {
      if (!s.ready) {
        send_error(res, 503, "unavailable_error", "the model is loading");
        return;
      }
      fn(req, res, w);
    } catch (const ApiError& e) {
      res = HttpResponse{};
      send_error(res, e.status, e.type, e.what(), e.extra);
    } catch (const UsageError& e) {
      res = HttpResponse{};
      send_error(res, 400, "invalid_request_error", e.what());
    } catch (const std::exception& e) {
      res = HttpResponse{};
      send_error(res, 500, "server_error", e.what());
    }
  };
}

TransportLimits transport_limits(const ServerOptions& o) {
  TransportLimits l;
  l.max_connections = size_t(o.max_connections);
  l.max_connections_per_client = size_t(o.max_connections_per_client);
  l.header_timeout = std::chrono::milliseconds(int64_t(o.header_timeout * 1000));
  l.body_timeout = std::chrono::milliseconds(int64_t(o.body_timeout * 1000));
  l.keep_alive = std::chrono::milliseconds(int64_t(o.keep_alive * 1000));
  l.write_timeout = std::chrono::milliseconds(int64_t(o.write_timeout * 1000));
  // Enough workers for every slot, the queue and a few quick requests beside them.
  l.workers = size_t(o.n_slots + o.max_queue + 4);
  return l;
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
  Router router;
  const BrowserPolicy browser{opts.host, opts.allowed_hosts, opts.cors};

  TransportHandlers handlers;
  // On the I/O thread once a head is in, before its body is read.
  handlers.check_head = [&](const HttpRequest& req, HttpResponse& res) {
    // Browsers first (server/browser_policy.h): a page of another site reaching this server
    // through the user's browser, by DNS rebinding or a cross-origin request.
    const std::string host = req.header("Host");
    const std::string origin = req.header("Origin");
    std::string refused = check_host(browser, host);
    if (refused.empty()) refused = check_origin(browser, origin, host);
    if (!refused.empty()) {
      send_error(res, 403, "permission_error", refused);
      return true;
    }
    if (const std::string allow = allow_origin_header(browser, origin, host); !allow.empty()) {
      if (req.method == "OPTIONS") {  // a preflight: what the page may send
        res.status = 204;
        res.content_type = "text/plain";
        res.set_header("Access-Control-Allow-Origin", allow);
        res.set_header("Vary", "Origin");
        res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
        res.set_header("Access-Control-Max-Age", "600");
        return true;
      }
    }
    // The page itself asks for the key; /health is for load balancers.
    if (opts.api_key.empty() || req.path == "/health" ||
        (opts.ui && (req.method == "GET" || req.method == "HEAD") &&
         (req.path == "/" || req.path.starts_with("/ui/"))))
      return false;
    const std::string auth = req.header("Authorization");
    if (auth == "Bearer " + opts.api_key) return false;
    send_error(res, 401, "authentication_error",
               auth.empty() ? "an API key is required (Authorization: Bearer ...)"
                            : "the API key is not valid");
    return true;
  };
  handlers.handle = [&](const HttpRequest& req, HttpResponse& res, ReplyWriter& w) {
    router.handle(req, res, w);
    const std::string origin = req.header("Origin");
    if (const std::string allow = allow_origin_header(browser, origin, req.header("Host"));
        !allow.empty()) {
      res.set_header("Access-Control-Allow-Origin", allow);
      res.set_header("Vary", "Origin");
    }
  };
  handlers.finished = [&](const RequestEnd& e) { s.finished(e); };
  HttpTransport http(transport_limits(opts), handlers);

  // The port before the model: a port in use is said at once, not after a long load.
  try {
    http.listen(opts.host, opts.port);
  } catch (const std::system_error& e) {
    const int err = e.code().value();
    throw UsageError(
        err == EADDRINUSE ? fmt::format("port {} is in use on {}; choose another with --port",
                                        opts.port, opts.host)
        : err == EADDRNOTAVAIL
            ? fmt::format("cannot listen on {}:{}: not an address of this machine (--host)",
                          opts.host, opts.port)
            : fmt::format("cannot listen on {}:{}: {} (--host, --port)", opts.host, opts.port,
                          std::strerror(err)));
  }

  router.add("GET", "/health", [&](const HttpRequest&, HttpResponse& res, ReplyWriter&) {
    if (!s.ready) {
      res.status = 503;
      res.set_content(R"({"status":"loading"})", "application/json");
      return;
    }
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  const auto models = guarded(s, [&](const HttpRequest&, HttpResponse& res, ReplyWriter&) {
    res.set_content(dump({{"object", "list"},
                          {"data", json::array({{{"id", s.model_id},
                                                 {"object", "model"},
                                                 {"created", 0},
                                                 {"owned_by", "polystack"}}})}}),
                    "application/json");
  });
  router.add("GET", "/v1/models", models);
  router.add("GET", "/models", models);
  const auto completions = guarded(s, [&](const HttpRequest& req, HttpResponse& res,
                                          ReplyWriter& w) { s.completion(req, res, w, false); });
  const auto chat = guarded(s, [&](const HttpRequest& req, HttpResponse& res, ReplyWriter& w) {
    s.completion(req, res, w, true);
  });
  for (const char* prefix : {"/v1", ""}) {
    router.add("POST", std::string(prefix) + "/completions", completions);
    router.add("POST", std::string(prefix) + "/chat/completions", chat);
  }
  router.add("POST", "/v1/embeddings",
             guarded(s, [&](const HttpRequest& req, HttpResponse& res, ReplyWriter& w) {
               s.embeddings(req, res, w, true);
             }));
  router.add("POST", "/embeddings",
             guarded(s, [&](const HttpRequest& req, HttpResponse& res, ReplyWriter& w) {
               s.embeddings(req, res, w, false);
             }));
  router.add(
      "POST", "/tokenize", guarded(s, [&](const HttpRequest& req, HttpResponse& res, ReplyWriter&) {
        res.set_content(dump({{"tokens", parse_tokenize(req.body, s.tok())}}), "application/json");
      }));
  router.add("POST", "/detokenize",
             guarded(s, [&](const HttpRequest& req, HttpResponse& res, ReplyWriter&) {
               const std::vector<int32_t> ids = parse_detokenize(req.body, s.tok());
               res.set_content(dump({{"content", s.tok().decode(ids)}}), "application/json");
             }));
  router.add(
      "POST", "/apply-template",
      guarded(s, [&](const HttpRequest& req, HttpResponse& res, ReplyWriter&) {
        res.set_content(dump({{"prompt", render_chat(req.body, s.chat)}}), "application/json");
      }));
  router.add("GET", "/props", guarded(s, [&](const HttpRequest&, HttpResponse& res, ReplyWriter&) {
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
      return [name](const HttpRequest&, HttpResponse& res, ReplyWriter&) {
        const UiFile* f = find_ui_file(name);
        res.set_content(std::string(reinterpret_cast<const char*>(f->data), f->size),
                        f->content_type);
      };
    };
    router.add("GET", "/", page("index.html"));
    router.add("GET", "/ui/chat.css", page("chat.css"));
    router.add("GET", "/ui/chat.js", page("chat.js"));
  }
  router.add("GET", "/metrics", [&](const HttpRequest&, HttpResponse& res, ReplyWriter&) {
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
  http.start();
  try {
    s.model = LoadedModel::load(model_path);
    s.model_id =
        opts.alias.empty() ? std::filesystem::path(model_path).filename().string() : opts.alias;
    s.chat_template = model_chat_template(*s.model, opts.chat_template);
    s.chat = {s.chat_template.get(), opts.enable_thinking,
              detect_tool_format(s.chat_template->choice().source)};
    // The marks of its tool calls that the vocabulary holds as control tokens are part of the
    // replies' text, so that calls can be read (and forced by the grammar).
    std::vector<int32_t> marks;
    for (const std::string& m : tool_call_marks(s.chat.tool_format))
      if (const int32_t id = s.tok().find_token(m);
          id >= 0 && s.tok().token_to_piece(id, false).empty())
        marks.push_back(id);
    s.pooling = embedding_pooling(*s.model, opts.pooling);
    s.engine = std::make_unique<Engine>(s.model, opts.context, opts.n_slots, opts.max_queue);
    s.engine->show_tokens(marks);
    if (opts.on_loaded) opts.on_loaded(s.engine->context());
    fmt::print(stderr,
               "polystack: {} slots over one KV pool of {} cells ({} MiB; up to {} per request), "
               "model id '{}'\n",
               opts.n_slots, s.engine->context().kv_pool().total_cells(),
               s.engine->context().kv_cache_bytes() >> 20, s.engine->n_ctx(), s.model_id);
    fmt::print(stderr, "polystack: chat template: {}; tool calls read as {}{}\n",
               describe_chat_template(*s.chat_template, opts.enable_thinking),
               tool_format_name(s.chat.tool_format),
               s.chat.tool_format == ToolFormat::none
                   ? " (the template has no tool syntax: a system message teaches it)"
                   : "");
    fmt::print(stderr, "polystack: embeddings pooled by {} ({})\n", pooling_name(s.pooling),
               !opts.pooling.empty() ? "--pooling"
               : s.model->file->has(s.model->model->params().architecture + ".pooling_type")
                   ? "the file's pooling_type"
                   : "the default; --pooling picks another");
  } catch (...) {
    http.stop();
    throw;
  }

  s.ready = true;
  fmt::print(stderr, "polystack: listening on http://{}:{}\n", opts.host, opts.port);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  const auto t0 = Clock::now();
  fmt::print(stderr, "polystack: {}: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  s.stopping = true;
  http.announce_stop();  // streams the engine now ends count as shut down, not as left
  s.engine->stop();
  http.stop();
  fmt::print(stderr, "polystack: stopped in {:.2f} s\n",
             std::chrono::duration<double>(Clock::now() - t0).count());
  return 0;
}

}  // namespace ps::server
