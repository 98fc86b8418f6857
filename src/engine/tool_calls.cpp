#include "engine/tool_calls.h"

#include <nlohmann/json.hpp>
#include <optional>

namespace ps {
namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kSpace = " \t\r\n";

std::string_view trim(std::string_view s) {
  const size_t a = s.find_first_not_of(kSpace);
  if (a == std::string_view::npos) return {};
  return s.substr(a, s.find_last_not_of(kSpace) + 1 - a);
}

// Where the JSON object or array starting at s[at] ends (one past its last byte), or npos when
// the text ends first.
size_t json_end(std::string_view s, size_t at) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = at; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// The JSON object or array at the first non-space byte from `at`; `end` past it.
std::optional<json> json_at(std::string_view s, size_t at, size_t& end) {
  at = s.find_first_not_of(kSpace, at);
  if (at == std::string_view::npos || (s[at] != '{' && s[at] != '[')) return std::nullopt;
  end = json_end(s, at);
  if (end == std::string_view::npos) return std::nullopt;
  json j = json::parse(s.substr(at, end - at), nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// Arguments as a compact JSON object: an object, or a string that holds one.
std::optional<std::string> arguments_of(const json& a) {
  if (a.is_object()) return a.dump();
  if (a.is_string()) {
    json j = json::parse(a.get<std::string>(), nullptr, false);
    if (!j.is_discarded() && j.is_object()) return j.dump();
  }
  if (a.is_null()) return std::string("{}");
  return std::nullopt;
}

// {"name", "arguments" | "parameters", "id"?} (keys as each family names them).
std::optional<ToolCall> call_of(const json& o, const char* name_key = "name",
                                const char* id_key = "id") {
  if (!o.is_object()) return std::nullopt;
  const json* fn = &o;
  if (o.contains("function") && o["function"].is_object()) fn = &o["function"];
  if (!fn->contains(name_key) || !(*fn)[name_key].is_string()) return std::nullopt;
  const json args = fn->contains("arguments")    ? (*fn)["arguments"]
                    : fn->contains("parameters") ? (*fn)["parameters"]
                                                 : json();
  const std::optional<std::string> a = arguments_of(args);
  if (!a) return std::nullopt;
  ToolCall c{"", (*fn)[name_key].get<std::string>(), *a};
  if (o.contains(id_key) && (o[id_key].is_string() || o[id_key].is_number()))
    c.id = o[id_key].is_string() ? o[id_key].get<std::string>() : o[id_key].dump();
  if (c.name.empty()) return std::nullopt;
  return c;
}

// Calls from a JSON array of call objects, or one object.
bool calls_of(const json& j, std::vector<ToolCall>& out, const char* name_key = "name",
              const char* id_key = "id") {
  if (j.is_array()) {
    for (const json& o : j) {
      std::optional<ToolCall> c = call_of(o, name_key, id_key);
      if (!c) return false;
      out.push_back(std::move(*c));
    }
    return true;
  }
  std::optional<ToolCall> c = call_of(j, name_key, id_key);
  if (!c) return false;
  out.push_back(std::move(*c));
  return true;
}

ToolReply unparsed(std::string_view text) { return ToolReply{std::string(text), {}, false}; }
ToolReply plain(std::string_view text) { return ToolReply{std::string(text), {}, true}; }

// Calls in blocks that begin with `open`: `block` reads one from just after it into the
// reply's calls and returns where it stopped (npos: it does not parse, and the reply comes
// back whole); `close` is skipped where it follows. The text between blocks is the content.
template <typename F>
ToolReply blocks(std::string_view text, std::string_view open, std::string_view close, F block) {
  ToolReply r;
  size_t at = 0;
  for (;;) {
    const size_t start = text.find(open, at);
    if (start == std::string_view::npos) {
      r.content += text.substr(at);
      break;
    }
    r.content += text.substr(at, start - at);
    const size_t end = block(start + open.size(), r.calls);
    if (end == std::string_view::npos) return unparsed(text);
    at = text.find_first_not_of(kSpace, end);
    if (at == std::string_view::npos) break;
    if (!close.empty() && text.substr(at, close.size()) == close) at += close.size();
  }
  r.content = std::string(trim(r.content));
  return r;
}

// <open> JSON <close>, repeated.
ToolReply tagged_json(std::string_view text, std::string_view open, std::string_view close) {
  return blocks(text, open, close, [&](size_t from, std::vector<ToolCall>& calls) {
    size_t end = 0;
    const std::optional<json> j = json_at(text, from, end);
    return j && calls_of(*j, calls) ? end : std::string_view::npos;
  });
}

// <tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function></tool_call>
ToolReply parse_qwen3_coder(std::string_view text) {
  constexpr size_t npos = std::string_view::npos;
  return blocks(text, "<tool_call>", "</tool_call>",
                [&](size_t from, std::vector<ToolCall>& calls) {
                  size_t p = text.find("<function=", from);
                  if (p == npos) return npos;
                  p += 10;
                  const size_t name_end = text.find('>', p);
                  if (name_end == npos) return npos;
                  ToolCall c{"", std::string(trim(text.substr(p, name_end - p))), ""};
                  json args = json::object();
                  p = name_end + 1;
                  for (;;) {
                    const size_t q = text.find_first_not_of(kSpace, p);
                    if (q != npos && text.substr(q, 11) == "<parameter=") {
                      const size_t key_end = text.find('>', q + 11);
                      const size_t value_end = text.find("</parameter>", q);
                      if (key_end == npos || value_end == npos || value_end < key_end) return npos;
                      std::string_view v = text.substr(key_end + 1, value_end - key_end - 1);
                      if (!v.empty() && v.front() == '\n') v.remove_prefix(1);
                      if (!v.empty() && v.back() == '\n') v.remove_suffix(1);
                      const json parsed = json::parse(v, nullptr, false);
                      args[std::string(trim(text.substr(q + 11, key_end - q - 11)))] =
                          parsed.is_discarded() ? json(std::string(v)) : parsed;
                      p = value_end + 12;
                      continue;
                    }
                    if (q == npos || text.substr(q, 11) != "</function>") return npos;
                    p = q + 11;
                    break;
                  }
                  if (c.name.empty()) return npos;
                  c.arguments = args.dump();
                  calls.push_back(std::move(c));
                  return p;
                });
}

// NAME.call(key="value", n=3), Llama 3.1's built-in tools after <|python_tag|>.
std::optional<ToolCall> python_call(std::string_view s) {
  s = trim(s);
  const size_t dot = s.find(".call(");
  if (dot == std::string_view::npos || s.back() != ')') return std::nullopt;
  ToolCall c{"", std::string(s.substr(0, dot)), ""};
  std::string_view rest = s.substr(dot + 6, s.size() - dot - 7);
  json args = json::object();
  while (!trim(rest).empty()) {
    rest = trim(rest);
    const size_t eq = rest.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    const std::string key(trim(rest.substr(0, eq)));
    rest = trim(rest.substr(eq + 1));
    size_t end;
    if (!rest.empty() && (rest[0] == '"' || rest[0] == '\'')) {
      const char q = rest[0];
      end = 1;
      std::string v;
      while (end < rest.size() && rest[end] != q) {
        if (rest[end] == '\\' && end + 1 < rest.size()) ++end;
        v += rest[end++];
      }
      if (end >= rest.size()) return std::nullopt;
      args[key] = v;
      ++end;
    } else {
      end = rest.find(',');
      if (end == std::string_view::npos) end = rest.size();
      const json v = json::parse(trim(rest.substr(0, end)), nullptr, false);
      if (v.is_discarded()) return std::nullopt;
      args[key] = v;
    }
    rest = trim(rest.substr(end));
    if (!rest.empty()) {
      if (rest[0] != ',') return std::nullopt;
      rest.remove_prefix(1);
    }
  }
  if (c.name.empty()) return std::nullopt;
  c.arguments = args.dump();
  return c;
}

ToolReply parse_llama3(std::string_view text) {
  const std::string_view t = trim(text);
  constexpr std::string_view tag = "<|python_tag|>";
  if (const size_t p = t.find(tag); p != std::string_view::npos) {
    ToolReply r;
    r.content = std::string(trim(t.substr(0, p)));
    const std::string_view body = trim(t.substr(p + tag.size()));
    size_t end = 0;
    if (const std::optional<json> j = json_at(body, 0, end); j && calls_of(*j, r.calls)) return r;
    if (std::optional<ToolCall> c = python_call(body)) {
      r.calls.push_back(std::move(*c));
      return r;
    }
    return unparsed(text);
  }
  // A reply that is a call: {"name": ..., "parameters": ...}, several separated by ';'.
  if (t.empty() || t[0] != '{') return plain(text);
  ToolReply r;
  size_t at = 0;
  while (at < t.size()) {
    size_t end = 0;
    const std::optional<json> j = json_at(t, at, end);
    if (!j || !j->is_object() || !j->contains("name") ||
        !(j->contains("parameters") || j->contains("arguments")) || !calls_of(*j, r.calls))
      return r.calls.empty() ? plain(text) : unparsed(text);
    at = t.find_first_not_of(" \t\r\n;", end);
    if (at == std::string_view::npos) break;
  }
  return r;
}

ToolReply parse_mistral(std::string_view text) {
  constexpr std::string_view tag = "[TOOL_CALLS]";
  const size_t first = text.find(tag);
  if (first == std::string_view::npos) return plain(text);
  ToolReply r;
  r.content = std::string(trim(text.substr(0, first)));
  size_t at = first;
  while (at != std::string_view::npos && at < text.size()) {
    if (text.substr(at, tag.size()) != tag) return unparsed(text);
    at += tag.size();
    const size_t q = text.find_first_not_of(kSpace, at);
    if (q == std::string_view::npos) return unparsed(text);
    size_t end = 0;
    if (text[q] == '[' || text[q] == '{') {
      const std::optional<json> j = json_at(text, q, end);
      if (!j || !calls_of(*j, r.calls)) return unparsed(text);
    } else {  // NAME[ARGS]{...} (the newer form), or NAME[CALL_ID]id[ARGS]{...}
      const size_t args = text.find("[ARGS]", q);
      if (args == std::string_view::npos) return unparsed(text);
      ToolCall c;
      std::string_view head = text.substr(q, args - q);
      if (const size_t id = head.find("[CALL_ID]"); id != std::string_view::npos) {
        c.id = std::string(trim(head.substr(id + 9)));
        head = head.substr(0, id);
      }
      c.name = std::string(trim(head));
      const std::optional<json> j = json_at(text, args + 6, end);
      const std::optional<std::string> a = j ? arguments_of(*j) : std::nullopt;
      if (c.name.empty() || !a) return unparsed(text);
      c.arguments = *a;
      r.calls.push_back(std::move(c));
    }
    at = text.find_first_not_of(kSpace, end);
  }
  return r;
}

ToolReply parse_gpt_oss(std::string_view text) {
  ToolReply r;
  size_t at = 0;
  for (;;) {
    const size_t to = text.find("to=functions.", at);
    if (to == std::string_view::npos) break;
    const size_t name_start = to + 13;
    const size_t name_end = text.find_first_of(" <\t\n", name_start);
    const size_t msg = text.find("<|message|>", name_start);
    if (name_end == std::string_view::npos || msg == std::string_view::npos) return unparsed(text);
    size_t end = 0;
    const std::optional<json> j = json_at(text, msg + 11, end);
    const std::optional<std::string> a = j ? arguments_of(*j) : std::nullopt;
    if (!a) return unparsed(text);
    r.calls.push_back({"", std::string(text.substr(name_start, name_end - name_start)), *a});
    at = end;
  }
  // The answer in words: the final channel's message.
  if (const size_t f = text.find("<|channel|>final<|message|>"); f != std::string_view::npos) {
    std::string_view m = text.substr(f + 27);
    for (const char* stop : {"<|return|>", "<|end|>", "<|call|>"}) m = m.substr(0, m.find(stop));
    r.content = std::string(trim(m));
  } else if (r.calls.empty()) {
    return plain(text);
  }
  return r;
}

ToolReply parse_deepseek(std::string_view text) {
  constexpr std::string_view begin = "<｜tool▁call▁begin｜>", sep = "<｜tool▁sep｜>",
                             end_tag = "<｜tool▁call▁end｜>", all = "<｜tool▁calls▁begin｜>";
  const size_t first = text.find(all) != std::string_view::npos ? text.find(all) : text.find(begin);
  if (first == std::string_view::npos) return plain(text);
  ToolReply r;
  r.content = std::string(trim(text.substr(0, first)));
  size_t at = first;
  for (;;) {
    const size_t b = text.find(begin, at);
    if (b == std::string_view::npos) break;
    const size_t s = text.find(sep, b);
    if (s == std::string_view::npos) return unparsed(text);
    const std::string_view kind = trim(text.substr(b + begin.size(), s - b - begin.size()));
    ToolCall c;
    size_t json_from = s + sep.size();
    if (kind == "function") {  // R1: function<sep>NAME\n```json\n{...}\n```
      const size_t nl = text.find('\n', json_from);
      if (nl == std::string_view::npos) return unparsed(text);
      c.name = std::string(trim(text.substr(json_from, nl - json_from)));
      const size_t fence = text.find("```", nl);
      if (fence == std::string_view::npos) return unparsed(text);
      json_from = text.find('\n', fence);
      if (json_from == std::string_view::npos) return unparsed(text);
    } else {  // V3.1: NAME<sep>{...}
      c.name = std::string(kind);
    }
    size_t e = 0;
    const std::optional<json> j = json_at(text, json_from, e);
    const std::optional<std::string> a = j ? arguments_of(*j) : std::nullopt;
    if (c.name.empty() || !a) return unparsed(text);
    c.arguments = *a;
    r.calls.push_back(std::move(c));
    const size_t close = text.find(end_tag, e);
    at = close == std::string_view::npos ? e : close + end_tag.size();
  }
  if (r.calls.empty()) return unparsed(text);
  return r;
}

ToolReply parse_command_r7b(std::string_view text) {
  ToolReply r;
  if (const size_t a = text.find("<|START_RESPONSE|>"); a != std::string_view::npos) {
    std::string_view m = text.substr(a + 18);
    r.content = std::string(trim(m.substr(0, m.find("<|END_RESPONSE|>"))));
  }
  const size_t act = text.find("<|START_ACTION|>");
  if (act == std::string_view::npos) return r.content.empty() ? plain(text) : r;
  size_t end = 0;
  const std::optional<json> j = json_at(text, act + 16, end);
  if (!j || !calls_of(*j, r.calls, "tool_name", "tool_call_id")) return unparsed(text);
  return r;
}

ToolReply parse_generic(std::string_view text) {
  const std::string_view t = trim(text);
  if (t.empty() || t[0] != '{') return plain(text);
  const json j = json::parse(t, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return plain(text);
  ToolReply r;
  if (j.contains("tool_calls") && calls_of(j["tool_calls"], r.calls)) return r;
  if (j.contains("tool_call") && calls_of(j["tool_call"], r.calls)) return r;
  if (j.contains("response") && j["response"].is_string())
    return plain(j["response"].get<std::string>());
  return plain(text);
}

}  // namespace

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::none:
      return "generic JSON";
    case ToolFormat::hermes:
      return "hermes";
    case ToolFormat::qwen3_coder:
      return "qwen3-coder";
    case ToolFormat::llama3:
      return "llama 3";
    case ToolFormat::mistral:
      return "mistral";
    case ToolFormat::gpt_oss:
      return "gpt-oss";
    case ToolFormat::deepseek:
      return "deepseek";
    case ToolFormat::granite:
      return "granite";
    case ToolFormat::command_r7b:
      return "command r7b";
  }
  return "?";
}

ToolFormat detect_tool_format(std::string_view src) {
  const auto has = [&](std::string_view s) { return src.find(s) != std::string_view::npos; };
  if (has("<function=") && has("<parameter=")) return ToolFormat::qwen3_coder;
  if (has("<tool_call>")) return ToolFormat::hermes;
  if (has("[TOOL_CALLS]")) return ToolFormat::mistral;
  if (has("tool▁call▁begin") || has("tool▁calls▁begin")) return ToolFormat::deepseek;
  if (has("<|tool_call|>")) return ToolFormat::granite;
  if (has("<|START_ACTION|>")) return ToolFormat::command_r7b;
  if (has("<|channel|>") && has("to=functions")) return ToolFormat::gpt_oss;
  if (has("<|python_tag|>") || has("ipython")) return ToolFormat::llama3;
  return ToolFormat::none;
}

ToolReply parse_tool_calls(ToolFormat f, std::string_view text) {
  try {
    switch (f) {
      case ToolFormat::none:
        return parse_generic(text);
      case ToolFormat::hermes:
        return tagged_json(text, "<tool_call>", "</tool_call>");
      case ToolFormat::qwen3_coder:
        return parse_qwen3_coder(text);
      case ToolFormat::llama3:
        return parse_llama3(text);
      case ToolFormat::mistral:
        return parse_mistral(text);
      case ToolFormat::gpt_oss:
        return parse_gpt_oss(text);
      case ToolFormat::deepseek:
        return parse_deepseek(text);
      case ToolFormat::granite:
        return tagged_json(text, "<|tool_call|>", "");
      case ToolFormat::command_r7b:
        return parse_command_r7b(text);
    }
  } catch (const nlohmann::json::exception&) {
  }
  return unparsed(text);
}

}  // namespace ps
