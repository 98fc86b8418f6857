// The template engine's bounds and errors, which jinja2 cannot be the oracle for: templates
// from untrusted files stop at the limits on output, steps and nesting with a TemplateError
// naming the line, and data leads nowhere but data. Rendering itself is checked against jinja2
// by tests/oracle/check_chat_templates.py and check_jinja_constructs.py.
#include "template/template.h"

#include <gtest/gtest.h>

#include "template/chat_template.h"

namespace ps::jinja {
namespace {

std::string error_of(std::string_view src, const RenderOptions& o = {},
                     const nlohmann::ordered_json& vars = nlohmann::ordered_json::object()) {
  try {
    Template t(src);
    t.render(vars, o);
  } catch (const TemplateError& e) {
    return describe(e);
  }
  return "";
}

TEST(Template, OutputStepsAndNestingAreBounded) {
  RenderOptions o;
  o.max_output = 1000;
  EXPECT_EQ(error_of("{% for i in range(100) %}{{ 'x' * 20 }}{% endfor %}", o),
            "template line 1: template output exceeds 1000 bytes");
  o = {};
  o.max_steps = 5000;
  EXPECT_EQ(
      error_of("{% for i in range(2) %}\n{% for j in range(100000) %}{% endfor %}{% endfor %}", o),
      "template line 2: template ran more than 5000 steps");
  EXPECT_EQ(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
            "template line 1: template nests deeper than 1000 levels (runaway recursion?)");
  EXPECT_EQ(error_of("{{ range(100001) | length }}"),
            "template line 1: Range too big. The sandbox blocks ranges larger than MAX_RANGE "
            "(100000).");
  EXPECT_EQ(error_of("{{ 'x' * 100000000 }}"), "template line 1: a value would exceed 32 MiB");
  // Parsing is bounded too: brackets and blocks nested thousands deep.
  EXPECT_EQ(error_of("{{ " + std::string(5000, '(')),
            "template line 1: brackets nested too deeply");
  EXPECT_EQ(error_of("{{ " + std::string(300, '-') + "1 }}"),
            "template line 1: template nested too deeply");
  std::string deep;
  for (int k = 0; k < 3000; ++k) deep += "{% if true %}";
  EXPECT_EQ(error_of(deep).substr(0, 16), "template line 1:");
}

TEST(Template, ErrorsNameTheLine) {
  EXPECT_EQ(error_of("a\n{{ 1 +\n}}"), "template line 3: unexpected end of print statement");
  EXPECT_EQ(error_of("a\nb\n{% frobnicate %}"), "template line 3: unknown tag 'frobnicate'");
  EXPECT_EQ(error_of("{% for x in y %}\n{{ x }}"),
            "template line 2: unexpected end of template: a block is still open (looking for "
            "'endfor')");
  EXPECT_EQ(error_of("\n\n{{ x | nosuchfilter }}"),
            "template line 3: no filter named 'nosuchfilter'");
  EXPECT_EQ(error_of("\n{{ 'a' + 1 }}"),
            "template line 2: can only concatenate str (not \"int\") to str");
  try {
    Template("\n\n{{ raise_exception('Only user and assistant roles') }}")
        .render(nlohmann::ordered_json::object());
    FAIL() << "raise_exception rendered";
  } catch (const TemplateError& e) {
    EXPECT_TRUE(e.raised());
    EXPECT_EQ(e.message(), "Only user and assistant roles");
    EXPECT_EQ(e.line(), 3);
  }
}

TEST(Template, DataLeadsNowhereButData) {
  EXPECT_EQ(error_of("{{ ''.__class__.__mro__ }}"),
            "template line 1: access to attribute '__class__' of 'str' object is unsafe.");
  EXPECT_EQ(
      error_of("{{ messages.append(1) }}", {}, {{"messages", nlohmann::ordered_json::array()}}),
      "template line 1: access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(error_of("{{ d.update({}) }}", {}, {{"d", nlohmann::ordered_json::object()}}),
            "template line 1: access to attribute 'update' of 'dict' object is unsafe.");
  // A namespace that holds itself is freed (no leak under LSan).
  EXPECT_EQ(error_of("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me is defined }}"),
            "");
}

TEST(Template, StrftimeNowTakesTheGivenTime) {
  RenderOptions o;
  o.now = 86400 * 365;  // 1971-01-01 in UTC; the zone is the machine's
  setenv("TZ", "UTC", 1);
  tzset();
  EXPECT_EQ(Template("{{ strftime_now('%Y-%m-%d') }}").render(nlohmann::ordered_json::object(), o),
            "1971-01-01");
}

TEST(ChatTemplate, ChoiceAndBosStripping) {
  EXPECT_EQ(choose_chat_template("", "{{ x }}", "llama").name, "model");
  EXPECT_EQ(choose_chat_template("", "", "gemma3").name, "gemma");
  EXPECT_EQ(choose_chat_template("", "", "qwen2").name, "chatml");
  EXPECT_EQ(choose_chat_template("llama3", "{{ x }}", "llama").name, "llama3");
  EXPECT_THROW(choose_chat_template("nosuch", "", "llama"), UsageError);
  EXPECT_THROW(choose_chat_template("no/such/file.jinja", "", "llama"), UsageError);
  const nlohmann::ordered_json conv = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  ChatTemplate strip(choose_chat_template("llama3", "", "llama"), "<|begin_of_text|>", "", true);
  ChatTemplate keep(choose_chat_template("llama3", "", "llama"), "<|begin_of_text|>", "", false);
  EXPECT_EQ(strip.render(conv),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant"
            "<|end_header_id|>\n\n");
  EXPECT_EQ(keep.render(conv), "<|begin_of_text|>" + strip.render(conv));
}

}  // namespace
}  // namespace ps::jinja
