// Tools offered to a model: the grammar that makes a reply a call (tool_choice required or a
// named function), where calls may begin in a streamed reply, and the system text that teaches
// templates without a tool syntax the generic form.
#include <fmt/format.h>

#include <algorithm>

#include "engine/tool_calls.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace ps {
namespace {

using ojson = nlohmann::ordered_json;

// A GBNF string literal.
std::string lit(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else
      out += c;
  }
  return out + "\"";
}

// A function's parameters as a schema: an absent one takes no arguments but accepts any object.
const ojson& parameters_of(const ToolSpec& t) {
  static const ojson any_object = {{"type", "object"}};
  return t.parameters.is_null() ? any_object : t.parameters;
}

// The grammar of calls, built one rule at a time beside the compiled argument schemas.
class CallGrammar {
 public:
  explicit CallGrammar(const std::vector<ToolSpec>& tools) : tools_(tools) {}

  // A rule for the arguments of tools_[i].
  std::string arguments(size_t i) {
    try {
      return rules_.add(parameters_of(tools_[i]), tools_[i].name + "-arguments");
    } catch (const grammar::GrammarError& e) {
      throw grammar::GrammarError(
          fmt::format("tool '{}': its parameters: {}", tools_[i].name, e.what()));
    }
  }

  // A rule for one parameter's values (its schema within the parameters' `doc`).
  std::string property(const ojson& schema, const std::string& hint, const ojson& doc) {
    return rules_.add(schema, hint, &doc);
  }

  // A rule of ours with this body.
  std::string rule(const std::string& hint, const std::string& body) {
    const std::string name = rules_.reserve(hint);
    own_ += name + " ::= " + body + "\n";
    return name;
  }

  // One rule that is any one tool's call, each as `call(i, arguments rule)` makes it.
  template <typename F>
  std::string any_call(F call) {
    std::string alts;
    for (size_t i = 0; i < tools_.size(); ++i) {
      if (i) alts += " | ";
      alts += rule(tools_[i].name + "-call", call(i, arguments(i)));
    }
    return rule("call", alts);
  }

  // `item`, then with `parallel` up to one more per tool offered, each led by `sep`: a small
  // model asked for calls otherwise repeats them until its token limit.
  std::string some(const std::string& item, const std::string& sep, bool parallel) const {
    return parallel && tools_.size() > 1
               ? fmt::format("{} ( {} {} ){{0,{}}}", item, sep, item, tools_.size() - 1)
               : item;
  }

  std::string text(const std::string& root_body) {
    return "root ::= " + root_body + "\n" + own_ + rules_.gbnf();
  }

  const std::vector<ToolSpec>& tools() const { return tools_; }

 private:
  const std::vector<ToolSpec>& tools_;
  grammar::SchemaRules rules_;
  std::string own_;
};

// {"NAME_KEY": "name", "ARGS_KEY": arguments}, as most families write a call.
std::string json_call(const std::string& name, const std::string& args, const char* name_key,
                      const char* args_key) {
  return lit(fmt::format("{{\"{}\": \"{}\", \"{}\": ", name_key, name, args_key)) + " " + args +
         " " + lit("}");
}

// Qwen3-Coder: each parameter as <parameter=KEY>\nVALUE\n</parameter>, its value JSON (a string
// written quoted, which the parser reads back as the same string).
std::string qwen3_coder_call(CallGrammar& g, size_t i) {
  const ToolSpec& t = g.tools()[i];
  const ojson& p = parameters_of(t);
  std::string body = lit("<tool_call>\n<function=" + t.name + ">\n");
  if (p.is_object() && p.contains("properties")) {
    if (!p["properties"].is_object())
      throw grammar::GrammarError(
          fmt::format("tool '{}': its parameters' 'properties' must be an object", t.name));
    std::vector<std::string> required;
    if (p.contains("required") && p["required"].is_array())
      for (const ojson& r : p["required"])
        if (r.is_string()) required.push_back(r.get<std::string>());
    for (auto it = p["properties"].begin(); it != p["properties"].end(); ++it) {
      std::string value;
      try {
        value = g.property(it.value(), t.name + "-" + it.key(), p);
      } catch (const grammar::GrammarError& e) {
        throw grammar::GrammarError(
            fmt::format("tool '{}': parameter '{}': {}", t.name, it.key(), e.what()));
      }
      const std::string item =
          lit("<parameter=" + it.key() + ">\n") + " " + value + " " + lit("\n</parameter>\n");
      const bool req = std::find(required.begin(), required.end(), it.key()) != required.end();
      body += " " + (req ? item : "( " + item + " )?");
    }
  }
  return body + " " + lit("</function>\n</tool_call>");
}

}  // namespace

