#!/usr/bin/env python3
"""Checks `polystack template` against Python's jinja2 on small snippets, one Jinja construct each.

check_chat_templates.py holds the engine to whole real-world templates; this check goes construct
by construct (whitespace control, statements, expressions, filters, tests, methods, globals,
undefined values, errors) with the edge cases where an engine written from scratch is likely to
differ from jinja2. Each snippet is a template text and its variables, rendered once by jinja2
set up as Hugging Face transformers sets it up (the oracle) and once by

    polystack template --chat-template-file SNIPPET.jinja --messages VARS.json [--bos T] [--eos T]

VARS.json holds all the snippet's variables (`messages` is [] unless the snippet gives it;
add_generation_prompt, when the snippet does not give it, is true on both sides, as polystack
defaults it; bos_token and eos_token are "" unless the snippet sets them).

jinja2 is set up as jinja_oracle.py describes; its strftime_now formats the pinned instant
SOURCE_DATE_EPOCH in local time (polystack runs with SOURCE_DATE_EPOCH set to the same instant).

A snippet passes as jinja_oracle.compare has it: the same bytes (UTF-8) from both, or
raise_exception's message in polystack's stderr, or jinja2 failing otherwise (syntax error,
undefined value, type error, sandbox refusal) while polystack exits 1 with a one-line message
("both raised", counted apart). Anything else fails; an exit status other than 0 or 1 (a crash,
a signal, a timeout) always does.

Snippets whose jinja2 output is an accident of Python rather than Jinja (the repr of a generator,
a bound method or a macro object, with a memory address) are left out on purpose.

Exit status: 0 pass, 1 fail, 77 skip (jinja2 is not installed).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from jinja_oracle import (BOTH_RAISED, FAIL, JINJA2_MISSING, Actual, compare,  # noqa: E402
                          make_environment, oracle_render, run_template, skip)

SOURCE_DATE_EPOCH = 1764945296  # 2025-12-05 14:34:56 UTC: hours, minutes and seconds not zero


@dataclass
class Snippet:
    name: str
    template: str
    variables: dict = field(default_factory=dict)  # all but bos_token / eos_token
    bos: str = ""
    eos: str = ""


def S(name: str, template: str, /, bos: str = "", eos: str = "", **variables) -> Snippet:
    return Snippet(name, template, variables, bos, eos)


# --- Data the snippets share ---------------------------------------------------------------------

USERS = [
    {"name": "alice", "age": 31, "active": True, "role": "admin"},
    {"name": "Bob", "age": 25, "active": False, "role": "user"},
    {"name": "carol", "age": 40, "active": True, "role": "user"},
]
USERS_GAPPY = USERS + [{"name": "dave", "role": "guest", "active": None}]  # no age

MSGS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "  Hi there\n"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]},
    {"role": "tool", "content": "{\"t\": 21}"},
    {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image"},
                                 {"type": "text", "text": "here"}]},
]

NESTED = {"z": 1, "a": {"y": [1, 2.5, None, True], "b": "q\"uote"}, "m": "ünï 😀"}

TREE = [
    {"name": "a", "children": [{"name": "a1", "children": []},
                               {"name": "a2", "children": [{"name": "a2x", "children": []}]}]},
    {"name": "b", "children": []},
]

# --- Snippets ------------------------------------------------------------------------------------

SNIPPETS = [
    # --- Whitespace control ----------------------------------------------------------------------
    S("ws-dash-block", "a  {%- if true -%}  b  {%- endif -%}  c"),
    S("ws-dash-block-newlines", "a\n\n  {%- if true -%}\n\n  b\n  {%- endif -%}\n\nc"),
    S("ws-dash-expr", "a \n {{- 'x' -}} \n b"),
    S("ws-dash-expr-left-only", "a \n\t {{- 'x' }} \n b"),
    S("ws-dash-expr-right-only", "a \n {{ 'x' -}} \n\n b"),
    S("ws-dash-comment", "a \n {#- c -#} \n b"),
    S("ws-plus-lstrip", "x\n    {%+ if true %}y{% endif %}\n"),
    S("ws-plus-trim", "{% if true +%}\nx{% endif +%}\ny"),
    S("ws-trim-after-block", "{% if true %}\nx\n{% endif %}\ny\n"),
    S("ws-trim-one-newline-only", "{% if true %}\n\nx{% endif %}\n\ny"),
    S("ws-trim-after-comment", "{# c #}\nx\n{# d #}\n\ny"),
    S("ws-no-trim-after-expr", "{{ 'a' }}\nb{{ 'c' }}\n"),
    S("ws-lstrip-before-block", "x\n    {% if true %}y{% endif %}\n"),
    S("ws-lstrip-before-comment", "x\n   {# c #}\nz"),
    S("ws-lstrip-tabs", "x\n\t \t{% set y = 1 %}\nz"),
    S("ws-no-lstrip-before-expr", "x\n   {{ 'y' }}\n"),
    S("ws-mid-line-tag", "a  {% if true %}b{% endif %}  c\nd"),
    S("ws-mid-line-after-text", "x {% if true %}\ny\n  {% endif %}\nz"),
    S("ws-two-tags-one-line", "  {% if true %}  {% if true %}x{% endif %}  {% endif %}\nz"),
    S("ws-for-body-lines", "<\n{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n>"),
    S("ws-nested-indented", "{% for i in [1, 2] %}\n    {% if i == 2 %}\n        two\n"
      "    {% else %}\n        other\n    {% endif %}\n{% endfor %}\n"),
    S("ws-dash-both-sides-loop", "[\n{%- for i in [1, 2, 3] -%}\n  {{ i }},\n{%- endfor -%}\n]"),
    S("ws-dash-with-lstrip", "a\n    {%- if true %}\n    b\n    {%- endif %}\nc"),
    S("ws-lstrip-dash-comment", "a\n    {#- c #}\n    b"),
    S("ws-comment-multiline", "a\n{# line one\n   line two #}\nb"),
    S("ws-comment-with-tags", "a{# {{ x }} {% if %} #}b"),
    S("ws-crlf", "{% if true %}\r\nx\r\n{% endif %}\r\ny\r\nz{{ 'q' }}\r\n  {% set a = 1 %}\r\nw"),
    S("ws-crlf-in-string-literal", "{{ 'a\r\nb' }}|{{ 'c\rd' }}"),
    S("ws-cr-only", "a\rb{% if true %}\rc{% endif %}\r  {% if true %}d{% endif %}\re"),
    S("ws-ends-one-newline", "x\n"),
    S("ws-ends-two-newlines", "x\n\n"),
    S("ws-ends-crlf", "x\r\n"),
    S("ws-ends-after-block", "{% if true %}x{% endif %}\n"),
    S("ws-only-newline", "\n"),
    S("ws-empty-template", ""),
    S("ws-dash-at-start-and-end", "{{- ' a ' -}}"),
    S("ws-dash-against-text-spaces", "x   {{- 1 }}   {{- 2 -}}   y"),
    S("ws-set-lines", "{% set a = 1 %}\n{% set b = 2 %}\n{{ a }}{{ b }}\n"),
    S("ws-literal-braces", "a }} b %} c {x} { {"),
    S("ws-brace-before-tag", "{{% if true %}x{% endif %}"),
    S("ws-string-with-delimiters", "{{ '}}' }}{{ '%}' }}{{ \"{{\" }}{{ '{%' }}"),
    S("ws-raw", "{% raw %}{{ x }}{% if %}{# c #}{% endraw %}"),
    S("ws-raw-dash", "a  {%- raw -%}  b  {%- endraw -%}  c"),
    S("ws-raw-trim", "{% raw %}\nX\n{% endraw %}\nY"),
    S("ws-raw-lstrip", "q\n    {% raw %}X{% endraw %}\n"),
    S("ws-raw-no-spaces", "{%raw%}{{ y }}{%endraw%}"),
    S("ws-raw-contains-endfor", "{% for i in [1] %}{% raw %}{% endfor %}{% endraw %}{% endfor %}"),
    S("ws-unicode-text", "héllo {{ 'wörld' }} 😀 東京\n"),

    # --- set -------------------------------------------------------------------------------------
    S("set-simple", "{% set x = 1 %}{{ x }}"),
    S("set-tuple-unpack", "{% set a, b = [1, 2] %}{{ a }}-{{ b }}"),
    S("set-tuple-unpack-string", "{% set a, b = 'xy' %}{{ b }}{{ a }}"),
    S("set-tuple-unpack-mismatch", "{% set a, b = [1, 2, 3] %}{{ a }}"),
    S("set-tuple-no-parens", "{% set t = 1, 'a' %}{{ t }}"),
    S("set-block", "{% set x %}hello {{ 1 + 1 }}{% endset %}[{{ x }}]"),
    S("set-block-filter", "{% set x | upper %}abc{{ 'd' }}{% endset %}{{ x }}"),
    S("set-block-filter-chain", "{% set x | trim | title %}  ab cd  {% endset %}[{{ x }}]"),
    S("set-block-trim-lines", "{% set x %}\n  a\n  {% if true %}\n  b\n  {% endif %}\n"
      "{% endset %}[{{ x }}]"),
    S("set-overrides-variable", "{% set messages = [1] %}{{ messages|length }}",
      messages=MSGS),
    S("set-attribute-of-dict", "{% set d = {} %}{% set d.x = 1 %}{{ d }}"),

    # --- if --------------------------------------------------------------------------------------
    S("if-elif-else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two"
      "{% else %}many{% endif %};{% endfor %}"),
    S("if-elif-chain-no-else", "{% if false %}a{% elif false %}b{% elif 0 %}c{% endif %}|"),
    S("if-nested", "{% if true %}{% if false %}x{% else %}y{% endif %}{% endif %}"),
    S("if-undefined-falsy", "{% if nope %}yes{% else %}no{% endif %}"),

    # --- for and loop ----------------------------------------------------------------------------
    S("loop-index-vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
      "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}"),
    S("loop-previtem-nextitem", "{% for x in [1, 2, 3] %}[{{ loop.previtem }}|{{ loop.nextitem }}]"
      "{% endfor %}"),
    S("loop-previtem-defined", "{% for x in [1, 2] %}{{ loop.previtem is defined }}"
      "{{ loop.nextitem is defined }};{% endfor %}"),
    S("loop-cycle", "{% for i in range(5) %}{{ loop.cycle('a', 'b', 'c') }}{% endfor %}"),
    S("loop-changed", "{% for i in [1, 1, 2, 2, 1] %}{% if loop.changed(i) %}{{ i }}{% endif %}"
      "{% endfor %}"),
    S("loop-changed-two-args", "{% for u in users %}{{ loop.changed(u.role, u.active) }},"
      "{% endfor %}", users=USERS),
    S("loop-depth-plain", "{% for x in [1] %}{{ loop.depth }}{{ loop.depth0 }}{% endfor %}"),
    S("loop-recursive", "{% for item in tree recursive %}{{ item.name }}@{{ loop.depth }}"
      "{% if item.children %}[{{ loop(item.children) }}]{% endif %}{% endfor %}", tree=TREE),
    S("loop-else-empty", "{% for x in [] %}x{% else %}empty{% endfor %}"),
    S("loop-else-not-taken", "{% for x in [1] %}x{% else %}empty{% endfor %}"),
    # jinja2 runs the else block unless some iteration reached the end of its body, so a break or
    # continue in every iteration taken still runs it.
    S("loop-else-after-break", "{% for x in [1, 2] %}{{ x }}{% break %}{% else %}E{% endfor %}"),
    S("loop-else-break-in-second", "{% for x in [1, 2] %}{{ x }}{% if x == 2 %}{% break %}"
      "{% endif %}{% else %}E{% endfor %}"),
    S("loop-else-continue-always", "{% for x in [1, 2] %}{{ x }}{% continue %}{% else %}E"
      "{% endfor %}"),
    S("loop-if-filter-length", "{% for x in [1, 2, 3, 4, 5] if x is odd %}{{ loop.index }}/"
      "{{ loop.length }}:{{ x }}{{ '.' if loop.last }} {% endfor %}"),
    S("loop-if-filter-else", "{% for x in [1, 2] if x > 5 %}{{ x }}{% else %}none{% endfor %}"),
    S("loop-if-filter-string", "{% for c in 'a1b2' if c is not number and c not in '12' %}"
      "{{ c }}{% endfor %}"),
    S("loop-break", "{% for x in range(10) %}{% if x == 3 %}{% break %}{% endif %}{{ x }}"
      "{% endfor %}"),
    S("loop-continue", "{% for x in range(5) %}{% if x is even %}{% continue %}{% endif %}"
      "{{ x }}{{ loop.last }};{% endfor %}"),
    S("loop-break-inner-only", "{% for a in [1, 2] %}{% for b in [1, 2, 3] %}{% if b == 2 %}"
      "{% break %}{% endif %}{{ a }}{{ b }} {% endfor %}{% endfor %}"),
    S("loop-nested-outer", "{% for a in [1, 2] %}{% set outer = loop %}{% for b in 'xy' %}"
      "{{ outer.index }}{{ loop.index }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}"),
    S("loop-shadowing-var", "{% for x in messages %}{% for x in [9] %}{{ x }}{% endfor %}"
      "{{ x.role }} {% endfor %}", messages=MSGS[:2]),
    S("loop-var-after-loop", "{% for i in [1, 2] %}{% endfor %}[{{ i }}]"),
    S("loop-unpack-items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
      d={"b": 1, "a": [2], "c": None}),
    S("loop-unpack-tuples", "{% for a, b in [(1, 2), [3, 4], 'xy'] %}{{ a }}{{ b }},{% endfor %}"),
    S("loop-unpack-mismatch", "{% for a, b in [[1, 2, 3]] %}{{ a }}{% endfor %}"),
    S("loop-dict-keys", "{% for k in d %}{{ k }},{% endfor %}{{ d|length }}",
      d={"zeta": 1, "alpha": 2, "mid": 3}),
    S("loop-string-chars", "{% for c in 'hé😀' %}[{{ c }}]{% endfor %}"),
    S("loop-over-none", "{% for x in none %}{{ x }}{% endfor %}"),
    S("loop-over-int", "{% for x in 5 %}{{ x }}{% endfor %}"),
    S("loop-commas", "{% for m in messages %}{{ m.role }}{% if not loop.last %}, {% endif %}"
      "{% endfor %}", messages=MSGS),
    S("loop-outside", "[{{ loop }}]"),

    # --- Scoping ---------------------------------------------------------------------------------
    S("scope-for-does-not-leak", "{% set x = 0 %}{% for i in [1, 2] %}{% set x = i %}{{ x }}"
      "{% endfor %}|{{ x }}"),
    S("scope-for-new-var-not-leaking", "{% for i in [1] %}{% set y = 3 %}{% endfor %}[{{ y }}]"),
    S("scope-if-leaks-top", "{% if true %}{% set y = 5 %}{% endif %}{{ y }}"),
    S("scope-if-overwrites-top", "{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}"),
    S("scope-if-inside-for", "{% for i in [1] %}{% if true %}{% set y = 3 %}{% endif %}{{ y }}"
      "{% endfor %}[{{ y }}]"),
    S("scope-across-iterations", "{% for i in [1, 2, 3] %}{% if not loop.first %}({{ prev }})"
      "{% endif %}{% set prev = i %}{% endfor %}"),
    S("scope-across-iterations-outer", "{% set x = 'outer' %}{% for i in [1, 2] %}{{ x }},"
      "{% set x = i %}{% endfor %}{{ x }}"),
    S("scope-namespace", "{% set ns = namespace(found=false, n=0) %}{% for m in messages %}"
      "{% if m.role == 'user' %}{% set ns.found = true %}{% set ns.n = ns.n + 1 %}{% endif %}"
      "{% endfor %}{{ ns.found }} {{ ns.n }}", messages=MSGS),
    S("scope-namespace-list", "{% set ns = namespace(items=[]) %}{% for i in range(3) %}"
      "{% set ns.items = ns.items + [i * 2] %}{% endfor %}{{ ns.items }}"),
    S("scope-namespace-missing-attr", "{% set ns = namespace(a=1) %}[{{ ns.b }}]{{ ns.a }}"),
    S("scope-namespace-dict-arg", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}"),
    S("scope-set-in-macro-not-leaking", "{% macro m() %}{% set z = 1 %}{{ z }}{% endmacro %}"
      "{{ m() }}[{{ z }}]"),
    S("scope-with", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]"),
    S("scope-with-set-inside", "{% with %}{% set x = 1 %}{{ x }}{% endwith %}[{{ x }}]"),
    S("scope-with-refers-outer", "{% set a = 10 %}{% with a = 1, b = a %}{{ a }},{{ b }}"
      "{% endwith %}"),

    # --- Macros and call -------------------------------------------------------------------------
    S("macro-defaults-kwargs", "{% macro m(a, b='B', c=none) %}{{ a }}{{ b }}{{ c }}"
      "{% endmacro %}{{ m(1) }}|{{ m(1, 2) }}|{{ m(b=3, a=4) }}|{{ m(1, c=0) }}"),
    S("macro-varargs-kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}"
      "{{ m(1, 2, 3, x=4, y='z') }}|{{ m(0) }}"),
    S("macro-missing-arg", "{% macro m(a, b) %}[{{ a }}|{{ b }}]{% endmacro %}{{ m(1) }}"),
    S("macro-too-many-args", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}"),
    S("macro-unknown-kwarg", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, b=2) }}"),
    S("macro-default-from-param", "{% macro m(a, b=a) %}{{ a }}{{ b }}{% endmacro %}{{ m(5) }}"),
    S("macro-caller", "{% macro w() %}<{{ caller() }}>{% endmacro %}"
      "{% call w() %}in{{ 1 }}{% endcall %}"),
    S("macro-caller-args", "{% macro w(items) %}{% for i in items %}{{ caller(i, loop.index) }}"
      "{% endfor %}{% endmacro %}{% call(x, n) w(['a', 'b']) %}[{{ n }}{{ x }}]{% endcall %}"),
    S("macro-caller-trim", "{% macro w() %}({{ caller() }}){% endmacro %}\n{% call w() %}\n"
      "  inner\n{% endcall %}\nend"),
    S("macro-recursion", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}"
      "{% endmacro %}{{ f(4) }}"),
    S("macro-recursive-render", "{% macro r(v) %}{% if v is mapping %}{{ '{' }}"
      "{% for k, x in v.items() %}{{ k }}:{{ r(x) }}{% if not loop.last %},{% endif %}"
      "{% endfor %}}{% elif v is iterable and v is not string %}[{% for x in v %}{{ r(x) }}"
      "{% if not loop.last %},{% endif %}{% endfor %}]{% else %}{{ v }}{% endif %}{% endmacro %}"
      "{{ r(d) }}", d=NESTED),
    S("macro-reads-outer-set-later", "{% macro m() %}[{{ x }}]{% endmacro %}{% set x = 5 %}"
      "{{ m() }}"),
    S("macro-reads-template-var", "{% macro m() %}{{ greeting }}{% endmacro %}{{ m() }}",
      greeting="hi"),
    S("macro-whitespace-body", "{% macro m(x) %}\n  <{{ x }}>\n{% endmacro %}[{{ m(1) }}]"),
    S("macro-result-is-string", "{% macro m() %}abc{% endmacro %}{{ m()|length }}"
      "{{ m() ~ 'd' }}{{ m()|upper }}{{ m() is string }}"),
    S("macro-called-in-loop", "{% macro item(x) %}<{{ x }}>{% endmacro %}"
      "{% for i in [1, 2] %}{{ item(i) }}{% endfor %}"),

    # --- filter and with blocks ------------------------------------------------------------------
    S("filterblock-upper", "{% filter upper %}ab{{ 'c' }}{% endfilter %}"),
    S("filterblock-args", "{% filter replace('a', 'x') %}banana{% endfilter %}"),
    S("filterblock-chain", "{% filter trim|title %}   hello world  {% endfilter %}|"),
    S("filterblock-with-for", "{% filter upper %}{% for i in 'ab' %}{{ i }}-{% endfor %}"
      "{% endfilter %}"),

    # --- Expressions: precedence -----------------------------------------------------------------
    # `~` binds tighter than + and -, looser than * and /.
    S("expr-concat-vs-plus", "{{ 'x' + 'a' ~ 1 }}|{{ 'a' ~ 'b' + 'c' }}|{{ 2 * 3 ~ 4 }}"
      "|{{ 'a' ~ 6 / 2 }}"),
    S("expr-concat-binds-tighter-than-plus", "{{ 1 + 2 ~ 3 }}"),
    S("expr-pow-assoc", "{{ 2 ** 3 ** 2 }}"),
    S("expr-neg-pow", "{{ -2 ** 2 }}"),
    S("expr-neg-filter", "{{ -1|abs }}|{{ -3.9|int }}|{{ (-3)|abs }}"),
    S("expr-neg-filter-length", "{{ -x|length }}", x="abc"),
    S("expr-not-in", "{{ not 1 in [1] }}|{{ not 'a' == 'b' }}|{{ 1 not in [1] }}"),
    S("expr-if-no-else", "[{{ 'x' if false }}][{{ ('x' if false) is defined }}]"),
    S("expr-if-else-nested", "{{ 1 if false else 2 if false else 3 }}"
      "{{ 'a' if true else 'b' if true else 'c' }}"),
    S("expr-if-else-concat", "{{ 'a' ~ 'b' if false else 'c' }}"),
    S("expr-filter-binds-tight", "{{ 'a' ~ 'b'|upper }}|{{ '<|' + r + '|>\n' + c|trim + '.' }}",
      r="user", c="  hi  "),
    S("expr-filter-binds-tight-type-error", "{{ 1 + 2|string }}"),
    S("expr-arith-precedence", "{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 10 - 2 - 3 }}"
      "|{{ 2 * 3 % 4 }}|{{ 2 + 3 // 2 }}"),
    S("expr-bool-precedence", "{{ not true and false }}|{{ true or false and false }}"
      "|{{ not (true and false) }}"),
    S("expr-and-or-values", "[{{ 1 and 2 }}][{{ 0 or 'x' }}][{{ none or [] }}][{{ '' and 1 }}]"
      "[{{ [] or {} }}][{{ 0 and nope }}]"),
    S("expr-chained-compare", "{{ 1 < 2 < 3 }}{{ 3 > 2 > 1 }}{{ 1 < 3 > 2 }}{{ 1 == 1 == 1 }}"
      "{{ 1 < 2 == true }}{{ 2 > 1 < 0 }}"),
    S("expr-in-strings", "{{ 'ell' in 'hello' }}{{ '' in 'abc' }}{{ 'z' in 'abc' }}"),
    S("expr-in-lists-dicts", "{{ 2 in [1, 2] }}{{ 'a' in {'a': 1} }}{{ 1 in {'a': 1} }}"
      "{{ [1] in [[1]] }}{{ none in [none] }}{{ 'x' not in {'a': 1} }}{{ 1.0 in [1] }}"),
    S("expr-dot-index", "{{ items.1 }}{{ messages.0.role }}", items=["a", "b"], messages=MSGS),
    S("expr-getattr-vs-getitem", "{{ d.a }}{{ d['a'] }}{{ d.get('a') }}{{ d['items'] }}",
      d={"a": 1, "items": "I"}),
    S("expr-string-escapes", r"{{ 'a\nb' }}|{{ 'tab\there' }}|{{ 'it\'s' }}|{{ " + '"\\\\"'
      + r" }}|{{ '\u00e9\x41' }}|{{ '\q' }}"),
    S("expr-string-literal-unicode", "{{ 'é😀' ~ \"ü\" }}"),
    S("expr-adjacent-strings", "{{ 'a' 'b' }}"),
    S("expr-list-dict-literals-trailing-comma", "{{ [1, 2,] }}{{ {'a': 1,} }}{{ (1, 2,) }}"),
    S("expr-call-non-callable", "{% set x = 1 %}{{ x() }}"),
    S("expr-call-undefined", "{{ nosuch() }}"),
    S("expr-special-constants", "{{ None }}{{ True }}{{ False }}{{ none }}{{ true }}{{ false }}"
      "[{{ NONE }}]"),
    S("expr-numeric-literals", "{{ 1_000 }}|{{ 1_0.5 }}|{{ 0 }}|{{ 00 }}|{{ 1e3 }}|{{ 2.5E-1 }}"),
    S("expr-numeric-literals-prefixed", "{{ 0x10 }}|{{ 0o17 }}|{{ 0b11 }}"),

    # --- Numbers ---------------------------------------------------------------------------------
    S("num-division", "{{ 7 / 2 }}|{{ 10 / 2 }}|{{ 1 / 3 }}|{{ 2 / 3 }}|{{ -1 / 4 }}"),
    S("num-floordiv", "{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7.0 // 2 }}|{{ -7.5 // 2 }}|{{ 7 // -2 }}"),
    S("num-modulo", "{{ -7 % 3 }}|{{ 7 % -3 }}|{{ 7.5 % 2 }}|{{ -1 % 5 }}|{{ 5 % 5 }}"),
    S("num-pow", "{{ 2 ** 10 }}|{{ 2 ** -1 }}|{{ 2 ** 0.5 }}|{{ 2.0 ** 2 }}|{{ (-8) ** 2 }}"),
    S("num-float-repr", "{{ 1.0 }}|{{ 0.1 + 0.2 }}|{{ 1e20 }}|{{ 1e-5 }}|{{ 1e16 }}|{{ 1e15 }}"
      "|{{ 0.0001 }}|{{ 3.0 * 1.1 }}|{{ 2.5e-3 }}|{{ 123456789.125 }}"),
    S("num-float-repr-more", "{{ 100.0 }}|{{ 1e3 }}|{{ 1.5e300 }}|{{ 12345678901234567.0 }}"
      "|{{ -0.0 }}|{{ 0.1 * 3 }}|{{ 1e22 }}|{{ 1e-7 }}"),
    S("num-int-float-mix", "{{ 3 * 1.0 }}|{{ 1 + 1.5 }}|{{ true + 1 }}|{{ 4 - 4.0 }}"),
    S("num-div-zero", "{{ 1 / 0 }}"),
    S("num-floordiv-zero", "{{ 1 // 0 }}"),
    S("num-mod-zero", "{{ 1 % 0 }}"),
    S("num-big-int", "{{ 2 ** 64 }}|{{ 9223372036854775807 + 1 }}"),
    S("num-str-times-int", "[{{ 'ab' * 3 }}][{{ 3 * 'ab' }}][{{ 'ab' * 0 }}][{{ 'ab' * -1 }}]"
      "[{{ [1] * 3 }}]"),
    S("num-list-plus", "{{ [1] + [2, 'a'] }}|{{ (1, 2) + (3,) }}|{{ 'a' + 'b' }}"),
    S("num-list-plus-tuple", "{{ [1] + (2,) }}"),
    S("num-str-plus-int", "{{ 'a' + 1 }}"),

    # --- Comparisons and truthiness --------------------------------------------------------------
    S("cmp-mixed", "{{ 1 == 1.0 }}{{ 'a' == 1 }}{{ none == none }}{{ [1, 2] == [1, 2] }}"
      "{{ {'a': 1} == {'a': 1} }}{{ (1, 2) == [1, 2] }}{{ true == 1 }}{{ '1' == 1 }}"
      "{{ 0 == false }}{{ 1.5 != 1 }}"),
    S("cmp-ordering", "{{ 'a' < 'b' }}{{ 'B' < 'a' }}{{ [1, 2] < [1, 3] }}{{ 2 >= 2.0 }}"
      "{{ 'abc' > 'ab' }}{{ true > false }}"),
    S("cmp-str-lt-int", "{{ 'a' < 1 }}"),
    S("cmp-none-lt-int", "{{ none < 1 }}"),
    S("truth-values", "{% for v in [[], {}, '', 0, 0.0, none, ' ', [0], '0', -0.0, 1, 'x', {'a': 0}]"
      " %}{{ 'T' if v else 'F' }}{% endfor %}{{ 'T' if nope else 'F' }}"),
    S("truth-not", "{{ not [] }}{{ not 'a' }}{{ not nope }}{{ not none }}"),

    # --- Printing values -------------------------------------------------------------------------
    S("print-list", "{{ [1, 'a', none, true, false, 1.5] }}"),
    S("print-tuples", "{{ (1,) }}|{{ (1, 2) }}|{{ () }}|{{ [] }}|{{ {} }}|{{ [[]] }}|{{ ((1,),) }}"),
    S("print-nested-dict", "{{ {'a': [1, {'b': none}], 'c': 'd'} }}"),
    S("print-floats-in-list", "{{ [1.0, 0.5, 1e20, 1e-5, 2.50] }}"),
    S("print-repr-single-quote", "{{ [\"it's\"] }}{{ [s] }}", s="don't"),
    S("print-repr-double-quote", "{{ ['a\"b'] }}"),
    S("print-repr-both-quotes", "{{ [s] }}", s="it's \"x\""),
    S("print-repr-backslash", "{{ [s] }}", s="a\\b\\\\c"),
    S("print-repr-controls", "{{ [s] }}", s="l1\nl2\tt\rr\x01\x1f\x7f"),
    S("print-repr-unicode", "{{ [s] }}", s="héllo 東京 😀"),
    S("print-repr-unprintable-unicode", "{{ [s] }}", s="a\u00a0b\u200bc\u2028d\xadz"),
    S("print-repr-dict-keys", "{{ d }}", d={"it's": "a\"b", "k": ["x'y\"z"]}),
    S("print-repr-from-json", "{{ d }}", d=NESTED),
    S("print-messages", "{{ messages }}", messages=MSGS[:3]),
    S("print-undefined", "[{{ nope }}]"),
    S("print-string-plain", "{{ s }}", s="it's \"x\" \\ \n\t東京"),

    # --- Slicing ---------------------------------------------------------------------------------
    S("slice-list", "{{ x[1:] }}{{ x[:-1] }}{{ x[::-1] }}{{ x[::2] }}{{ x[-3:] }}{{ x[5:2:-1] }}",
      x=[0, 1, 2, 3, 4, 5, 6]),
    S("slice-string-unicode", "{{ s[1:3] }}|{{ s[::-1] }}|{{ s[1] }}|{{ s[-1] }}|{{ s[:2] }}",
      s="héllo 日本😀"),
    S("slice-out-of-range", "[{{ 'abc'[5:] }}][{{ [1, 2][5:] }}][{{ 'abc'[-10:] }}]"
      "[{{ [1, 2][5] }}][{{ 'abc'[10] }}][{{ [1, 2][-5] }}]"),
    S("slice-zero-step", "{{ [1, 2, 3][::0] }}"),
    S("slice-messages", "{{ messages[1:]|length }}{{ messages[-1].role }}{{ messages[0]['role'] }}",
      messages=MSGS),
    S("slice-negative-index", "{{ [1, 2, 3][-1] }}{{ 'abc'[-2] }}"),

    # --- tojson ----------------------------------------------------------------------------------
    S("tojson-basic", "{{ d|tojson }}", d=NESTED),
    S("tojson-indent-int", "{{ d|tojson(indent=2) }}", d=NESTED),
    S("tojson-indent-zero", "{{ [1, [2]]|tojson(indent=0) }}"),
    S("tojson-indent-string", "{{ {'a': [1]}|tojson(indent='\t') }}"),
    S("tojson-indent-empty-containers", "{{ {'a': [], 'b': {}}|tojson(indent=2) }}"),
    S("tojson-separators", "{{ d|tojson(separators=(',', ':')) }}|"
      "{{ d|tojson(indent=1, separators=[', ', ' = ']) }}", d={"a": [1, 2], "b": "c"}),
    S("tojson-sort-keys", "{{ d|tojson(sort_keys=true) }}", d=NESTED),
    S("tojson-ensure-ascii", "{{ s|tojson(ensure_ascii=true) }}|{{ s|tojson }}", s="é 東 😀"),
    S("tojson-positional-ensure-ascii", "{{ 'é'|tojson(true) }}"),
    S("tojson-floats", "{{ [1.0, 0.5, 1e20, 1e-7, 2.5e-3, 100.0, -0.0]|tojson }}"),
    S("tojson-floats-from-json", "{{ x|tojson }}", x=[1.0, 0.1, 3.0e0, 1.5e-7, 12345.678]),
    S("tojson-control-chars", "{{ s|tojson }}", s="\x00\x01\x1f\x7f\b\f\n\r\t\"\\/é\u2028"),
    S("tojson-script", "{{ '</script><b>&\\'x'|tojson }}"),
    S("tojson-scalars", "{{ none|tojson }}{{ true|tojson }}{{ false|tojson }}{{ 3|tojson }}"
      "{{ 'a'|tojson }}{{ []|tojson }}{{ {}|tojson }}"),
    S("tojson-tuple", "{{ (1, 'a')|tojson }}"),
    S("tojson-int-keys", "{{ {1: 'a', 2: 'b'}|tojson }}"),
    S("tojson-undefined", "{{ nope|tojson }}"),
    S("tojson-tool-args", "{% for m in messages %}{% for tc in m.tool_calls or [] %}"
      "{{ tc.function.arguments|tojson }}{% endfor %}{% endfor %}", messages=MSGS),
    S("tojson-key-order", "{{ d|tojson }}{% for k in d %}{{ k }}{% endfor %}",
      d={"z": 0, "b": 1, "a": {"y": 1, "x": 2}}),
    S("tojson-big-int", "{{ x|tojson }}|{{ x }}", x=12345678901234567890),

    # --- String filters --------------------------------------------------------------------------
    S("f-trim", "[{{ '  a b  '|trim }}][{{ 'xxaxx'|trim('x') }}][{{ 123|trim }}]"
      "[{{ '\n\t a \r\n'|trim }}]"),
    S("f-trim-unicode-space", "[{{ s|trim }}]", s="\u3000\u00a0a\u2003"),
    S("f-length", "{{ 'héllo😀'|length }}{{ [1, 2]|length }}{{ {'a': 1}|length }}"
      "{{ ''|length }}{{ 'ab'|count }}"),
    S("f-length-none", "{{ none|length }}"),
    S("f-length-generator", "{{ messages|selectattr('role', 'eq', 'user')|length }}",
      messages=MSGS),
    S("f-string", "{{ 123|string }}{{ none|string }}{{ [1, 'a']|string }}{{ true|string }}"
      "{{ 1.0|string }}"),
    S("f-default", "[{{ nope|default('x') }}][{{ none|default('x') }}][{{ none|default('x', true) }}]"
      "[{{ ''|default('x') }}][{{ ''|default('x', true) }}][{{ 0|d('x', true) }}]"
      "[{{ false|default('x') }}][{{ nope|d }}]"),
    S("f-join", "{{ [1, 2]|join(', ') }}|{{ users|join(',', attribute='name') }}|{{ 'abc'|join('-') }}"
      "|{{ []|join }}|{{ [1, 'a', none]|join }}", users=USERS),
    S("f-items", "{{ d|items|list }}|{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}",
      d={"b": 1, "a": 2}),
    S("f-items-undefined", "[{% for k, v in nope|items %}{{ k }}{% endfor %}]"),
    S("f-items-none", "{{ none|items|list }}"),
    S("f-upper-lower", "{{ 'hÉllo'|upper }}{{ 'HÉLLO'|lower }}{{ 1|upper }}{{ none|upper }}"),
    S("f-upper-sharp-s", "{{ 'straße'|upper }}"),
    S("f-title", "{{ 'hello-world foo(bar)'|title }}|{{ \"it's o'neil mc-donald\"|title }}"
      "|{{ 'hELLO  wORLD'|title }}|{{ 'a_b c.d [e {f <g'|title }}"),
    S("f-capitalize", "{{ 'hELLO wORLD'|capitalize }}|{{ 'élan'|capitalize }}|{{ ''|capitalize }}"),
    S("f-replace", "{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'abc'|replace('', '-') }}"
      "|{{ 'a.b.c'|replace('.', '') }}|{{ 'x'|replace('x', 'yy') }}"),
    S("f-safe", "{{ '<a>'|safe }}|{{ ('a'|safe) + '<b>' }}|{{ '<b>' ~ ('a'|safe) }}"),
    S("f-escape", "{{ '<x>'|e }}|{{ '<x>'|escape|safe }}|{{ 'a\"b\\'c&'|e }}|{{ '<x>'|e ~ '<y>' }}"
      "|{{ '<x>'|e + '<y>' }}|{{ ('<'|e)|length }}"),
    S("f-escape-markup-ops", "{{ ('a'|safe)|upper }}|{{ ('%s'|safe)|format('<') }}"
      "|{{ ('<'|e) * 2 }}"),
    S("f-center", "[{{ 'ab'|center(6) }}][{{ 'abc'|center(6) }}][{{ 'abcdef'|center(2) }}]"),
    S("f-wordcount", "{{ 'hello big  world'|wordcount }}{{ \"it's a dog-eat-dog\"|wordcount }}"
      "{{ ''|wordcount }}"),
    S("f-format", "{{ '%s-%d'|format('a', 3) }}|{{ '%05.1f'|format(3.14159) }}|{{ '%x'|format(255) }}"
      "|{{ '%s'|format([1, 'a']) }}|{{ '%(a)s!'|format(a=1) }}|{{ '%%'|format() }}"),
    S("f-format-percent-c", "{{ '%c'|format(65) }}{{ '%c'|format('z') }}"),
    S("f-format-too-few", "{{ '%s %s'|format('a') }}"),
    S("f-reverse", "{{ 'abc😀'|reverse }}|{{ [1, 2, 3]|reverse|list }}|{{ [1, 2]|reverse|join }}"),
    S("f-indent", "[{{ 'a\nb\n\nc'|indent(2) }}][{{ 'a\nb'|indent(2, true) }}]"
      "[{{ 'a\n\nb'|indent(2, blank=true) }}][{{ 'a\nb'|indent('--') }}][{{ 'a\n'|indent }}]"),
    S("f-indent-whitespace-line", "[{{ 'a\n  \nb'|indent(1) }}]"),

    # --- Number filters --------------------------------------------------------------------------
    S("f-int", "{{ '12'|int }} {{ ' 7 '|int }} {{ '3.9'|int }} {{ 'abc'|int }} {{ 'abc'|int(5) }}"
      " {{ 3.9|int }} {{ true|int }} {{ none|int }} {{ ''|int }} {{ '-4'|int }}"),
    S("f-int-base-prefix", "{{ '0b101'|int(0, 2) }} {{ '0o17'|int(base=8) }}"),
    S("f-int-big-float", "{{ 1e20|int }}"),
    S("f-int-base", "{{ '0x1A'|int(base=16) }} {{ 'ff'|int(0, 16) }} {{ '1e3'|int }}"
      " {{ '1_000'|int }} {{ '010'|int }}"),
    S("f-float", "{{ '3.5'|float }} {{ 'x'|float }} {{ 3|float }} {{ '1e3'|float }}"
      " {{ ' 2.5 '|float }} {{ 'x'|float(1.5) }} {{ '-0'|float }} {{ none|float }}"),
    S("f-round", "{{ 2.5|round }} {{ 3.5|round }} {{ -2.5|round }} {{ 2.675|round(2) }}"
      " {{ 3.14159|round(2) }} {{ 0.5|round }} {{ 1.25|round(1) }}"),
    S("f-round-int", "{{ 5|round }} {{ 5|round(2) }} {{ x|round }}", x=7),
    S("f-round-methods", "{{ 2.1|round(method='ceil') }} {{ 2.9|round(0, 'floor') }}"
      " {{ 7|round(method='ceil') }} {{ 2.345|round(2, 'floor') }} {{ -2.5|round(method='ceil') }}"),
    S("f-abs", "{{ -3|abs }} {{ (-1.5)|abs }} {{ 0|abs }} {{ x|abs }}", x=-7),
    S("f-sum", "{{ [1, 2, 3]|sum }} {{ [1, 2]|sum(start=10) }} {{ users|sum(attribute='age') }}"
      " {{ [0.1, 0.2]|sum }} {{ []|sum }}", users=USERS),
    S("f-min-max", "{{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ ['b', 'A', 'C']|max }}"
      " {{ ['b', 'A', 'C']|max(case_sensitive=true) }} {{ users|max(attribute='age') }}"
      " [{{ []|min }}] {{ 'bca'|min }}", users=USERS),

    # --- List filters ----------------------------------------------------------------------------
    S("f-first-last", "{{ [1, 2]|first }}{{ 'abc'|last }}[{{ []|first }}][{{ []|last }}]"
      "{{ {'k': 1}|first }}{{ ([]|first) is defined }}"),
    S("f-first-generator", "{{ (messages|selectattr('role', 'eq', 'user')|first).content|trim }}",
      messages=MSGS),
    S("f-last-generator", "{{ (messages|selectattr('role', 'eq', 'user')|last).role }}",
      messages=MSGS),
    S("f-last-list", "{{ (messages|selectattr('role', 'eq', 'user')|list|last).content[0].text }}",
      messages=MSGS),
    S("f-list", "{{ 'abc'|list }}{{ {'a': 1, 'b': 2}|list }}{{ range(3)|list }}{{ (1, 2)|list }}"),
    S("f-unique", "{{ [1, 2, 1, 'a', 'A', 'b']|unique|list }}"
      "{{ ['a', 'A']|unique(case_sensitive=true)|list }}"
      "{{ users|unique(attribute='role')|map(attribute='name')|list }}", users=USERS),
    S("f-batch", "{{ [1, 2, 3, 4, 5]|batch(2)|list }}|{{ [1, 2, 3]|batch(2, 'x')|list }}"),
    S("f-slice", "{{ [1, 2, 3, 4, 5]|slice(2)|list }}"),
    S("f-sort", "{{ [3, 1, 2]|sort }}{{ ['b', 'A', 'c']|sort }}"
      "{{ ['b', 'A', 'c']|sort(case_sensitive=true) }}{{ [1, 3, 2]|sort(reverse=true) }}"),
    S("f-sort-attribute", "{{ users|sort(attribute='age')|map(attribute='name')|join(',') }}|"
      "{{ users|sort(attribute='role,name')|map(attribute='name')|join(',') }}|"
      "{{ users|sort(attribute='name', reverse=true)|map(attribute='name')|join(',') }}",
      users=USERS),
    S("f-sort-mixed-types", "{{ [1, 'a']|sort }}"),
    S("f-dictsort", "{{ d|dictsort }}|{{ d|dictsort(true) }}|{{ d|dictsort(by='value') }}"
      "|{{ d|dictsort(reverse=true) }}", d={"b": 1, "A": 3, "c": 0}),
    S("f-dictsort-loop", "{% for k, v in d|dictsort %}{{ k }}={{ v }};{% endfor %}",
      d={"b": 1, "A": 3, "c": 0}),
    S("f-selectattr", "{{ users|selectattr('active')|map(attribute='name')|join(',') }}|"
      "{{ users|selectattr('name', 'equalto', 'Bob')|list|length }}|"
      "{{ users|selectattr('age', 'defined')|list|length }}|"
      "{{ users|selectattr('active', 'none')|map(attribute='name')|join }}|"
      "{{ users|selectattr('nosuch')|list }}", users=USERS_GAPPY),
    S("f-selectattr-compare", "{{ users|selectattr('age', '>', 30)|map(attribute='name')"
      "|join(',') }}|{{ users|selectattr('age', 'ge', 31)|list|length }}", users=USERS),
    S("f-selectattr-compare-missing", "{{ users|selectattr('age', '>', 30)|list }}",
      users=USERS_GAPPY),
    S("f-rejectattr", "{{ users|rejectattr('active')|map(attribute='name')|join(',') }}|"
      "{{ messages|rejectattr('content', 'none')|map(attribute='role')|join(',') }}|"
      "{{ messages|rejectattr('content', 'string')|list|length }}",
      users=USERS_GAPPY, messages=MSGS),
    S("f-selectattr-none", "{{ none|selectattr('x')|list }}"),
    S("f-selectattr-in", "{{ messages|selectattr('role', 'in', ['user', 'system'])"
      "|map(attribute='role')|join(',') }}", messages=MSGS),
    S("f-map", "{{ ['a', 'b']|map('upper')|join }}|{{ users|map(attribute='name')|join(',') }}|"
      "{{ users_g|map(attribute='age', default='?')|join(',') }}|{{ ['1', '2']|map('int')|sum }}|"
      "{{ [1, 2]|map('string')|join('-') }}", users=USERS, users_g=USERS_GAPPY),
    S("f-map-nested-attribute", "{{ messages|selectattr('tool_calls', 'defined')"
      "|map(attribute='tool_calls.0.function.name')|list }}|{{ [[1, 2], [3]]|map(attribute='0')"
      "|list }}", messages=MSGS),
    S("f-map-filter-args", "{{ ['a b', 'c']|map('replace', ' ', '_')|list }}"
      "{{ [none, 1]|map('default', 'z', true)|list }}"),
    S("f-select-reject", "{{ [1, 2, 3, 4]|select('odd')|list }}{{ [1, 2, 3, 4]|select('gt', 2)|list }}"
      "{{ range(7)|select('divisibleby', 3)|list }}{{ [none, 1, 0, '']|reject('none')|list }}"
      "{{ [0, 1, '', 'a']|select|list }}{{ [1, 2, 3]|select('in', [1, 3])|list }}"
      "{{ [1, 'a', 2]|select('string')|list }}{{ [1, 2, 3]|reject('equalto', 2)|list }}"),
    S("f-groupby", "{% for g in users|groupby('role') %}{{ g.grouper }}:"
      "{{ g.list|map(attribute='name')|join(',') }};{% endfor %}|"
      "{% for role, items in users|groupby('role') %}{{ role }}{{ items|length }}{% endfor %}",
      users=USERS),
    S("f-groupby-attributes", "{% for g in users|groupby('role') %}{{ g.grouper }}:"
      "{{ g.list|length }}{{ g[0] }};{% endfor %}", users=USERS),
    S("f-groupby-print", "{{ d|groupby('a') }}", d=[{"a": 2, "b": 1}, {"a": 1}, {"a": 2}]),
    S("f-count-dict-list", "{{ messages|count }}{{ messages[4].content|count }}", messages=MSGS),
    S("f-unknown-filter", "{{ 'a'|nosuchfilter }}"),
    S("f-unknown-filter-untaken-branch", "{% if false %}{{ 'a'|nosuchfilter }}{% endif %}ok"),
    S("f-unknown-filter-taken-branch", "{% if true %}{{ 'a'|nosuchfilter }}{% endif %}ok"),

    # --- Tests -----------------------------------------------------------------------------------
    S("test-defined", "{{ x is defined }}{{ nope is defined }}{{ nope is undefined }}"
      "{{ none is defined }}{{ x is not defined }}", x=1),
    S("test-none", "{{ none is none }}{{ x is none }}{{ 0 is none }}{{ nope is none }}"
      "{{ x is not none }}", x=None),
    S("test-types", "{{ 'a' is string }}{{ 1 is string }}{{ {} is mapping }}{{ [] is mapping }}"
      "{{ [] is iterable }}{{ 'a' is iterable }}{{ 1 is iterable }}{{ [] is sequence }}"
      "{{ 'a' is sequence }}{{ {} is sequence }}{{ none is string }}{{ ('a'|safe) is string }}"),
    S("test-numbers", "{{ 1 is number }}{{ 1.5 is number }}{{ true is number }}{{ '1' is number }}"
      "{{ 1 is integer }}{{ true is integer }}{{ 1.0 is integer }}{{ 1.0 is float }}"
      "{{ 1 is float }}{{ true is boolean }}{{ 1 is boolean }}{{ none is number }}"),
    S("test-json-numbers", "{{ i is integer }}{{ f is float }}{{ f is integer }}{{ b is boolean }}"
      "{{ b is number }}{{ f }}", i=3, f=1.0, b=False),
    S("test-true-false", "{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}"
      "{{ none is false }}"),
    S("test-even-odd", "{{ 3 is even }}{{ 4 is even }}{{ -3 is odd }}{{ 0 is even }}"),
    S("test-divisibleby", "{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}"
      "{{ 10 is divisibleby(5) }}"),
    S("test-divisibleby-zero", "{{ 1 is divisibleby 0 }}"),
    S("test-comparisons", "{{ 1 is equalto 1 }}{{ 1 is eq 1.0 }}{{ 'a' is eq('a') }}"
      "{{ 1 is ne 2 }}{{ 1 is lt 2 }}{{ 2 is gt 1 }}{{ 2 is le 2 }}{{ 2 is ge 3 }}"
      "{{ 2 is lessthan 3 }}{{ 2 is greaterthan 3 }}{{ 'a' is eq 'b' }}"),
    S("test-operator-name-syntax", "{{ 'a' is == 'a' }}"),
    S("test-in", "{{ 2 is in [1, 2] }}{{ 'b' is in 'abc' }}{{ 'k' is in {'k': 1} }}"
      "{{ 3 is not in [1] }}"),
    S("test-sameas", "{{ none is sameas none }}{{ x is sameas none }}{{ true is sameas true }}"
      "{{ 1 is sameas true }}{{ x is sameas false }}", x=None),
    S("test-lower-upper", "{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ 'aB' is lower }}"
      "{{ '1' is lower }}{{ 'A1' is upper }}"),
    S("test-callable", "{{ raise_exception is callable }}{{ 'a' is callable }}{{ range is callable }}"
      "{% macro m() %}{% endmacro %}{{ m is callable }}"),
    S("test-not-precedence", "{{ not x is defined }}{{ not nope is defined }}"
      "{{ x is defined and x > 0 }}", x=1),
    S("test-arg-without-parens", "{{ 6 is divisibleby 3 and true }}{{ 'a' is eq 'a' }}"
      "{{ x is in [1] }}", x=1),
    S("test-unknown-test", "{{ 1 is nosuchtest }}"),
    S("test-unknown-test-untaken-branch", "{% if false %}{{ 1 is nosuchtest }}{% endif %}ok"),
    S("test-content-types", "{% for m in messages %}{{ m.content is string }}"
      "{{ m.content is none }}{{ m.content is iterable }}{{ m.content is sequence }};"
      "{% endfor %}", messages=MSGS),

    # --- String methods --------------------------------------------------------------------------
    S("m-strip", "[{{ ' x '.strip() }}][{{ 'xxaxx'.strip('x') }}][{{ '  x'.lstrip() }}]"
      "[{{ 'x..'.rstrip('.') }}][{{ 'abcba'.strip('ab') }}][{{ '\n\tx\n'.strip() }}]"),
    S("m-strip-chained-think", "{{ c.split('</think>')[-1].lstrip('\n') }}",
      c="<think>\nhm\n</think>\n\nAnswer"),
    S("m-split", "{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a  b'.split(' ') }}"
      "{{ 'a=b=c'.split('=', 1) }}{{ 'a b c'.split(none, 1) }}{{ ''.split(',') }}{{ ''.split() }}"),
    S("m-rsplit", "{{ 'a=b=c'.rsplit('=', 1) }}{{ 'a b  c'.rsplit() }}{{ 'a.b.c'.rsplit('.') }}"),
    S("m-split-empty-sep", "{{ 'abc'.split('') }}"),
    S("m-splitlines", "{{ 'a\nb\n'.splitlines() }}{{ 'a\r\nb'.splitlines() }}"
      "{{ 'a\n\nb'.splitlines() }}{{ ''.splitlines() }}"),
    S("m-splitlines-data", "{{ s.splitlines() }}", s="a\r\nb\rc\x0bd\u2028e"),
    S("m-startswith", "{{ 'abc'.startswith('ab') }}{{ 'abc'.startswith(('x', 'ab')) }}"
      "{{ 'abc'.endswith('c') }}{{ 'abc'.endswith(('x',)) }}{{ 'abc'.startswith('') }}"
      "{{ 'abc'.startswith('b', 1) }}"),
    S("m-replace-find-count", "{{ 'aXbX'.replace('X', '-') }}{{ 'aXbX'.replace('X', '-', 1) }}"
      "{{ 'abc'.find('z') }}{{ 'abc'.find('c') }}{{ 'banana'.count('an') }}{{ 'abc'.index('c') }}"),
    S("m-case", "{{ 'hello world'.title() }}|{{ \"it's\".title() }}|{{ 'HELLO'.lower() }}"
      "|{{ 'hello WORLD'.capitalize() }}|{{ 'a'.upper() }}|{{ 'aB'.swapcase() }}"),
    S("m-is-methods", "{{ '12'.isdigit() }}{{ 'a1'.isalnum() }}{{ ' '.isspace() }}"
      "{{ 'ab'.isalpha() }}{{ 'Ab'.islower() }}"),
    S("m-format", "{{ '{} {}'.format(1, 'a') }}|{{ '{1}{0}'.format('a', 'b') }}"
      "|{{ '{name}!'.format(name='x') }}|{{ '{0[1]}'.format([5, 6]) }}|{{ '{:>5}'.format('a') }}"
      "|{{ '{:.2f}'.format(3.14159) }}|{{ '{{}}'.format() }}|{{ '{:<4}|'.format('ab') }}"
      "|{{ '{:03d}'.format(7) }}"),
    S("m-format-dict-key", "{{ '{0[a]}'.format({'a': 'A'}) }}"),
    S("m-format-dunder", "{{ '{0.__class__}'.format('a') }}"),
    S("m-join", "{{ ', '.join(['a', 'b']) }}|{{ ''.join('xyz') }}"),
    S("m-join-non-string", "{{ ', '.join([1, 2]) }}"),
    S("m-pad", "[{{ '7'.zfill(3) }}][{{ '-7'.zfill(4) }}][{{ 'ab'.center(6, '*') }}]"
      "[{{ 'ab'.ljust(5, '.') }}][{{ 'ab'.rjust(5) }}][{{ 'abc'.center(6) }}]"),
    S("m-string-method-on-data", "{{ messages[1].content.strip().upper() }}", messages=MSGS),

    # --- dict and list methods -------------------------------------------------------------------
    S("m-dict-get", "{{ d.get('a') }}|{{ d.get('z') }}|{{ d.get('z', 'dflt') }}|{{ d.get('n', 1) }}",
      d={"a": 1, "n": None}),
    S("m-dict-items-keys-values", "{{ d.items()|list }}{{ d.keys()|list }}{{ d.values()|list }}"
      "{{ 'a' in d.keys() }}{{ d.items()|length }}", d={"b": 1, "a": [2]}),
    S("m-list-index-count", "{{ [1, 2, 3].index(2) }}{{ [1, 1, 2].count(1) }}"),
    S("m-list-append", "{% set x = [1] %}{% set _ = x.append(2) %}{{ x }}"),
    S("m-list-append-inline", "{{ [1].append(2) }}"),
    S("m-dict-update", "{{ {}.update({}) }}"),
    S("m-list-pop", "{{ x.pop() }}", x=[1, 2]),
    S("m-dict-pop", "{{ d.pop('a') }}", d={"a": 1}),
    S("m-dict-setdefault", "{{ d.setdefault('a', 1) }}", d={}),
    S("m-list-sort-method", "{% set x = [2, 1] %}{{ x.sort() }}"),
    S("m-dunder-class", "{{ ''.__class__ }}"),
    S("m-dunder-mro", "{{ ''.__class__.__mro__ }}"),
    S("m-dunder-globals", "{{ raise_exception.__globals__ }}"),
    S("m-underscore-attr", "{{ d._private }}", d={"_private": 1}),

    # --- Globals ---------------------------------------------------------------------------------
    S("g-range", "{{ range(3)|list }}{{ range(1, 4)|list }}{{ range(0, 10, 3)|list }}"
      "{{ range(5, 0, -2)|list }}{{ range(0)|list }}{{ range(3, 1)|list }}"),
    S("g-range-ops", "{{ range(3)|length }}{{ range(3)[1] }}{{ range(10)[2:5]|list }}"
      "{{ range(100000)|length }}"),
    S("g-range-too-big", "{{ range(100001)|length }}"),
    S("g-range-too-big-step", "{{ range(0, 200002, 2)|length }}"),
    S("g-range-zero-step", "{{ range(1, 2, 0)|list }}"),
    S("g-dict", "{{ dict(a=1, b='x') }}|{{ dict(a=1)|tojson }}|{{ dict() }}"),
    S("g-namespace-set", "{% set ns = namespace(a=1) %}{% set ns.a = ns.a + 1 %}"
      "{% set ns.b = 'new' %}{{ ns.a }}{{ ns.b }}"),
    S("g-raise-exception", "before{{ raise_exception('Conversation roles must alternate') }}"),
    S("g-raise-exception-unicode", "{{ raise_exception('Rôle «inconnu» 😀: ' ~ 3) }}"),
    S("g-raise-in-loop", "{% for m in messages %}{{ m.role }}{% if m.role == 'tool' %}"
      "{{ raise_exception('no tools: ' ~ loop.index) }}{% endif %}{% endfor %}", messages=MSGS),
    S("g-raise-in-macro", "{% macro check(x) %}{% if x > 1 %}{{ raise_exception('too big') }}"
      "{% endif %}{{ x }}{% endmacro %}{{ check(1) }}{{ check(2) }}"),
    S("g-raise-in-untaken-branch", "{% if false %}{{ raise_exception('never') }}{% endif %}ok"),
    S("g-strftime-now", "{{ strftime_now('%Y-%m-%d %H:%M') }}|{{ strftime_now('%d %B %Y') }}"
      "|{{ strftime_now('%A %a %b %j %H:%M:%S %p %y') }}|{{ strftime_now('%%') }}"),
    S("g-strftime-now-set", "{% set today = strftime_now('%d %b %Y') %}Today: {{ today }}"),
    S("g-joiner", "{% set j = joiner(' | ') %}{% for x in [1, 2, 3] %}{{ j() }}{{ x }}{% endfor %}"
      "{% set k = joiner() %}[{{ k() }}{{ k() }}{{ k() }}]"),
    S("g-cycler", "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}"
      "{{ c.current }}"),
    S("g-include-without-loader", "{% include 'other.jinja' %}"),

    # --- Undefined -------------------------------------------------------------------------------
    S("undef-attr-raises", "{{ nope.bar }}"),
    S("undef-item-raises", "{{ nope['bar'] }}"),
    S("undef-attr-in-if-raises", "{% if nope.bar %}x{% endif %}"),
    S("undef-attr-defined-test-raises", "{{ nope.bar is defined }}"),
    S("undef-length", "{{ nope|length }}"),
    S("undef-default", "{{ nope|default('x') }}"),
    S("undef-loop", "[{% for x in nope %}{{ x }}{% endfor %}]"),
    S("undef-concat", "{{ nope ~ 'a' }}"),
    S("undef-plus-raises", "{{ nope + 1 }}"),
    S("undef-times-raises", "{{ nope * 2 }}"),
    S("undef-filters", "[{{ nope|string }}][{{ nope|upper }}][{{ nope|list }}][{{ nope|join }}]"
      "[{{ nope|first }}][{{ nope|trim }}][{{ nope|last }}][{{ nope|lower }}]"),
    S("undef-int-filter-raises", "{{ nope|int }}"),
    S("undef-compare", "{{ nope == none }}{{ nope in [1] }}{{ 1 in nope }}{{ not nope }}"
      "{{ nope != 1 }}"),
    S("undef-index-short-list", "[{{ messages[5] }}]{{ messages[5] is defined }}", messages=MSGS),
    S("undef-index-then-attr", "{{ messages[5].content }}", messages=MSGS),
    S("undef-missing-key", "[{{ messages[0].missing }}][{{ messages[0]['missing'] }}]",
      messages=MSGS),
    S("undef-missing-key-deeper", "{{ messages[0].missing.deeper }}", messages=MSGS),
    S("undef-none-attr", "[{{ none.x }}][{{ none[0] }}]"),
    S("undef-none-attr-deeper", "{{ none.x.y }}"),
    S("undef-int-attr", "[{{ (5).x }}][{{ 'abc'.nosuch }}]"),
    S("undef-dict-missing-item", "[{{ {'a': 1}['b'] }}][{{ {'a': 1}.b }}]"),
    S("undef-tools-patterns", "{% if tools is defined and tools %}T{% endif %}"
      "{% if tools is not none %}N{% endif %}{{ tools|default([])|length }}"),
    S("undef-none-tools-patterns", "{% if tools is defined and tools %}T{% endif %}"
      "{% if tools is not none %}N{% endif %}{{ (tools or [])|length }}", tools=None),

    # --- Errors ----------------------------------------------------------------------------------
    S("err-unclosed-if", "{% if true %}x"),
    S("err-unclosed-expr", "{{ x "),
    S("err-unclosed-comment", "a {# b"),
    S("err-unclosed-string", "{{ 'abc }}"),
    S("err-unknown-tag", "{% foo %}"),
    S("err-endfor-without-for", "{% endfor %}"),
    S("err-stray-else", "{% else %}"),
    S("err-mismatched-end", "{% if true %}{% endfor %}"),
    S("err-empty-expr", "{{ }}"),
    S("err-dangling-operator", "{{ 1 + }}"),
    S("err-for-missing-iterable", "{% for x in %}{% endfor %}"),
    S("err-unclosed-macro", "{% macro m() %}x"),
    S("err-break-outside-loop", "{% break %}"),
    S("err-continue-in-macro-in-loop", "{% for i in [1] %}{% macro m() %}{% continue %}"
      "{% endmacro %}{% endfor %}"),
    S("err-set-no-target", "{% set = 1 %}"),
    S("err-unclosed-paren", "{{ (1 + 2 }}"),
    S("err-unclosed-raw", "{% raw %}abc"),
    S("err-elif-after-else", "{% if a %}{% else %}{% elif b %}{% endif %}"),
    S("err-syntax-after-output", "ok {{ 1 }} {% if %}"),

    # --- Data from variables ---------------------------------------------------------------------
    S("data-content-none", "[{{ m.content }}][{{ m.content is none }}][{{ m.content|default('d') }}]"
      "[{{ m.content or 'empty' }}]", m=MSGS[2]),
    S("data-content-parts", "{% for m in messages %}{% if m.content is string %}{{ m.content }}"
      "{% elif m.content is not none %}{% for p in m.content %}{% if p.type == 'text' %}"
      "{{ p.text }}{% else %}<{{ p.type }}>{% endif %}{% endfor %}{% endif %}|{% endfor %}",
      messages=MSGS),
    S("data-key-order", "{% for k, v in d.items() %}{{ k }}{% endfor %}|{{ d }}",
      d={"zeta": 1, "alpha": {"z": 1, "a": 2}, "mid": None}),
    S("data-numbers", "{{ i }} {{ f }} {{ f2 }} {{ f3 }} {{ neg }} {{ b }} {{ n }} {{ f4 }}",
      i=3, f=1.0, f2=0.1, f3=1e20, neg=-0.0, b=True, n=None, f4=1.5e-7),
    S("data-arith", "{{ i + f }} {{ i / 2 }} {{ f * 2 }} {{ i // 2 }}", i=3, f=1.0),
    S("data-string-crlf-kept", "{{ s }}|{{ s|length }}", s="a\r\nb\rc"),
    S("data-unicode-length", "{{ s|length }} {{ s|upper }} {{ s[2] }}", s="e\u0301🇫🇷x"),
    S("data-bos-eos", "{{ bos_token }}{% for m in messages %}{{ m.role }}{{ eos_token }}"
      "{% endfor %}|{{ bos_token|length }}", bos="<s>", eos="</s>", messages=MSGS[:2]),
    S("data-add-generation-prompt-default", "[{{ add_generation_prompt }}]"),
    S("data-add-generation-prompt-false", "[{{ add_generation_prompt }}]"
      "{% if add_generation_prompt %}<gen>{% endif %}", add_generation_prompt=False),
    S("data-extra-kwarg", "{% if enable_thinking is defined and not enable_thinking %}"
      "<think></think>{% endif %}{{ enable_thinking }}", enable_thinking=False),
    S("data-nested-attribute-chain", "{{ messages[2].tool_calls[0].function.arguments.city }}"
      "{{ messages[2]['tool_calls'][0]['function']['name'] }}", messages=MSGS),
    S("data-arguments-string-or-mapping", "{% for m in messages %}{% for tc in m.tool_calls or [] %}"
      "{% if tc.function.arguments is string %}S{% else %}{% for k, v in "
      "tc.function.arguments.items() %}{{ k }}={{ v|tojson }} {% endfor %}{% endif %}{% endfor %}"
      "{% endfor %}", messages=MSGS),
    S("data-empty-messages", "{{ messages|length }}{{ messages }}{% for m in messages %}x"
      "{% else %}none{% endfor %}"),

    # --- Chat-template idioms --------------------------------------------------------------------
    S("idiom-alternation-check", "{% for m in messages %}{% if (m.role == 'user') != "
      "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
      "user/assistant/user/assistant/...') }}{% endif %}{{ m.role }} {% endfor %}",
      messages=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]),
    S("idiom-system-split", "{% if messages[0]['role'] == 'system' %}"
      "{% set system_message = messages[0]['content'] %}{% set loop_messages = messages[1:] %}"
      "{% else %}{% set loop_messages = messages %}{% endif %}[{{ system_message }}]"
      "{{ loop_messages|length }}", messages=MSGS),
    S("idiom-chatml", "{% for message in messages %}"
      "{{'<|im_start|>' + message['role'] + '\n' + (message['content'] if message['content'] "
      "is string else '') + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|im_start|>assistant\n' }}{% endif %}", messages=MSGS),
    S("idiom-last-user-index", "{% set ns = namespace(last=-1) %}{% for m in messages %}"
      "{% if m.role == 'user' %}{% set ns.last = loop.index0 %}{% endif %}{% endfor %}"
      "{{ ns.last }}", messages=MSGS),
    S("idiom-reverse-loop", "{% for m in messages[::-1] %}{{ m.role[0] }}{% endfor %}",
      messages=MSGS),
    S("idiom-tools-json-lines", "{% for t in tools %}{{ t|tojson }}\n{% endfor %}",
      tools=[{"type": "function", "function": {"name": "f", "parameters": {"a": 1.5}}}]),

    # --- More whitespace -------------------------------------------------------------------------
    S("ws-lstrip-at-template-start", "   {% if true %}x{% endif %}\n   {# c #}\ny"),
    S("ws-multiline-tag", "a\n{% if\n  true\n%}\nb{% endif\n%}\nc"),
    S("ws-multiline-expr", "{{\n  'x'\n}}\n"),
    S("ws-dash-then-trim", "{% set x = 1 -%}   \n\n  y"),
    S("ws-plus-lstrip-in-loop", "{% for i in [1, 2] %}\n  {%+ if true %}{{ i }}{% endif %}\n"
      "{% endfor %}"),
    S("ws-lstrip-not-after-expr-on-line", "  {{ 1 }}  {% if true %}x{% endif %}\n"),
    S("ws-trim-comment-end-of-file", "a\n{# c #}"),
    S("ws-trim-before-crlf-text", "{% if true %}\r\n\r\nx{% endif %}"),
    S("ws-comment-dash-plus", "a  {#- c +#}\nb"),
    S("ws-expr-dash-only-whitespace-between", "{{ 1 -}}  \n \t {{- 2 }}"),
    S("ws-raw-in-loop-lstrip", "{% for i in [1] %}\n    {% raw %}{{ i }}{% endraw %}\n{% endfor %}"),

    # --- More statements -------------------------------------------------------------------------
    S("loop-generator-length-last", "{% for m in messages|selectattr('role', 'eq', 'user') %}"
      "{{ loop.index }}/{{ loop.length }}{{ loop.last }}{{ loop.revindex }} {% endfor %}",
      messages=MSGS),
    S("loop-reverse-filter", "{% for x in [1, 2, 3]|reverse %}{{ x }}{{ loop.first }}"
      "{% endfor %}"),
    S("loop-dictsort-tuple", "{% for x in {'b': 1, 'a': 2}|dictsort %}{{ x }}{{ x[0] }}"
      "{% endfor %}"),
    S("loop-values", "{% for v in d.values() %}{{ v }},{% endfor %}", d={"b": 1, "a": 2}),
    S("loop-set-loop-var", "{% for x in [1, 2] %}{% set x = x * 10 %}{{ x }},{% endfor %}"),
    S("loop-cycle-no-args", "{% for x in [1] %}{{ loop.cycle() }}{% endfor %}"),
    S("loop-filter-uses-outer-var", "{% set lim = 2 %}{% for x in [1, 2, 3] if x <= lim %}"
      "{{ x }}{% endfor %}"),
    S("loop-else-with-filter-and-loop-var", "{% for x in [1, 2] if x > 1 %}{{ loop.index }}"
      "{{ loop.first }}{% else %}E{% endfor %}"),
    S("loop-nested-same-name-restores", "{% for x in [1, 2] %}{% for x in 'ab' %}{{ x }}"
      "{% endfor %}{{ x }}{% endfor %}"),
    S("loop-over-tuple-from-split", "{% for a in 'x,y'.split(',') %}{{ loop.index }}{{ a }}"
      "{% endfor %}"),
    S("loop-items-nested-unpack", "{% for k, (a, b) in [('x', (1, 2))] %}{{ k }}{{ a }}{{ b }}"
      "{% endfor %}"),
    S("macro-star-kwargs-call", "{% macro m(a, b) %}{{ a }}{{ b }}{% endmacro %}"
      "{{ m(*[1, 2]) }}{{ m(**{'a': 3, 'b': 4}) }}"),
    S("macro-default-list", "{% macro m(x=[]) %}{{ x|length }}{% endmacro %}{{ m() }}{{ m([1]) }}"),
    S("macro-caller-defined", "{% macro m() %}{{ caller is defined }}{% endmacro %}{{ m() }}"
      "{% call m() %}{% endcall %}"),
    S("macro-dash-body", "{% macro m(x) -%}\n  [{{ x }}]\n{%- endmacro %}{{ m(1) }}{{ m(2) }}"),
    S("macro-defined-after-use", "{{ m() }}{% macro m() %}x{% endmacro %}"),
    S("macro-shadowed-by-set", "{% macro m() %}x{% endmacro %}{% set m = 1 %}{{ m }}"),
    S("macro-infinite-recursion", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"),
    S("call-caller-kwargs", "{% macro w() %}{{ caller(n=2) }}{% endmacro %}"
      "{% call(n=1) w() %}{{ n }}{% endcall %}"),
    S("filterblock-indent", "{% filter indent(2) %}a\nb\n{% endfilter %}|"),
    S("set-block-in-loop", "{% for i in [1, 2] %}{% set s %}<{{ i }}>{% endset %}{{ s }}"
      "{% endfor %}[{{ s }}]"),
    S("with-nested", "{% with a = 1 %}{% with b = a + 1 %}{{ a }}{{ b }}{% endwith %}"
      "{% endwith %}"),
    S("block-without-extends", "a{% block b %}x{{ 1 }}{% endblock %}c"),
    S("err-extends", "{% extends 'base.jinja' %}"),
    S("err-import", "{% import 'm.jinja' as m %}x"),
    S("err-do-tag", "{% do [1].append(2) %}"),
    S("err-set-chained", "{% set x = y = 1 %}"),
    S("err-filter-missing-name", "{{ x | }}"),
    S("err-test-with-bad-args", "{{ 'a' is defined(1) }}"),
    S("f-unknown-filter-condexpr", "{{ 'a'|nosuch if false else 'b' }}"),
    S("f-unknown-filter-empty-loop", "{% for x in [] %}{{ x|nosuch }}{% endfor %}ok"),
    S("f-unknown-filter-else-branch", "{% if true %}ok{% else %}{{ 1|nosuch }}{% endif %}"),
    S("f-unknown-filter-elif-branch", "{% if true %}ok{% elif false %}{{ 1|nosuch }}{% endif %}"),
    S("f-unknown-filter-uncalled-macro", "{% macro m() %}{{ 1|nosuch }}{% endmacro %}ok"),
    S("f-unknown-filter-nested-if-in-loop", "{% for x in [1] %}{% if x > 5 %}{{ x|nosuch }}"
      "{% endif %}{% endfor %}ok"),

    # --- More expressions and numbers ------------------------------------------------------------
    S("expr-concat-types", "{{ 'abc' ~ none }}|{{ 1 ~ 2.0 }}|{{ true ~ '' }}|{{ [1, 'b'] ~ '' }}"
      "|{{ {'a': 1} ~ '' }}|{{ nope ~ nope }}"),
    S("expr-str-times-float", "{{ 'a' * 2.0 }}"),
    S("num-float-repr-shortest", "{{ 0.1 + 0.7 }}|{{ 1 / 7 }}|{{ 100 / 3 }}|{{ 1.1 * 1.1 }}"
      "|{{ 123456789 * 1000.0 }}|{{ 1e16 + 1 }}|{{ 0.000123 }}|{{ 1e100 }}|{{ 5e-324 }}"
      "|{{ 1.5e3 }}|{{ 10 / 3 * 3 }}|{{ 9007199254740993.0 }}"),
    S("num-float-inf", "{{ 1e308 * 10 }}|{{ -1e308 * 10 }}|{{ [1e308 * 10] }}"),
    S("num-tojson-inf", "{{ (1e308 * 10)|tojson }}"),
    S("num-float-mod-floordiv", "{{ 7 % 2.5 }}|{{ -7 % 2.5 }}|{{ 7.5 // -2 }}|{{ -0.0 + 0 }}"
      "|{{ 0 * -1.0 }}"),
    S("num-int-pow-big", "{{ 2 ** 62 }}|{{ 3 ** 39 }}|{{ -(2 ** 62) * 2 }}"),
    S("num-int-float-in", "{{ 1 in [1.0] }}{{ 1.0 in [1] }}{{ true in [1] }}{{ 0 in [false] }}"),
    S("cmp-unicode-order", "{{ 'é' > 'z' }}{{ 'Z' < 'a' }}{{ '10' < '9' }}{{ (1, 'b') < (1, 'c') }}"),
    S("cmp-undefined-lt", "{{ nope < 1 }}"),

    # --- More printing ---------------------------------------------------------------------------
    S("print-repr-escaped-quote", "{{ [s] }}", s="\\'"),
    S("print-repr-emoji-zwj", "{{ [s] }}", s="👨\u200d👩\u200d👧 ❤\ufe0f"),
    S("print-repr-nul", "{{ [s] }}", s="a\x00b\x1b[0m"),
    S("print-float-dict", "{{ {'a': 1.0, 'b': -0.0, 'c': 1e16} }}"),

    # --- More filters ----------------------------------------------------------------------------
    S("f-tojson-safe", "{{ messages[2].tool_calls[0].function.arguments|tojson|safe }}",
      messages=MSGS),
    S("f-tojson-indent-then-indent", "{{ d|tojson(indent=2)|indent(4) }}", d={"a": [1, {"b": 2}]}),
    S("f-tojson-markup", "{{ ('<a>'|safe)|tojson }}"),
    S("f-tojson-range", "{{ range(3)|tojson }}"),
    S("f-tojson-range-list", "{{ range(3)|list|tojson }}"),
    S("f-tojson-generator", "{{ messages|map(attribute='role')|tojson }}", messages=MSGS),
    S("f-tojson-indent-none", "{{ [1, 2]|tojson(indent=none) }}"),
    S("f-tojson-indent-separators", "{{ {'a': [1, 2]}|tojson(indent=2, separators=(',', ': ')) }}"),
    S("f-tojson-computed-floats", "{{ [1 / 3, 2 / 2, 0.1 + 0.2, 1e16, 2 ** 0.5]|tojson }}"),
    S("f-trim-none", "{{ none|trim }}|{{ [' a ']|trim }}"),
    S("f-upper-list", "{{ [1, 'a']|upper }}"),
    S("f-title-more", "{{ 'hello\tworld'|title }}|{{ 'x1y z'|title }}|{{ 'élan vital'|title }}"
      "|{{ '1abc'|capitalize }}"),
    S("f-replace-counts", "{{ 'aaa'|replace('a', 'b', 0) }}|{{ 'aaa'|replace('a', 'b', -1) }}"
      "|{{ 'aaa'|replace('aa', 'b') }}"),
    S("f-format-more", "{{ '%.3f'|format(1 / 3) }}|{{ '%5s|%-5s|'|format('a', 'b') }}"
      "|{{ '%d'|format(3.9) }}|{{ '%s'|format(none) }}|{{ '%i%%'|format(50) }}"
      "|{{ '%r'|format('x') }}|{{ '%s'|format(1.0) }}"),
    S("f-int-more", "{{ ' 3.7 '|int }} {{ '1,000'|int }} {{ '+5'|int }}"
      " {{ '-0'|int }} {{ '12abc'|int }} {{ 7.99999|int }}"),
    S("f-float-more", "{{ 'inf'|float }} {{ '-inf'|float }} {{ true|float }}"
      " {{ '.5'|float }} {{ '5.'|float }}"),
    S("f-round-negative-precision", "{{ 1234.5678|round(-2) }} {{ 1250|round(-2) }}"),
    S("f-round-more", "{{ 5|round(method='floor') }} {{ 2.5|round(0) }}"
      " {{ 0.125|round(2) }} {{ -0.5|round }} {{ 2.5|round(1) }}"
      " {{ 1.5|round }} {{ 1e20|round }}"),
    S("f-float-underscore", "{{ '1_0'|float }} {{ '1_000.5'|float }}"),
    S("f-round-bad-method", "{{ 2.5|round(method='up') }}"),
    S("f-abs-more", "{{ -0.0|abs }} {{ (-0.0)|abs }} {{ true|abs }}"),
    S("f-sum-strings", "{{ ['a', 'b']|sum }}"),
    S("f-min-max-dicts", "{{ [{'a': 1}, {'a': 2}]|max }}"),
    S("f-min-max-more", "{{ ['B', 'a']|min }} {{ [2, 1.5, 1]|max }} {{ 'héllo'|max }}"
      " {{ users|min(attribute='name') }}", users=USERS),
    S("f-first-last-more", "{{ 'héllo'|first }}{{ 'héllo'|last }}{{ (1, 2)|last }}"
      "{{ range(4)|last }}{{ {'a': 1, 'b': 2}|last }}"),
    S("f-unique-more", "{{ ['A', 'a', 'B']|unique|list }}{{ [1, 1.0, true, '1']|unique|list }}"),
    S("f-batch-more", "{{ [1, 2, 3]|batch(2, 0)|list }}|{{ []|batch(2)|list }}"
      "|{% for row in 'abcde'|batch(2) %}{{ row|join }};{% endfor %}"),
    S("f-sort-more", "{{ ['b', 'B', 'a', 'A']|sort }}{{ [2, 1.5, 1]|sort }}"
      "{{ [(2, 'a'), (1, 'b')]|sort }}{{ 'cba'|sort }}{{ {'b': 1, 'a': 2}|sort }}"),
    S("f-sort-none-mixed", "{{ [none, 1]|sort }}"),
    S("f-dictsort-values-mixed-case", "{{ {'x': 'b', 'y': 'A', 'z': 'a'}|dictsort(by='value') }}"
      "{{ {'x': 'b', 'y': 'A', 'z': 'a'}|dictsort(true, 'value') }}"),
    S("f-dictsort-list", "{{ [1, 2]|dictsort }}"),
    S("f-select-more", "{{ [1, none, 2]|select('defined')|list }}"
      "{{ [1, none, 2]|reject('sameas', none)|list }}{{ [1, 2.0, 3]|select('equalto', 2)|list }}"
      "{{ ['a', 'B']|select('upper')|list }}{{ [3, 4]|select('odd')|list }}"),
    S("f-select-unknown-test", "{{ [1]|select('nosuch')|list }}"),
    S("f-map-unknown-filter", "{{ [1]|map('nosuch')|list }}"),
    S("f-map-more", "{{ messages|map(attribute='content')|select('string')|join('/') }}|"
      "{{ [[1, 2], [3]]|map('length')|list }}|{{ ['a', 'b']|map('upper')|first }}|"
      "{{ [' x ', 'y ']|map('trim')|join(',') }}", messages=MSGS),
    S("f-groupby-case", "{% for k, items in d|groupby('r') %}{{ k }}{{ items|length }};"
      "{% endfor %}", d=[{"r": "a"}, {"r": "A"}, {"r": "b"}]),
    S("f-groupby-default", "{% for k, items in d|groupby('r', default='zz') %}{{ k }}"
      "{{ items|length }};{% endfor %}", d=[{"r": "b"}, {}, {"r": "b"}]),
    S("f-groupby-int-keys", "{% for k, items in d|groupby('n') %}{{ k }}:{{ items|length }};"
      "{% endfor %}", d=[{"n": 10}, {"n": 9}, {"n": 10}]),
    S("f-attr-dict", "[{{ {'x': 1}|attr('x') }}]"),
    S("f-escape-more", "{{ 5|e }}|{{ none|e }}|{{ ('<a>'|safe)|e }}|{{ ('<a>'|safe)|lower }}"
      "|{{ ('<'|safe)|length }}"),
    S("f-length-markup-and-items", "{{ ('&lt;'|safe)|length }}{{ {'a': 1}.items()|list|length }}"),
    S("f-list-unicode", "{{ 'é😀'|list }}"),
    S("f-wordcount-unicode", "{{ 'héllo wörld_2 日本'|wordcount }}"),
    S("f-center-unicode", "[{{ 'é'|center(4) }}][{{ '日本'|center(5) }}]"),
    S("f-center-fillchar", "{{ 'é'|center(5, '*') }}"),
    S("f-indent-more", "[{{ ''|indent(2, true) }}][{{ 'a\n'|indent(2, true, true) }}]"
      "[{{ 'a\r\nb'|indent(1) }}]"),
    S("f-indent-non-string", "{{ 5|indent }}"),
    S("f-join-more", "{{ [1, none, 'a']|join('-') }}|{{ ['<a>', '<b>'|safe]|join }}"
      "|{{ users|join(', ', attribute='age') }}|{{ 'ab'|join(1) }}", users=USERS),
    S("f-default-keyword", "{{ ''|default('x', boolean=true) }}{{ none|default(none) }}"
      "{{ nope|default(nope2, true) }}"),
    S("f-items-on-list", "{{ [1, 2]|items|list }}"),
    S("f-string-float", "{{ 1e20|string }}{{ (1/3)|string }}{{ -0.0|string }}"),

    # --- More tests ------------------------------------------------------------------------------
    S("test-more", "{{ range(3) is iterable }}{{ range(3) is sequence }}{{ nope is string }}"
      "{{ none is boolean }}"
      "{{ (messages|map(attribute='role')) is iterable }}", messages=MSGS),
    S("test-odd-divisibleby-float", "{{ 3.0 is odd }}{{ 4.0 is even }}{{ 4.0 is divisibleby 2 }}"
      "{{ 7 is divisibleby 2.5 }}{{ 7.5 is divisibleby 2.5 }}"),
    S("test-odd-string", "{{ 'a' is odd }}"),
    S("test-mapping-json", "{% for v in [d, d.a, d.l, d.s, d.n] %}{{ v is mapping }}"
      "{{ v is iterable }}{{ v is sequence }}{{ v is string }};{% endfor %}",
      d={"a": {"b": 1}, "l": [1], "s": "x", "n": None}),
    S("test-escaped", "{{ ('a'|safe) is escaped }}{{ 'a' is escaped }}"),
    S("test-filter-test", "{{ 'upper' is filter }}{{ 'nosuch' is filter }}{{ 'odd' is test }}"),

    # --- More methods ----------------------------------------------------------------------------
    S("m-split-unicode-whitespace", "{{ s.split() }}|{{ s.strip() }}|{{ s.split(' ') }}",
      s="\u3000a\u00a0b\tc\nd\u2003"),
    S("m-lstrip-charset", "{{ '<think>hello'.lstrip('<think>') }}|"
      "{{ 'hello</think>'.rstrip('</think>') }}"),
    S("m-split-multichar", "{{ 'a\n\nb\n\n\nc'.split('\n\n') }}{{ 'a b c'.rsplit(none, 1) }}"
      "{{ 'a,b,c'.split(',', -1) }}{{ 'a,b,c'.split(',', 0) }}"),
    S("m-splitlines-keepends", "{{ 'a\nb\r\n'.splitlines(true) }}"),
    S("m-find-start", "{{ 'abcb'.find('b', 2) }}{{ 'abcb'.count('b', 2) }}"),
    S("m-find-more", "{{ 'abcb'.rfind('b') }}{{ 'héllo'.find('l') }}"
      "{{ 'héllo'.index('o') }}"),
    S("m-index-missing", "{{ [1, 2].index(3) }}"),
    S("m-str-index-missing", "{{ 'abc'.index('z') }}"),
    S("m-upper-sharp-s", "{{ 'ß'.upper() }}{{ 'ﬁ'.upper() }}"),
    S("m-case-unicode", "{{ 'ÉÇ'.lower() }}{{ 'élan vital'.title() }}"
      "{{ 'ÉCOLE'.capitalize() }}"),
    S("m-is-more", "{{ 'ABC'.isupper() }}{{ 'Ab Cd'.istitle() }}{{ ''.isdigit() }}"
      "{{ 'é'.isalpha() }}"),
    S("m-isdigit-superscript", "{{ '²'.isdigit() }}{{ '٣'.isdigit() }}"),
    S("m-format-more", "{{ '{}'.format(1.0) }}|{{ '{}'.format(none) }}|{{ '{}'.format([1, 'a']) }}"
      "|{{ '{!r}'.format('a') }}|{{ '{:,}'.format(1234567) }}"
      "|{{ '{:.1%}'.format(0.25) }}|{{ '{:x}'.format(255) }}|{{ '{0}{0}'.format('z') }}"
      "|{{ '{:^7}'.format('mid') }}|{{ '{:*<6}'.format('ab') }}|{{ '{:+d}'.format(5) }}"),
    S("m-format-nested-spec", "{{ '{:>{w}}'.format('a', w=3) }}"),
    S("m-format-missing-arg", "{{ '{} {}'.format(1) }}"),
    S("m-format-bad-spec", "{{ '{:d}'.format('a') }}"),
    S("m-format-on-data", "{{ tmpl.format(name) }}", tmpl="<tool_call{}>", name="ü"),
    S("m-endswith-range", "{{ 'abc'.endswith('b', 0, 2) }}{{ 'abc'.startswith(('a', 'z'), 1) }}"),
    S("m-str-methods-on-none", "{{ none.strip() }}"),
    S("m-str-method-unknown", "{{ 'abc'.nosuch() }}"),
    S("m-list-methods-safe", "{{ [1, 2].copy() }}{{ {'a': 1}.copy() }}"),
    S("m-dict-get-on-list", "{{ [1].get(0) }}"),
    S("m-dict-get-none-key", "{{ d.get(none, 'x') }}{{ d.get('n') is none }}", d={"n": None}),
    S("m-namespace-append", "{% set ns = namespace(ids=[]) %}{% set _ = ns.ids.append(1) %}"
      "{{ ns.ids }}"),

    # --- More globals ----------------------------------------------------------------------------
    S("g-range-more", "{{ range(-3)|list }}{{ range(10, 0, -3)|list }}{{ range(2, -2, -1)|list }}"),
    S("g-range-string-arg", "{{ range('3')|list }}"),
    S("g-range-float-arg", "{{ range(2.0)|list }}"),
    S("g-raise-non-string", "{{ raise_exception(5) }}"),
    S("g-raise-no-arg", "{{ raise_exception() }}"),
    S("g-strftime-more", "{{ strftime_now('%-d %B') }}|{{ strftime_now('%e|%I|%U|%w|%c') }}"),
    S("g-strftime-tz", "[{{ strftime_now('%Z') }}][{{ strftime_now('%z') }}]"),
    S("g-cycler-reset", "{% set c = cycler(1, 2, 3) %}{{ c.next() }}{{ c.next() }}"
      "{% set _ = c.reset() %}{{ c.next() }}"),
    S("g-dict-with-mapping", "{{ dict({'a': 1}, b=2) }}"),
    S("g-namespace-iterate-attr", "{% set ns = namespace(a=[1, 2]) %}"
      "{% for x in ns.a %}{{ x }}{% endfor %}{{ ns.a|length }}"),

    # --- More undefined --------------------------------------------------------------------------
    S("undef-filters-more", "{{ nope|sort }}{{ nope|map('upper')|list }}{{ nope|select|list }}"
      "{{ nope|string|length }}{{ nope|length > 0 }}"),
    S("undef-dictsort-raises", "{{ nope|dictsort }}"),
    S("undef-set-from-undefined", "{% set x = nope %}{{ x is defined }}[{{ x }}]"),
    S("undef-method-on-str-missing", "[{{ messages[0].content.missing }}]", messages=MSGS),
    S("undef-first-of-messages", "{{ (messages|first).role }}{{ (messages|last).content[1].type }}",
      messages=MSGS),
    S("undef-not-defined-or", "{% if nope is not defined or nope %}A{% endif %}"
      "{% if nope is defined and nope.x %}B{% endif %}"),
    S("undef-compare-eq-undefined", "{{ nope == nope2 }}{{ nope != none }}"),

    # --- More data -------------------------------------------------------------------------------
    S("data-content-with-template-syntax", "{{ m }}", m="{{ x }} {% if %} {# c #}"),
    S("data-empty-string-content", "{% if m.content %}T{% else %}F{% endif %}{{ m.content|length }}",
      m={"role": "user", "content": ""}),
    S("data-keys-with-dots", "{{ d['a b'] }}{{ d['a.b'] }}{{ d['a-b'] }}",
      d={"a b": 1, "a.b": 2, "a-b": 3}),
    S("data-key-shadowing-method", "{{ d['items']|length }}{{ d.get('items')|length }}"
      "{% for k, v in d.items() %}{{ k }}{% endfor %}", d={"items": [1, 2], "keys": "k"}),
    S("data-float-extremes", "{{ a }} {{ b }} {{ c }} {{ d }}",
      a=1.7976931348623157e308, b=5e-324, c=1e-10, d=123456789012345.6),
    S("data-bool-arith", "{{ t + t }} {{ t * 3 }} {{ f - 1 }} {{ t / 2 }}", t=True, f=False),
    S("data-int-division-big", "{{ x // 7 }} {{ x % 7 }} {{ x / 7 }}", x=9007199254740993),
    S("data-special-bos", "{{ bos_token }}|{{ eos_token|length }}|{{ bos_token ~ eos_token }}",
      bos="<｜begin▁of▁sentence｜>", eos="<|eot|>\n"),
    S("data-tool-schema-items", "{% for name, prop in tool.parameters.properties|items %}"
      "{{ name }}:{{ prop.type }}{% if prop.enum is defined %}={{ prop.enum|join('|') }}"
      "{% endif %};{% endfor %}",
      tool={"parameters": {"properties": {"city": {"type": "string"},
                                          "unit": {"type": "string", "enum": ["c", "f"]}}}}),

    # --- Macro scoping, string formatting, robustness --------------------------------------------
    S("ws-raw-endraw-lstrip", "{% raw %}\n  x\n  {% endraw %}\ny"),
    S("ws-dash-at-template-start", "  \n {%- if true %}x{% endif %}"),
    S("ws-set-block-dash", "{%- set x -%}\n  v  \n{%- endset -%}\n[{{ x }}]"),
    S("macro-sees-no-loop", "{% macro m() %}{{ loop is defined }}{% endmacro %}"
      "{% for i in [1] %}{{ m() }}{% endfor %}"),
    S("macro-sees-no-loop-local-set", "{% macro m() %}[{{ v }}]{% endmacro %}"
      "{% for i in [1] %}{% set v = 5 %}{{ m() }}{% endfor %}"),
    S("macro-defined-in-loop", "{% for i in [1, 2] %}{% macro m() %}{{ i }}{% endmacro %}"
      "{{ m() }}{% endfor %}"),
    S("macro-sees-latest-top-level", "{% macro m() %}{{ x }}{% endmacro %}{% set x = 1 %}"
      "{{ m() }}{% set x = 2 %}{{ m() }}"),
    S("macro-namespace-mutation", "{% set ns = namespace(c=0) %}{% macro inc() %}"
      "{% set ns.c = ns.c + 1 %}{% endmacro %}{{ inc() }}{{ inc() }}{{ ns.c }}"),
    S("macro-deep-recursion", "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% else %}bottom"
      "{% endif %}{% endmacro %}{{ f(150) }}"),
    S("call-body-set", "{% macro w() %}{{ caller() }}{{ caller() }}{% endmacro %}"
      "{% call w() %}{% set t = 1 %}{{ t }}{% endcall %}[{{ t }}]"),
    S("expr-string-percent", "{{ '%s!' % 'a' }}|{{ '%s-%s' % (1, 2) }}|{{ '%d%%' % 50 }}"
      "|{{ '%(k)s' % {'k': 'v'} }}"),
    S("expr-in-none", "{{ 'a' in none }}"),
    S("expr-in-int", "{{ 'a' in 5 }}"),
    S("expr-subscript-exprs", "{% set i = 1 %}{{ x[i + 1] }}{{ x[-i] }}{{ 'abc'[::-1][0] }}"
      "{{ x.0 }}{{ d['0'] }}[{{ d[0] }}]", x=[1, 2, 3], d={"0": "z"}),
    S("expr-dot-index-chained", "{{ y.0.1 }}{{ messages.0.content.0 }}", y=[[4, 5]],
      messages=MSGS),
    S("expr-next-message", "{% for m in messages %}{% if not loop.last %}"
      "{{ messages[loop.index0 + 1].role }},{% endif %}{% endfor %}", messages=MSGS),
    S("expr-default-nested", "{{ nope|default(nope2|default('z')) }}{{ x|default(1 if true "
      "else 2) }}"),
    S("expr-unicode-identifier", "{% set été = 1 %}{{ été }}"),
    S("expr-condexpr-none", "{{ 1 if none else 2 }}{{ 'y' if 'n' else 'z' }}"),
    S("num-more", "{{ 10 ** -2 }}|{{ 0 ** 0 }}|{{ 7 // 2.0 }}|{{ 2 ** 0 }}|{{ 1.0 ** 3 }}"),
    S("num-float-floordiv-zero", "{{ 3 // 0.0 }}"),
    S("num-zero-pow-negative", "{{ 0.0 ** -1 }}"),
    S("num-int64-edges-from-json", "{{ x }} {{ x - 1 }} {{ -x - 1 }} {{ x // 2 }}",
      x=9223372036854775807),
    S("num-int64-overflow-from-json", "{{ x + 1 }}", x=9223372036854775807),
    S("test-is-not-with-arg", "{{ 6 is not divisibleby 4 }}{{ x is not sameas none }}"
      "{{ messages[0].tool_calls is defined }}{{ messages[2].tool_calls is defined }}"
      "{{ messages|length is divisibleby 5 }}", x=0, messages=MSGS),
    S("f-selectattr-dotted", "{{ messages|selectattr('tool_calls')|list|length }}"
      "{{ tools|selectattr('function.name', 'eq', 'b')|map(attribute='function.name')|list }}"
      "{{ tools|map(attribute='function')|map(attribute='name')|join(', ') }}",
      messages=MSGS, tools=[{"function": {"name": "a"}}, {"function": {"name": "b"}}]),
    S("f-selectattr-equalto-types", "{{ d|selectattr('x', 'equalto', 1)|list|length }}"
      "{{ d|selectattr('x', 'eq', '1')|list|length }}", d=[{"x": 1}, {"x": "1"}, {"x": 1.0}]),
    S("f-replace-none", "{{ 'xax'|replace('x', none) }}|{{ 'a1'|replace(1, 2) }}"),
    S("f-tojson-more", "{{ 'a\nb'|tojson(indent=2) }}|{{ {'b': {}, 'a': []}|tojson(indent=2, "
      "sort_keys=true) }}|{{ [{}]|tojson(indent=1, separators=(',', ':')) }}"
      "|{{ 'é'|tojson(ensure_ascii=false) }}"),
    S("f-string-markup", "{{ ('<a>'|safe)|string }}{{ ('<a>'|safe)|trim|length }}"),
    S("perf-string-building", "{% set ns = namespace(s='') %}{% for i in range(5000) %}"
      "{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.s|length }}"),
    S("perf-long-loop", "{% for i in range(30000) %}{% if i % 10000 == 0 %}{{ i }},{% endif %}"
      "{% endfor %}{{ range(100000)|sum }}"),
    S("perf-nested-data", "{{ d|tojson|length }}",
      d=[{"k": list(range(50)), "s": "x" * 100}] * 200),
]


# --- The oracle ----------------------------------------------------------------------------------

def variables_json(snippet: Snippet) -> str:
    variables = dict(snippet.variables)
    variables.setdefault("messages", [])
    return json.dumps(variables, ensure_ascii=False, indent=1)


def oracle_variables(vars_json: str) -> dict:
    variables = json.loads(vars_json)
    variables.setdefault("add_generation_prompt", True)  # as polystack defaults it
    return variables


# --- polystack -----------------------------------------------------------------------------------

def run_polystack(binary: str, index: int, snippet: Snippet, vars_json: str,
                  workdir: Path) -> Actual:
    template_path = workdir / f"{index:03d}.jinja"
    vars_path = workdir / f"{index:03d}.json"
    with open(template_path, "w", encoding="utf-8", newline="") as f:
        f.write(snippet.template)
    with open(vars_path, "w", encoding="utf-8", newline="") as f:
        f.write(vars_json)
    return run_template(binary, template_path, vars_path, snippet.bos, snippet.eos,
                        SOURCE_DATE_EPOCH)


# --- Main ----------------------------------------------------------------------------------------

def check_names() -> None:
    seen = set()
    for s in SNIPPETS:
        if s.name in seen:
            raise SystemExit(f"duplicate snippet name {s.name}")
        seen.add(s.name)


# Where the engine knowingly differs from jinja2, each with the reason. These are reported on
# every run (as "known") and fail the check once they pass, so the list cannot go stale.
KNOWN_DIFFERENCES = {
    "loop-recursive": "recursive for loops are not supported (no chat template uses them)",
    "loop-items-nested-unpack": "for targets unpack one level only",
    "macro-star-kwargs-call": "*args and **kwargs in calls are not supported",
    "num-big-int": "integers are 64-bit: Python's larger ones are an overflow error",
    "num-int64-overflow-from-json": "integers are 64-bit: Python's larger ones are an overflow error",
    "tojson-big-int": "JSON integers beyond 64 bits are read as floats",
    "f-int-big-float": "integers are 64-bit: |int of 1e20 is the default",
    "data-int-division-big": "int / int divides as doubles, not exactly rounded",
    "f-escape-markup-ops": "% and format on Markup do not escape their arguments",
    "m-format-dunder": "str.format refuses underscore attributes outright",
    "m-format-nested-spec": "nested fields in format specs are not supported",
    "m-isdigit-superscript": "isdigit and friends know ASCII digits only",
    "err-test-with-bad-args": "tests ignore surplus arguments",
    "f-tojson-range": "range() gives a list, which is JSON",
    "g-strftime-tz": "strftime_now's %Z and %z name the local zone; Python's naive time prints nothing",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--polystack", help="the polystack binary")
    ap.add_argument("--only", action="append", default=[], metavar="SUBSTRING",
                    help="only snippets whose name contains SUBSTRING (repeatable)")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                    help="polystack runs at a time (default: %(default)s)")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="show every snippet, and the errors of snippets where both raised")
    ap.add_argument("--oracle-only", action="store_true",
                    help="print jinja2's rendering of each snippet, without polystack")
    args = ap.parse_args()

    if JINJA2_MISSING is not None:
        skip(f"jinja2 is not importable ({JINJA2_MISSING})")
    if not args.oracle_only and not args.polystack:
        ap.error("--polystack is required")
    check_names()

    snippets = list(enumerate(SNIPPETS))
    if args.only:
        snippets = [(i, s) for i, s in snippets if any(o in s.name for o in args.only)]
        if not snippets:
            print(f"FAIL no snippet name contains any of {args.only}")
            return 1

    env = make_environment(SOURCE_DATE_EPOCH)
    vars_json = {i: variables_json(s) for i, s in snippets}
    expected = {i: oracle_render(env, s.template, oracle_variables(vars_json[i]), s.bos, s.eos)
                for i, s in snippets}

    if args.oracle_only:
        for i, s in snippets:
            e = expected[i]
            shown = (repr(e.text) if e.text is not None else
                     f"raise_exception({e.raised!r})" if e.raised is not None else e.error)
            print(f"{s.name}: {shown}")
        return 0

    with tempfile.TemporaryDirectory(prefix="jinja-constructs-") as tmp:
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            futures = {i: pool.submit(run_polystack, args.polystack, i, s, vars_json[i],
                                      Path(tmp))
                       for i, s in snippets}
            actual = {i: f.result() for i, f in futures.items()}

    passed = failed = both = known = 0
    for i, s in snippets:
        outcome = compare(expected[i], actual[i], show_text=True)
        if s.name in KNOWN_DIFFERENCES:
            if outcome.verdict == FAIL:
                known += 1
                print(f"known {s.name}: {KNOWN_DIFFERENCES[s.name]}")
            else:
                failed += 1
                print(f"FAIL {s.name}: listed as a known difference but equal to jinja2 now; "
                      f"take it off KNOWN_DIFFERENCES")
            continue
        if outcome.verdict == FAIL:
            failed += 1
            print(f"FAIL {s.name}: {outcome.reason}")
            print(f"    template: {s.template!r}")
            for line in outcome.details:
                print(f"    {line}")
        else:
            if outcome.verdict == BOTH_RAISED:
                both += 1
            else:
                passed += 1
            if args.verbose:
                print(f"ok   {s.name} ({outcome.verdict})")
                for line in outcome.details:
                    print(f"        {line}")

    total = passed + failed + both + known
    print(f"jinja constructs: {passed} of {total} equal to jinja2 "
          f"({failed} failed, {both} both raised, {known} known differences)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
