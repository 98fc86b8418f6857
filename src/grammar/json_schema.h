#pragma once
// JSON Schema to GBNF (grammar/grammar.h): a grammar whose sentences are JSON texts that are
// instances of a schema, for structured output (`--json-schema`, the server's response_format).
// What a schema asks and this compiler cannot hold to is refused with a GrammarError naming the
// keyword or value and where it is (a JSON pointer into the schema), never dropped:
//   json_schema: 'not' at /properties/x is not supported
//
// Supported (the 2020-12 vocabulary; a few draft-7 forms where they mean the same):
// - `true` / `{}`: any JSON value; `false`: refused (no instance). Annotations are ignored:
//   title, description, examples, default, $schema, $id, $comment, deprecated, readOnly,
//   writeOnly, keys starting with "x-"; $defs/definitions are compiled where referenced.
// - type (a name or a list); without one, the type comes from the keywords present (object,
//   array, string or number keywords), else any value.
// - objects: properties in the schema's order (an nlohmann::json argument holds its keys
//   sorted; pass an ordered_json to keep the schema's order), each one not in `required` may be
//   left out; additionalProperties false or absent: no other keys; true or a schema: other keys
//   after the listed ones (such keys are written without escapes and differ from the listed
//   names). A required name that is not a property takes additionalProperties' schema. An
//   object schema with none of properties, required, additionalProperties: any object.
//   minProperties/maxProperties only where the properties already satisfy them.
// - arrays: items, prefixItems (then items for the rest, `items: false` for none), draft-7
//   tuples (items as a list with additionalItems), minItems, maxItems, uniqueItems false.
// - strings: minLength/maxLength (code points: an escape, or a surrogate pair, counts as one),
//   format date (month and day checked with leap years), time, date-time (RFC 3339: upper-case
//   T and Z, seconds required), uuid; pattern: an ECMA-262 subset (literals, escapes, classes,
//   ., groups, (?:...), |, * + ? {m} {m,} {m,n}, ^ and $ at the ends of its top alternatives).
//   A pattern matches anywhere unless anchored; its characters that JSON must escape appear
//   escaped. Only one of format, pattern and a length bound per string.
// - integers: minimum, maximum, exclusiveMinimum, exclusiveMaximum exactly (numbers or the
//   draft-4 booleans), no leading zeros and never "-0"; bounds on non-integer numbers are
//   refused.
// - enum and const of any JSON value (written compactly), beside `type` only.
// - anyOf and oneOf as alternatives: oneOf cannot make them exclusive, so an instance of two
//   branches is accepted (a schema whose branches overlap is not held to "exactly one").
//   Keywords beside them are merged into each branch.
// - allOf: the parts merged into one schema (properties and required united, the tighter of two
//   bounds, enums intersected), refused where parts conflict in a way the merge cannot express.
// - $ref to any local JSON pointer (#/$defs/NAME, #/definitions/NAME, #): one rule each, so
//   recursive schemas (a tree of nodes) work; remote refs and anchors are refused.
// Whitespace between tokens: none, one space, or a newline and up to 20 spaces or tabs
// (llama.cpp's `space`), none around the whole value. So that a model cannot run on in digits,
// numbers have at most 16 integral digits (integers on a side without a bound too), 16 fraction
// digits and 3 exponent digits, and times at most 9 fraction digits (a narrower language than
// the schema's, never a wider one); strings are unbounded unless the schema bounds them.
// Counts (lengths, items) above 10000 are refused (the GBNF limit).
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "grammar/grammar.h"

namespace ps::grammar {

// GBNF, start rule `root`, for the instances of `schema`; GrammarError for what is not
// supported. Grammar::parse accepts the result.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);
// The same; object properties come in the order the json holds them (sorted by name).
std::string json_schema_to_gbnf(const nlohmann::json& schema);
// Any JSON object (response_format json_object), and any JSON value.
std::string json_object_gbnf();
std::string json_value_gbnf();

// Several schemas in one grammar, each one's instances a rule of its own, for grammars of text
// that holds JSON values among other syntax (a tool call's arguments in a model's call syntax):
// the caller adds its own rules, with names from reserve(), to gbnf()'s text.
class SchemaRules {
 public:
  SchemaRules();
  ~SchemaRules();
  // The name of a new rule for the instances of `schema`, whose $refs resolve within `doc`
  // (the document that holds it; null: the schema itself); GrammarError as
  // json_schema_to_gbnf.
  std::string add(const nlohmann::ordered_json& schema, const std::string& hint,
                  const nlohmann::ordered_json* doc = nullptr);
  // A name for a rule of the caller's, which no other rule has.
  std::string reserve(const std::string& hint);
  // The rules added so far and those they use.
  std::string gbnf() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ps::grammar