std::string tool_call_grammar(ToolFormat f, const std::vector<ToolSpec>& tools, bool parallel) {
  if (tools.empty()) throw grammar::GrammarError("no tools to call");
  CallGrammar g(tools);
  const auto name = [&](size_t i) { return tools[i].name; };
  switch (f) {
    case ToolFormat::none: {
      const std::string call = g.any_call([&](size_t i, const std::string& args) {
        return json_call(name(i), args, "name", "arguments");
      });
      return g.text(lit("{\"tool_calls\": [") + " " + g.some(call, lit(", "), parallel) + " " +
                    lit("]}"));
    }
    case ToolFormat::hermes: {
      const std::string call = g.any_call([&](size_t i, const std::string& args) {
        return lit("<tool_call>\n") + " " + json_call(name(i), args, "name", "arguments") + " " +
               lit("\n</tool_call>");
      });
      return g.text(g.some(call, lit("\n"), parallel));
    }
    case ToolFormat::qwen3_coder: {
      std::string alts;
      for (size_t i = 0; i < tools.size(); ++i)
        alts += (i ? " | " : "") + g.rule(name(i) + "-call", qwen3_coder_call(g, i));
      return g.text(g.some(g.rule("call", alts), lit("\n"), parallel));
    }
    case ToolFormat::llama3: {
      const std::string call = g.any_call([&](size_t i, const std::string& args) {
        return json_call(name(i), args, "name", "parameters");
      });
      return g.text(g.some(call, lit("; "), parallel));
    }
    case ToolFormat::mistral: {
      // Both forms the templates teach: a JSON list, or NAME[ARGS]{...} after each mark.
      const std::string call = g.any_call([&](size_t i, const std::string& args) {
        return json_call(name(i), args, "name", "arguments");
      });
      std::string named;
      for (size_t i = 0; i < tools.size(); ++i)
        named += (i ? " | " : "") + lit(name(i) + "[ARGS]") + " " +
                 g.property(parameters_of(tools[i]), name(i) + "-args", parameters_of(tools[i]));
      const std::string list = lit("[") + " " + g.some(call, lit(", "), parallel) + " " + lit("]");
      const std::string args_form =
          g.some(g.rule("named-call", named), lit("[TOOL_CALLS]"), parallel);
      return g.text(lit("[TOOL_CALLS]") + " ( " + list + " | " + args_form + " )");
    }
    case ToolFormat::gpt_oss: {  // one call per message: the message ends with the call
      std::string alts;
      for (size_t i = 0; i < tools.size(); ++i)
        alts +=
            (i ? " | " : "") +
            lit("<|channel|>commentary to=functions." + name(i) + " <|constrain|>json<|message|>") +
            " " + g.arguments(i);
      return g.text(alts);
    }
    case ToolFormat::deepseek: {
      // R1's function<sep>NAME with a fenced block, or V3.1's NAME<sep>{...}.
      const std::string call = g.any_call([&](size_t i, const std::string& args) {
        return "( " + lit("<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + name(i) + "\n```json\n") +
               " " + args + " " + lit("\n```<｜tool▁call▁end｜>") + " | " +
               lit("<｜tool▁call▁begin｜>" + name(i) + "<｜tool▁sep｜>") + " " + args + " " +
               lit("<｜tool▁call▁end｜>") + " )";
      });
      return g.text(lit("<｜tool▁calls▁begin｜>") + " " + g.some(call, lit("\n"), parallel) + " " +
                    lit("<｜tool▁calls▁end｜>"));
    }
    case ToolFormat::granite: {
      const std::string call = g.any_call([&](size_t i, const std::string& args) {
        return json_call(name(i), args, "name", "arguments");
      });
      return g.text(lit("<|tool_call|>[") + " " + g.some(call, lit(", "), parallel) + " " +
                    lit("]"));
    }
    case ToolFormat::command_r7b: {
      const std::string call = g.any_call([&](size_t i, const std::string& args) {
        return lit("{\"tool_call_id\": \"") + " [0-9]{1,3} " +
               lit("\", \"tool_name\": \"" + name(i) + "\", \"parameters\": ") + " " + args + " " +
               lit("}");
      });
      return g.text(lit("<|START_ACTION|>[") + " " + g.some(call, lit(", "), parallel) + " " +
                    lit("]<|END_ACTION|>"));
    }
  }
  throw grammar::GrammarError("unknown tool format");
}

std::string generic_tool_prompt(const std::vector<ToolSpec>& tools, bool parallel) {
  std::string list;
  for (const ToolSpec& t : tools) {
    ojson fn = {{"name", t.name}};
    if (!t.description.empty()) fn["description"] = t.description;
    fn["parameters"] = parameters_of(t);
    list += fn.dump() + "\n";
  }
  return fmt::format(
      "You can call these tools (functions), given as JSON with their parameters' schemas:\n{}\n"
      "To call {}, reply with only a JSON object of this form, arguments matching the "
      "parameters:\n{{\"tool_calls\": [{{\"name\": \"NAME\", \"arguments\": {{...}}}}{}]}}\n"
      "Results come back in a message {{\"tool_response\": ...}}. To answer without a tool, "
      "reply in plain text.",
      list, parallel ? "one or more tools" : "a tool", parallel ? ", ..." : "");
}

ToolOpeners tool_call_openers(ToolFormat f) {
  switch (f) {
    case ToolFormat::none:
      return {{}, true, false};
    case ToolFormat::hermes:
    case ToolFormat::qwen3_coder:
      return {{"<tool_call>"}, false, false};
    case ToolFormat::llama3:
      return {{"<|python_tag|>"}, true, false};
    case ToolFormat::mistral:
      return {{"[TOOL_CALLS]"}, false, false};
    case ToolFormat::deepseek:
      return {{"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>"}, false, false};
    case ToolFormat::granite:
      return {{"<|tool_call|>"}, false, false};
    case ToolFormat::gpt_oss:      // channels: the answer is the final channel's message
    case ToolFormat::command_r7b:  // the answer is inside <|START_RESPONSE|>...
      return {{}, false, true};
  }
  return {};
}

std::vector<std::string> tool_call_marks(ToolFormat f) {
  switch (f) {
    case ToolFormat::none:
      return {};
    case ToolFormat::hermes:
    case ToolFormat::qwen3_coder:
      return {"<tool_call>", "</tool_call>"};
    case ToolFormat::llama3:
      return {"<|python_tag|>"};
    case ToolFormat::mistral:
      return {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"};
    case ToolFormat::gpt_oss:
      return {"<|channel|>", "<|message|>", "<|constrain|>", "<|start|>"};
    case ToolFormat::deepseek:
      return {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
              "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"};
    case ToolFormat::granite:
      return {"<|tool_call|>"};
    case ToolFormat::command_r7b:
      return {"<|START_ACTION|>", "<|END_ACTION|>",     "<|START_RESPONSE|>",
              "<|END_RESPONSE|>", "<|START_THINKING|>", "<|END_THINKING|>"};
  }
  return {};
}

}  // namespace ps
