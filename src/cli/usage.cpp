#include "cli/usage.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace ps::cli {
namespace {

bool is_number(const std::string& t) {
  char* end = nullptr;
  std::strtod(t.c_str(), &end);
  return !t.empty() && end && *end == '\0';
}

// Edit distance with transpositions (optimal string alignment), case-insensitive, '_' as '-'.
size_t distance(std::string a, std::string b) {
  auto norm = [](std::string& s) {
    for (char& c : s) c = c == '_' ? '-' : char(std::tolower(uint8_t(c)));
  };
  norm(a);
  norm(b);
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

const CLI::Option* find_option(const CLI::App& cmd, const std::string& name) {
  for (const CLI::Option* o : cmd.get_options())
    if (o->check_name(name)) return o;
  return nullptr;
}

bool has_positionals(const CLI::App& cmd) {
  for (const CLI::Option* o : cmd.get_options())
    if (o->get_lnames().empty() && o->get_snames().empty()) return true;
  return false;
}

// Every spelling of the command's flags: -x, --long, and the aliases of its options.
std::vector<std::string> flag_names(const CLI::App& cmd) {
  std::vector<std::string> out;
  for (const CLI::Option* o : cmd.get_options()) {
    for (const std::string& s : o->get_snames()) out.push_back("-" + s);
    for (const std::string& l : o->get_lnames()) out.push_back("--" + l);
  }
  for (const ShortAlias& a : short_aliases())
    if (find_option(cmd, a.name)) out.emplace_back(a.alias);
  return out;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

}  // namespace

const std::vector<ShortAlias>& short_aliases() {
  static const std::vector<ShortAlias> kAliases = {{"-ngl", "--n-gpu-layers"},
                                                   {"-sm", "--split-mode"},
                                                   {"-ts", "--tensor-split"},
                                                   {"-mg", "--main-gpu"},
                                                   {"-np", "--parallel"}};
  return kAliases;
}

std::string command_list(const CLI::App& app) {
  std::string out;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    out += fmt::format("  {:<10} {}\n", sub->get_name(), sub->get_description());
  return out;
}

std::optional<std::string> nearest(const std::string& word,
                                   const std::vector<std::string>& candidates) {
  const size_t letters = word.size() - std::min(word.find_first_not_of('-'), word.size());
  const size_t limit = letters <= 3 ? 1 : letters <= 6 ? 2 : 3;
  std::optional<std::string> best;
  size_t best_d = limit + 1;
  for (const std::string& c : candidates) {
    const size_t d = distance(word, c);
    // Not when every letter differs: -x is one edit from -h, but not a slip of it.
    if (d < best_d && d < letters) best_d = d, best = c;
  }
  if (best) return best;
  // A prefix of exactly one candidate ("--thread" for "--threads").
  std::vector<std::string> prefixed;
  for (const std::string& c : candidates)
    if (letters >= 2 && c.starts_with(word)) prefixed.push_back(c);
  if (prefixed.size() == 1) return prefixed.front();
  return std::nullopt;
}

CheckedArguments check_arguments(const CLI::App& cmd, const std::vector<std::string>& args) {
  CheckedArguments out;
  out.args = args;
  const std::string where = cmd.get_name();
  const auto unknown = [&](const std::string& name, std::optional<std::string> near) {
    if (!near) near = nearest(name, flag_names(cmd));
    throw UsageError(
        near ? fmt::format("unknown flag '{}' for {}; did you mean {}?", name, where, *near)
             : fmt::format("unknown flag '{}' for {} (polystack help {} lists its "
                           "flags)",
                           name, where, where));
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& t = args[i];
    if (t == "--") break;
    if (t.size() < 2 || t[0] != '-' || is_number(t)) {
      if (!has_positionals(cmd))
        throw UsageError(fmt::format(
            "unexpected argument '{}' for {}: every value follows its flag (quote a value with "
            "spaces: -p \"two words\"; polystack help {} lists the flags)",
            t, where, where));
      continue;
    }
    std::string name = t;
    bool attached = false;
    if (const size_t eq = t.find('='); eq != std::string::npos) {
      name = t.substr(0, eq);
      attached = true;
    }
    std::string long_name = name;
    for (const ShortAlias& a : short_aliases()) {
      if (name == a.alias) long_name = a.name;
      // llama.cpp's -ngl99 is not taken by llama.cpp either: said so, with the spaced form.
      const std::string alias = a.alias;
      if (name.size() > alias.size() && name.starts_with(alias) &&
          std::isdigit(uint8_t(name[alias.size()])) && find_option(cmd, a.name))
        unknown(name, alias + " " + name.substr(alias.size()));
    }
    if (!t.starts_with("--") && long_name == name && name.size() > 2) {
      // -temp: a long flag with one dash (llama.cpp takes some so); -n5: a short flag with its
      // value attached.
      const std::string dashed = "-" + name;
      if (find_option(cmd, dashed)) unknown(name, dashed);
      const CLI::Option* short_opt = find_option(cmd, t.substr(0, 2));
      if (!short_opt || short_opt->get_expected_max() == 0 || attached) unknown(name, std::nullopt);
      name = long_name = t.substr(0, 2);
      attached = true;
    }
    const CLI::Option* opt = find_option(cmd, long_name);
    if (!opt) unknown(name, std::nullopt);
    out.spelled[opt] = name;
    if (long_name != name)  // an alias: CLI11 takes the long form
      out.args[i] = attached ? long_name + t.substr(name.size()) : long_name;
    else if (name.size() == 2 && t.size() > 2 && t[2] == '=')  // -n=5: CLI11 would read "=5"
      out.args[i] = name + t.substr(3);
    if (attached || opt->get_expected_max() == 0) continue;  // a flag takes no value
    if (opt->get_items_expected_max() > 1) {
      // A list: the words up to the next flag (a negative number is a value).
      while (i + 1 < args.size() &&
             (args[i + 1].empty() || args[i + 1][0] != '-' || is_number(args[i + 1])))
        ++i;
    } else {
      ++i;  // its value, whatever it looks like ("-p -", "--seed -1", "-p -ngl")
    }
  }
  return out;
}

std::string restate_parse_error(const CLI::ParseError& e, const CLI::App& cmd,
                                const CheckedArguments& checked) {
  std::string msg = e.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    // CLI11 lists them last first ("not expected: c b a"): in the order written here.
    std::vector<std::string> words;
    const size_t colon = msg.find(": ");
    std::string tail = colon == std::string::npos ? "" : msg.substr(colon + 2);
    for (size_t at = 0; at < tail.size();) {
      const size_t sp = std::min(tail.find(' ', at), tail.size());
      words.push_back(tail.substr(at, sp - at));
      at = sp + 1;
    }
    std::reverse(words.begin(), words.end());
    return fmt::format("unexpected argument{} for {}: {}", words.size() == 1 ? "" : "s",
                       cmd.get_name(), fmt::join(words, " "));
  }
  // CLI11's phrases, found by hand: std::regex trips GCC 12's -Wmaybe-uninitialized under the
  // sanitizers.
  const auto word_before = [&](size_t at) {  // the word that ends at `at` ("--ctx-size")
    size_t b = at;
    while (b > 0 && msg[b - 1] != ' ') --b;
    return msg.substr(b, at - b);
  };
  const auto word_at = [&](size_t at) { return msg.substr(at, msg.find(' ', at) - at); };
  // "--ctx-size: Value -5 not in range 0 to 16777216"
  if (const size_t v = msg.find("Value "); v != std::string::npos) {
    const size_t nr = msg.find(" not in range ", v);
    const size_t to = nr == std::string::npos ? nr : msg.find(" to ", nr + 14);
    if (nr != std::string::npos && to != std::string::npos) {
      const std::string value = msg.substr(v + 6, nr - v - 6);
      const std::string lo = msg.substr(nr + 14, to - nr - 14), hi = word_at(to + 4);
      msg = msg.substr(0, v) +
            (is_number(value) ? value + " is out of range" : "'" + value + "' is not a number") +
            " (" + lo + " to " + hi + ")";
    }
  }
  // "Could not convert: --temp = abc"
  if (const size_t c = msg.find("Could not convert: "); c != std::string::npos) {
    const size_t eq = msg.find(" = ", c);
    if (eq != std::string::npos)
      msg = fmt::format("{}: '{}' is not a valid value", msg.substr(c + 19, eq - c - 19),
                        msg.substr(eq + 3));
  }
  // "--prompt: 1 required TEXT missing"
  if (const size_t r = msg.find(": 1 required ");
      r != std::string::npos && msg.find(" missing", r) != std::string::npos)
    msg = word_before(r) + " needs a value";
  // "--prompt: At Most 1 required but received 2"
  if (const size_t r = msg.find(": At Most 1 required but received "); r != std::string::npos)
    msg = word_before(r) + " is given more than once (it takes one value)";
  // A check that names its option inside CLI11's "--opt: " prefix: "--opt: --opt: ...".
  if (const size_t colon = msg.find(": "); colon != std::string::npos && colon > 0) {
    const std::string prefix = msg.substr(0, colon + 2);
    if (msg.compare(colon + 2, prefix.size(), prefix) == 0) msg.erase(0, prefix.size());
  }
  // Option names as the user wrote them (-c, not --ctx-size).
  for (const CLI::Option* o : cmd.get_options()) {
    auto it = checked.spelled.find(o);
    if (it == checked.spelled.end()) continue;
    const std::string shown = o->get_name();
    if (shown != it->second) msg = replace_all(msg, shown, it->second);
  }
  return msg;
}

std::string HelpFormatter::make_option_name(const CLI::Option* opt, bool positional) const {
  std::string name = CLI::Formatter::make_option_name(opt, positional);
  // "--no-ui{false}": CLI11 shows the value a negated flag stores.
  if (const size_t brace = name.find('{'); brace != std::string::npos)
    name.erase(brace, name.find('}', brace) + 1 - brace);
  for (const ShortAlias& a : short_aliases())
    if (!positional && opt->check_name(a.name)) name = std::string(a.alias) + "," + name;
  return name;
}

std::string HelpFormatter::make_option_opts(const CLI::Option* opt) const {
  if (opt->get_expected_max() == 0) return "";  // a flag
  std::string type = opt->get_type_name();
  // "INT:INT in [0 - 1024]": the type only; the range is in the error a bad value gets.
  type = type.substr(0, type.find(':'));
  if (type.empty()) type = "VALUE";
  return " " + type + (opt->get_items_expected_max() > 1 ? " ..." : "");
}

std::string HelpFormatter::make_option_desc(const CLI::Option* opt) const {
  std::string desc = opt->get_description();
  const std::string def = opt->get_default_str();
  if (opt->get_expected_max() > 0 && !def.empty() && def != "[]" &&
      desc.find("default") == std::string::npos)
    desc += fmt::format(" (default: {})", def);
  return desc;
}

}  // namespace ps::cli
