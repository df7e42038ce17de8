// jinja2's filters and tests, and the str/dict/list methods, as chat
// templates use them. Where Python and jinja2 differ from the obvious
// (sort and unique ignore case by default, round() rounds half to even, the
// `title` filter splits words differently from str.title), the Python
// behaviour is the one kept: prompts must match byte for byte.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>

#include "absl/strings/str_cat.h"
#include "model/jinja/builtins.h"

namespace specline::jinja {
namespace {

// ---- case mapping: ASCII, Latin-1, Greek and Cyrillic basic letters ----
char32_t ToUpperCp(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if ((c >= 0xe0 && c <= 0xfe && c != 0xf7)) return c - 32;
  if (c == 0xff) return 0x178;
  if (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2) return c - 32;
  if (c >= 0x430 && c <= 0x44f) return c - 32;
  if (c >= 0x450 && c <= 0x45f) return c - 80;
  return c;
}
char32_t ToLowerCp(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if ((c >= 0xc0 && c <= 0xde && c != 0xd7)) return c + 32;
  if (c == 0x178) return 0xff;
  if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) return c + 32;
  if (c >= 0x410 && c <= 0x42f) return c + 32;
  if (c >= 0x400 && c <= 0x40f) return c + 80;
  return c;
}
bool IsCased(char32_t c) { return ToUpperCp(c) != c || ToLowerCp(c) != c || c == 0xdf; }

template <typename F>
std::string MapCps(const std::string& s, F f) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) f(&out, DecodeUtf8(s, &pos));
  return out;
}

std::string Upper(const std::string& s) {
  return MapCps(s, [](std::string* out, char32_t c) {
    if (c == 0xdf) *out += "SS";  // ß
    else AppendUtf8(out, ToUpperCp(c));
  });
}
std::string Lower(const std::string& s) {
  return MapCps(s, [](std::string* out, char32_t c) { AppendUtf8(out, ToLowerCp(c)); });
}
// str.title(): a cased letter after a cased letter is lowered, otherwise
// raised.
std::string PyTitle(const std::string& s) {
  bool prev_cased = false;
  return MapCps(s, [&](std::string* out, char32_t c) {
    if (IsCased(c)) {
      AppendUtf8(out, prev_cased ? ToLowerCp(c) : ToUpperCp(c));
      prev_cased = true;
    } else {
      AppendUtf8(out, c);
      prev_cased = false;
    }
  });
}
std::string Capitalize(const std::string& s) {
  bool first = true;
  return MapCps(s, [&](std::string* out, char32_t c) {
    AppendUtf8(out, first ? ToUpperCp(c) : ToLowerCp(c));
    first = false;
  });
}
// The `title` filter: words start after - whitespace ( { [ <.
std::string FilterTitle(const std::string& s) {
  bool start = true;
  return MapCps(s, [&](std::string* out, char32_t c) {
    bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsPySpace(c);
    if (sep) {
      AppendUtf8(out, c);
      start = true;
    } else {
      AppendUtf8(out, start ? ToUpperCp(c) : ToLowerCp(c));
      start = false;
    }
  });
}

// ---- strings ----
std::vector<char32_t> Cps(const std::string& s) {
  std::vector<char32_t> v;
  size_t pos = 0;
  while (pos < s.size()) v.push_back(DecodeUtf8(s, &pos));
  return v;
}

std::string Strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::vector<char32_t> set;
  bool ws = chars == nullptr || chars->is_none() || chars->is_undefined();
  if (!ws) {
    if (!chars->is_string()) Fail("strip arg must be None or str");
    set = Cps(chars->str());
  }
  auto strip_cp = [&](char32_t c) {
    return ws ? IsPySpace(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
  std::vector<size_t> off = CodePointOffsets(s);
  size_t n = off.size() - 1, b = 0, e = n;
  auto cp_at = [&](size_t i) {
    size_t p = off[i];
    return DecodeUtf8(s, &p);
  };
  if (left) while (b < e && strip_cp(cp_at(b))) ++b;
  if (right) while (e > b && strip_cp(cp_at(e - 1))) --e;
  return s.substr(off[b], off[e] - off[b]);
}

List Split(const std::string& s, const Value* sep_v, int64_t maxsplit, bool from_right) {
  List out;
  if (sep_v && !sep_v->is_none() && !sep_v->is_undefined()) {
    if (!sep_v->is_string()) Fail("must be str or None");
    const std::string& sep = sep_v->str();
    if (sep.empty()) Fail("empty separator");
    std::vector<std::string> parts;
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t f = s.find(sep, pos);
        if (f == std::string::npos) break;
        parts.push_back(s.substr(pos, f - pos));
        pos = f + sep.size();
      }
      parts.push_back(s.substr(pos));
    } else {
      size_t end = s.size();
      std::vector<std::string> rev;
      while (maxsplit < 0 || static_cast<int64_t>(rev.size()) < maxsplit) {
        if (end < sep.size()) break;
        size_t f = s.rfind(sep, end - sep.size());
        if (f == std::string::npos) break;
        rev.push_back(s.substr(f + sep.size(), end - f - sep.size()));
        end = f;
      }
      rev.push_back(s.substr(0, end));
      parts.assign(rev.rbegin(), rev.rend());
    }
    for (auto& p : parts) out.push_back(Value::String(std::move(p)));
    return out;
  }
  // Whitespace runs; leading/trailing whitespace ignored.
  std::vector<size_t> off = CodePointOffsets(s);
  size_t n = off.size() - 1;
  std::vector<std::pair<size_t, size_t>> words;  // code point ranges
  auto sp = [&](size_t i) {
    size_t p = off[i];
    return IsPySpace(DecodeUtf8(s, &p));
  };
  if (!from_right) {
    size_t i = 0;
    while (i < n) {
      while (i < n && sp(i)) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(words.size()) == maxsplit) {
        words.emplace_back(i, n);  // the rest keeps its trailing whitespace
        break;
      }
      size_t j = i;
      while (j < n && !sp(j)) ++j;
      words.emplace_back(i, j);
      i = j;
    }
  } else {
    size_t i = n;
    std::vector<std::pair<size_t, size_t>> rev;
    while (i > 0) {
      while (i > 0 && sp(i - 1)) --i;
      if (i == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(rev.size()) == maxsplit) {
        rev.emplace_back(0, i);  // the rest keeps its leading whitespace
        break;
      }
      size_t j = i;
      while (j > 0 && !sp(j - 1)) --j;
      rev.emplace_back(j, i);
      i = j;
    }
    words.assign(rev.rbegin(), rev.rend());
  }
  for (auto [b, e] : words) out.push_back(Value::String(s.substr(off[b], off[e] - off[b])));
  return out;
}

std::string Replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts `repl` between every code point (and at both ends).
    std::vector<size_t> off = CodePointOffsets(s);
    int64_t done = 0;
    for (size_t i = 0; i + 1 <= off.size(); ++i) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i + 1 < off.size()) out.append(s, off[i], off[i + 1] - off[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += repl;
    pos = f + old.size();
    ++done;
  }
  out.append(s, pos);
  return out;
}

}  // namespace

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

// str.splitlines(): \n \r \r\n \v \f \x1c-\x1e \x85 \u2028 \u2029.
std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> lines;
  size_t pos = 0, start = 0;
  while (pos < s.size()) {
    size_t at = pos;
    char32_t c = DecodeUtf8(s, &pos);
    bool brk = c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e) ||
               c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    lines.push_back(s.substr(start, at - start));
    if (c == '\r' && pos < s.size() && s[pos] == '\n') ++pos;
    start = pos;
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

int64_t IntArg(const Value* v, int64_t def, std::string_view what) {
  if (v == nullptr || v->is_none()) return def;
  if (!v->is_int() && !v->is_bool()) Fail(absl::StrCat(std::string(what), " must be an integer"));
  return v->as_int();
}

bool BoolArg(const Value* v, bool def) { return v == nullptr ? def : v->Truthy(); }

const std::string& StrArg(const Value* v, std::string_view what) {
  if (v == nullptr || !v->is_string()) Fail(absl::StrCat(std::string(what), " must be a string"));
  return v->str();
}

// make_attrgetter: "a.b.0" looked up with getitem, digits as ints.
Value GetPath(const Value& item, const std::string& path) {
  Value cur = item;
  size_t pos = 0;
  while (true) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = GetItem(cur, digits ? Value::Int(std::atoll(part.c_str())) : Value::String(part));
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

Value LowerIfString(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value::String(Lower(v.str())) : v;
}

std::string PyFormat(const std::string& fmt, const CallArgs& args);

// select/reject/selectattr/rejectattr.
Value SelectOrReject(const Value& input, const CallArgs& args, bool select, bool attr) {
  // jinja2 checks `if value:` first: None or an empty input selects nothing.
  if (!input.Truthy()) return Value::Generator({});
  size_t first = 0;
  std::string path;
  if (attr) {
    if (args.positional.empty()) Fail("selectattr needs an attribute");
    path = StrArg(&args.positional[0], "attribute");
    first = 1;
  }
  std::string test;
  CallArgs test_args;
  if (args.positional.size() > first) {
    test = StrArg(&args.positional[first], "test name");
    if (!IsKnownTest(test)) Fail(absl::StrCat("No test named '", test, "'"));
    test_args.positional.assign(args.positional.begin() + first + 1, args.positional.end());
    test_args.keyword = args.keyword;
  }
  List out;
  for (const Value& item : Iterate(input)) {
    Value v = attr ? GetPath(item, path) : item;
    bool ok = test.empty() ? v.Truthy() : ApplyTest(test, v, test_args);
    if (ok == select) out.push_back(item);
  }
  return Value::Generator(std::move(out));
}

// Sort keys under jinja2's case_sensitive=False default.
void SortValues(List* items, const std::vector<std::string>& paths, bool case_sensitive, bool reverse) {
  auto key = [&](const Value& v) {
    if (paths.empty()) return List{LowerIfString(v, case_sensitive)};
    List k;
    for (const auto& p : paths) k.push_back(LowerIfString(GetPath(v, p), case_sensitive));
    return k;
  };
  std::vector<std::pair<List, Value>> keyed;
  for (Value& v : *items) keyed.emplace_back(key(v), std::move(v));
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    for (size_t i = 0; i < a.first.size(); ++i) {
      int c = Compare(a.first[i], b.first[i]);
      if (c != 0) return reverse ? c > 0 : c < 0;
    }
    return false;
  });
  items->clear();
  for (auto& [_, v] : keyed) items->push_back(std::move(v));
}

std::vector<std::string> AttrPaths(const Value* attribute) {
  std::vector<std::string> paths;
  if (attribute == nullptr || attribute->is_none()) return paths;
  if (attribute->is_int()) return {std::to_string(attribute->as_int())};
  const std::string& a = StrArg(attribute, "attribute");
  size_t pos = 0;
  while (true) {
    size_t comma = a.find(',', pos);
    paths.push_back(a.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return paths;
}

Value MinMax(const Value& input, const CallArgs& args, bool want_max) {
  bool cs = BoolArg(args.Get(0, "case_sensitive"), false);
  std::vector<std::string> paths = AttrPaths(args.Get(1, "attribute"));
  List items = Iterate(input);
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  auto key = [&](const Value& v) { return LowerIfString(paths.empty() ? v : GetPath(v, paths[0]), cs); };
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    int c = Compare(k, best_key);
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

// round(x, ndigits) as Python: correctly rounded, half to even on the
// exact binary value, which is what glibc's printf computes.
double PyRound(double x, int64_t ndigits) {
  if (!std::isfinite(x)) return x;
  if (ndigits >= 0) {
    if (ndigits > 300) return x;
    std::string buf(400, '\0');
    int n = std::snprintf(buf.data(), buf.size(), "%.*f", static_cast<int>(ndigits), x);
    if (n < 0 || n >= static_cast<int>(buf.size())) return x;
    return std::strtod(buf.c_str(), nullptr);
  }
  if (ndigits < -308) return 0.0 * x;
  double p = std::pow(10.0, static_cast<double>(-ndigits));
  return std::nearbyint(x / p) * p;
}

const std::set<std::string_view>& FilterNames() {
  static const std::set<std::string_view> names = {
      "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e",
      "escape", "first", "float", "format", "indent", "int", "items", "join", "last", "length",
      "list", "lower", "map", "max", "min", "reject", "rejectattr", "replace", "reverse", "round",
      "safe", "select", "selectattr", "sort", "string", "sum", "title", "tojson", "trim",
      "truncate", "unique", "upper", "wordcount", "forceescape", "striptags"};
  return names;
}

const std::set<std::string_view>& TestNames() {
  static const std::set<std::string_view> names = {
      "defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number",
      "string", "mapping", "iterable", "sequence", "callable", "sameas", "escaped", "lower",
      "upper", "odd", "even", "divisibleby", "eq", "equalto", "==", "ne", "!=", "lt", "<",
      "lessthan", "le", "<=", "gt", ">", "greaterthan", "ge", ">=", "in", "filter", "test"};
  return names;
}

// A filter's or test's parameters after the value, as jinja2 declares them:
// extra or unknown arguments are a TypeError there, so they fail here too.
struct Signature {
  size_t required;
  std::vector<std::string_view> params;
  bool variadic;  // *args/**kwargs: anything goes
};

const Signature* FilterSignature(std::string_view name) {
  static const auto* sigs = new std::vector<std::pair<std::string_view, Signature>>{
      {"tojson", {0, {"ensure_ascii", "indent", "separators", "sort_keys"}, false}},
      {"trim", {0, {"chars"}, false}},
      {"length", {0, {}, false}}, {"count", {0, {}, false}},
      {"join", {0, {"d", "attribute"}, false}},
      {"first", {0, {}, false}}, {"last", {0, {}, false}}, {"list", {0, {}, false}},
      {"string", {0, {}, false}}, {"int", {0, {"default", "base"}, false}},
      {"float", {0, {"default"}, false}}, {"lower", {0, {}, false}}, {"upper", {0, {}, false}},
      {"title", {0, {}, false}}, {"capitalize", {0, {}, false}},
      {"replace", {2, {"old", "new", "count"}, false}},
      {"default", {0, {"default_value", "boolean"}, false}}, {"d", {0, {"default_value", "boolean"}, false}},
      {"items", {0, {}, false}}, {"dictsort", {0, {"case_sensitive", "by", "reverse"}, false}},
      {"sort", {0, {"reverse", "case_sensitive", "attribute"}, false}},
      {"unique", {0, {"case_sensitive", "attribute"}, false}}, {"reverse", {0, {}, false}},
      {"round", {0, {"precision", "method"}, false}}, {"abs", {0, {}, false}},
      {"min", {0, {"case_sensitive", "attribute"}, false}}, {"max", {0, {"case_sensitive", "attribute"}, false}},
      {"sum", {0, {"attribute", "start"}, false}}, {"indent", {0, {"width", "first", "blank"}, false}},
      {"wordcount", {0, {}, false}}, {"safe", {0, {}, false}}, {"e", {0, {}, false}},
      {"escape", {0, {}, false}}, {"forceescape", {0, {}, false}},
      {"truncate", {0, {"length", "killwords", "end", "leeway"}, false}},
      {"batch", {1, {"linecount", "fill_with"}, false}}, {"center", {0, {"width"}, false}},
      {"attr", {1, {"name"}, false}}, {"striptags", {0, {}, false}},
  };
  for (const auto& [n, sig] : *sigs) {
    if (n == name) return &sig;
  }
  return nullptr;  // variadic (select, map, format...)
}

const Signature* TestSignature(std::string_view name) {
  static const Signature none{0, {}, false};
  static const Signature other{1, {"other"}, false};
  static const Signature num{1, {"num"}, false};
  static const Signature seq{1, {"seq"}, false};
  if (name == "divisibleby") return &num;
  if (name == "in") return &seq;
  if (name == "sameas" || name == "eq" || name == "equalto" || name == "==" || name == "ne" || name == "!=" ||
      name == "lt" || name == "<" || name == "lessthan" || name == "le" || name == "<=" || name == "gt" ||
      name == ">" || name == "greaterthan" || name == "ge" || name == ">=") {
    return &other;
  }
  return &none;
}

void CheckSignature(std::string_view kind, std::string_view name, const Signature* sig, const CallArgs& args) {
  if (sig == nullptr || sig->variadic) return;
  if (args.positional.size() > sig->params.size()) {
    Fail(absl::StrCat(std::string(kind), " '", std::string(name), "' takes at most ", sig->params.size(), " argument(s), ",
                      args.positional.size(), " given"));
  }
  size_t given = args.positional.size();
  for (const auto& [k, v] : args.keyword) {
    auto it = std::find(sig->params.begin(), sig->params.end(), k);
    if (it == sig->params.end()) {
      Fail(absl::StrCat(std::string(kind), " '", std::string(name), "' got an unexpected keyword argument '", k, "'"));
    }
    if (static_cast<size_t>(it - sig->params.begin()) < args.positional.size()) {
      Fail(absl::StrCat(std::string(kind), " '", std::string(name), "' got multiple values for argument '", k, "'"));
    }
    ++given;
  }
  for (size_t i = args.positional.size(); i < sig->required; ++i) {
    bool named = false;
    for (const auto& [k, v] : args.keyword) named |= k == sig->params[i];
    if (!named) {
      Fail(absl::StrCat(std::string(kind), " '", std::string(name), "' missing required argument '",
                        std::string(sig->params[i]), "'"));
    }
  }
}

}  // namespace

bool IsKnownFilter(std::string_view name) { return FilterNames().count(name) > 0; }
bool IsKnownTest(std::string_view name) { return TestNames().count(name) > 0; }

Value ApplyFilter(std::string_view name, const Value& in, const CallArgs& args) {
  CheckSignature("filter", name, FilterSignature(name), args);
  const auto& P = args.positional;
  auto str_in = [&] { return ToStr(in); };
  if (name == "tojson") {
    // transformers' tojson: json.dumps(x, ensure_ascii=False, indent=...,
    // separators=..., sort_keys=...).
    JsonOptions o;
    o.ensure_ascii = BoolArg(args.Get(0, "ensure_ascii"), false);
    const Value* indent = args.Get(1, "indent");
    if (indent && !indent->is_none()) {
      o.has_indent = true;
      if (indent->is_string()) o.indent = indent->str();
      else o.indent = std::string(std::max<int64_t>(0, IntArg(indent, 0, "indent")), ' ');
      o.item_sep = ",";
    }
    const Value* seps = args.Get(2, "separators");
    if (seps && !seps->is_none()) {
      if (!seps->is_list() || seps->list().size() != 2 || !seps->list()[0].is_string() ||
          !seps->list()[1].is_string()) {
        Fail("tojson: separators must be a pair of strings");
      }
      o.item_sep = seps->list()[0].str();
      o.key_sep = seps->list()[1].str();
    }
    o.sort_keys = BoolArg(args.Get(3, "sort_keys"), false);
    return Value::String(ToJson(in, o));
  }
  if (name == "trim") {
    return Value::String(Strip(str_in(), args.Get(0, "chars"), true, true));
  }
  if (name == "length" || name == "count") return Value::Int(Length(in));
  if (name == "join") {
    std::string sep = P.size() > 0 || args.Get(0, "d") ? ToStr(*args.Get(0, "d")) : "";
    std::vector<std::string> paths = AttrPaths(args.Get(1, "attribute"));
    std::string out;
    bool first = true;
    for (const Value& v : Iterate(in)) {
      if (!first) out += sep;
      first = false;
      out += ToStr(paths.empty() ? v : GetPath(v, paths[0]));
    }
    return Value::String(std::move(out));
  }
  if (name == "first") {
    List items = Iterate(in);
    return items.empty() ? Value::Undefined("No first item, sequence was empty.") : items.front();
  }
  if (name == "last") {
    if (in.is_generator()) Fail("'generator' object is not reversible");
    if (in.is_dict()) Fail("'dict' object is not reversible");
    List items = Iterate(in);
    return items.empty() ? Value::Undefined("No last item, sequence was empty.") : items.back();
  }
  if (name == "list") return Value::MakeList(Iterate(in));
  if (name == "string") return Value::String(str_in());
  if (name == "safe") return in.is_markup() ? in : Value::Markup(str_in());
  if (name == "forceescape") return Value::Markup(HtmlEscape(str_in()));
  if (name == "e" || name == "escape") return in.is_markup() ? in : Value::Markup(HtmlEscape(str_in()));
  if (name == "int") {
    const Value* d = args.Get(0, "default");
    Value def = d ? *d : Value::Int(0);
    if (in.is_int() || in.is_bool()) return Value::Int(in.as_int());
    if (in.is_float()) {
      double f = in.as_number();
      if (!std::isfinite(f)) return def;
      // Python's int is unbounded; refuse rather than print another number.
      if (std::fabs(f) > 9.2e18) Fail("int: value out of the 64-bit range");
      return Value::Int(static_cast<int64_t>(f));
    }
    if (in.is_string()) {
      std::string s = Strip(in.str(), nullptr, true, true);
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && *end == 0 && errno == ERANGE) Fail("int: value out of the 64-bit range");
      if (!s.empty() && *end == 0 && errno == 0) return Value::Int(v);
      double f = std::strtod(s.c_str(), &end);
      if (!s.empty() && *end == 0 && std::isfinite(f) && std::fabs(f) < 9.2e18) return Value::Int(static_cast<int64_t>(f));
    }
    return def;
  }
  if (name == "float") {
    const Value* d = args.Get(0, "default");
    Value def = d ? *d : Value::Float(0);
    if (in.is_number()) return Value::Float(in.as_number());
    if (in.is_string()) {
      std::string s = Strip(in.str(), nullptr, true, true);
      char* end = nullptr;
      double f = std::strtod(s.c_str(), &end);
      if (!s.empty() && *end == 0) return Value::Float(f);
    }
    return def;
  }
  if (name == "lower") return Value::String(Lower(str_in()));
  if (name == "upper") return Value::String(Upper(str_in()));
  if (name == "title") return Value::String(FilterTitle(str_in()));
  if (name == "capitalize") return Value::String(Capitalize(str_in()));
  if (name == "replace") {
    const Value* count = args.Get(2, "count");
    return Value::String(Replace(str_in(), ToStr(*args.Get(0, "old")), ToStr(*args.Get(1, "new")),
                                 count && !count->is_none() ? IntArg(count, -1, "count") : -1));
  }
  if (name == "default" || name == "d") {
    const Value* d = args.Get(0, "default_value");
    bool boolean = BoolArg(args.Get(1, "boolean"), false);
    if (in.is_undefined() || (boolean && !in.Truthy())) return d ? *d : Value::String("");
    return in;
  }
  if (name == "select") return SelectOrReject(in, args, true, false);
  if (name == "reject") return SelectOrReject(in, args, false, false);
  if (name == "selectattr") return SelectOrReject(in, args, true, true);
  if (name == "rejectattr") return SelectOrReject(in, args, false, true);
  if (name == "map") {
    List out;
    if (!in.Truthy()) return Value::Generator({});  // `if value:` as jinja2
    const Value* attribute = nullptr;
    for (const auto& [k, v] : args.keyword) {
      if (k == "attribute") attribute = &v;
    }
    if (attribute) {
      const Value* def = nullptr;
      for (const auto& [k, v] : args.keyword) {
        if (k == "default") def = &v;
      }
      std::vector<std::string> paths = AttrPaths(attribute);
      for (const Value& item : Iterate(in)) {
        Value v = GetPath(item, paths.at(0));
        out.push_back(v.is_undefined() && def ? *def : v);
      }
    } else {
      if (P.empty()) Fail("map requires a filter argument");
      const std::string& f = StrArg(&P[0], "filter name");
      if (!IsKnownFilter(f)) Fail(absl::StrCat("No filter named '", f, "'."));
      CallArgs fargs;
      fargs.positional.assign(P.begin() + 1, P.end());
      fargs.keyword = args.keyword;
      for (const Value& item : Iterate(in)) out.push_back(ApplyFilter(f, item, fargs));
    }
    return Value::Generator(std::move(out));
  }
  if (name == "items") {
    if (in.is_undefined()) return Value::Generator({});
    if (!in.is_dict()) Fail("Can only get item pairs from a mapping.");
    List out;
    for (const auto& [k, v] : in.dict().items) out.push_back(Value::MakeList({k, v}, true));
    return Value::Generator(std::move(out));
  }
  if (name == "dictsort") {
    if (!in.is_dict()) Fail("dictsort expects a mapping");
    bool cs = BoolArg(args.Get(0, "case_sensitive"), false);
    const Value* by = args.Get(1, "by");
    bool by_value = by && by->is_string() && by->str() == "value";
    if (by && !(by->is_string() && (by->str() == "key" || by->str() == "value"))) {
      Fail("You can only sort by either \"key\" or \"value\"");
    }
    bool reverse = BoolArg(args.Get(2, "reverse"), false);
    List pairs;
    for (const auto& [k, v] : in.dict().items) pairs.push_back(Value::MakeList({k, v}, true));
    SortValues(&pairs, {by_value ? "1" : "0"}, cs, reverse);
    return Value::MakeList(std::move(pairs));
  }
  if (name == "sort") {
    bool reverse = BoolArg(args.Get(0, "reverse"), false);
    bool cs = BoolArg(args.Get(1, "case_sensitive"), false);
    List items = Iterate(in);
    SortValues(&items, AttrPaths(args.Get(2, "attribute")), cs, reverse);
    return Value::MakeList(std::move(items));
  }
  if (name == "unique") {
    bool cs = BoolArg(args.Get(0, "case_sensitive"), false);
    std::vector<std::string> paths = AttrPaths(args.Get(1, "attribute"));
    List seen, out;
    for (const Value& v : Iterate(in)) {
      Value k = LowerIfString(paths.empty() ? v : GetPath(v, paths[0]), cs);
      bool dup = false;
      for (const Value& s : seen) {
        if (Equals(s, k)) dup = true;
      }
      if (dup) continue;
      seen.push_back(k);
      out.push_back(v);
    }
    return Value::Generator(std::move(out));
  }
  if (name == "reverse") {
    if (in.is_string()) {
      std::vector<char32_t> cps = Cps(in.str());
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) AppendUtf8(&out, *it);
      return Value::String(std::move(out));
    }
    List items = Iterate(in);
    std::reverse(items.begin(), items.end());
    // reversed() of a list is an iterator; of a generator, a new list.
    return in.is_generator() ? Value::MakeList(std::move(items)) : Value::Generator(std::move(items));
  }
  if (name == "round") {
    int64_t precision = IntArg(args.Get(0, "precision"), 0, "precision");
    const Value* m = args.Get(1, "method");
    std::string method = m ? StrArg(m, "method") : "common";
    if (!in.is_number()) Fail(absl::StrCat("type ", in.TypeName(), " doesn't define __round__ method"));
    double x = in.as_number();
    if (method == "common") {
      // round() of an int stays an int.
      if (!in.is_float() && precision >= 0) return Value::Int(in.as_int());
      return Value::Float(PyRound(x, precision));
    }
    double p = std::pow(10.0, static_cast<double>(precision));
    if (method == "ceil") return Value::Float(std::ceil(x * p) / p);
    if (method == "floor") return Value::Float(std::floor(x * p) / p);
    Fail("method must be common, ceil or floor");
  }
  if (name == "abs") {
    if (in.is_float()) return Value::Float(std::fabs(in.as_number()));
    if (in.is_int() || in.is_bool()) {
      if (in.as_int() == INT64_MIN) Fail("integer overflow");
      return Value::Int(std::llabs(in.as_int()));
    }
    Fail(absl::StrCat("bad operand type for abs(): '", in.TypeName(), "'"));
  }
  if (name == "min") return MinMax(in, args, false);
  if (name == "max") return MinMax(in, args, true);
  if (name == "sum") {
    std::vector<std::string> paths = AttrPaths(args.Get(0, "attribute"));
    const Value* start = args.Get(1, "start");
    Value total = start ? *start : Value::Int(0);
    for (const Value& v : Iterate(in)) total = BinaryOp("+", total, paths.empty() ? v : GetPath(v, paths[0]), INT64_MAX);
    return total;
  }
  if (name == "indent") {
    const Value* w = args.Get(0, "width");
    std::string indention = w && w->is_string() ? w->str() : std::string(std::max<int64_t>(0, IntArg(w, 4, "width")), ' ');
    bool first = BoolArg(args.Get(1, "first"), false);
    bool blank = BoolArg(args.Get(2, "blank"), false);
    std::vector<std::string> lines = SplitLines(str_in() + "\n");
    std::string rv;
    if (blank) {
      for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + indention : "") + lines[i];
    } else {
      rv = lines.empty() ? "" : lines[0];
      for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : indention) + lines[i];
    }
    if (first) rv = indention + rv;
    return Value::String(std::move(rv));
  }
  if (name == "wordcount") {
    // len(re.findall(r"\w+", s)): runs of letters, digits and underscore.
    int64_t n = 0;
    bool in_word = false;
    size_t pos = 0;
    std::string s = str_in();
    while (pos < s.size()) {
      char32_t c = DecodeUtf8(s, &pos);
      bool w = (c >= '0' && c <= '9') || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
               (c >= 0x80 && !IsPySpace(c) && !(c >= 0x2000 && c <= 0x206f) && !(c >= 0x3000 && c <= 0x303f) &&
                !(c >= 0xff00 && c <= 0xff0f) && !(c >= 0x1f000));
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value::Int(n);
  }
  if (name == "truncate") {
    std::string s = str_in();
    int64_t length = IntArg(args.Get(0, "length"), 255, "length");
    bool killwords = BoolArg(args.Get(1, "killwords"), false);
    const Value* end_v = args.Get(2, "end");
    std::string end = end_v ? ToStr(*end_v) : "...";
    int64_t leeway = IntArg(args.Get(3, "leeway"), 5, "leeway");
    std::vector<size_t> off = CodePointOffsets(s);
    int64_t n = static_cast<int64_t>(off.size()) - 1;
    int64_t end_len = static_cast<int64_t>(CodePointCount(end));
    if (length < end_len) Fail("expected length >= len(end)");
    if (leeway < 0) Fail("expected leeway >= 0");
    if (n <= length + leeway) return Value::String(s);
    int64_t keep = length - end_len;
    std::string head = s.substr(0, off[keep]);
    if (killwords) return Value::String(head + end);
    size_t sp = head.rfind(' ');
    if (sp != std::string::npos) head = head.substr(0, sp);
    return Value::String(head + end);
  }
  if (name == "batch") {
    int64_t count = IntArg(args.Get(0, "linecount"), 1, "linecount");
    if (count <= 0) Fail("batch size must be positive");
    const Value* fill = args.Get(1, "fill_with");
    List out, cur;
    for (const Value& v : Iterate(in)) {
      cur.push_back(v);
      if (static_cast<int64_t>(cur.size()) == count) {
        out.push_back(Value::MakeList(std::move(cur)));
        cur.clear();
      }
    }
    if (!cur.empty()) {
      if (fill && !fill->is_none()) while (static_cast<int64_t>(cur.size()) < count) cur.push_back(*fill);
      out.push_back(Value::MakeList(std::move(cur)));
    }
    return Value::Generator(std::move(out));
  }
  if (name == "center") {
    std::string s = str_in();
    int64_t width = IntArg(args.Get(0, "width"), 80, "width");
    int64_t n = static_cast<int64_t>(CodePointCount(s));
    if (width <= n) return Value::String(s);
    int64_t pad = width - n;
    int64_t left = pad / 2 + (pad & width & 1);
    return Value::String(std::string(left, ' ') + s + std::string(pad - left, ' '));
  }
  if (name == "format") {
    if (!args.keyword.empty() && !P.empty()) Fail("can't handle positional and keyword arguments at the same time");
    return Value::String(PrintfFormat(str_in(), P));
  }
  if (name == "attr") {
    // Python's getattr only: a dict's keys are not its attributes.
    const std::string& attr = StrArg(args.Get(0, "name"), "attribute name");
    if (in.is_dict() && !HasMethod(in, attr)) {
      return Value::Undefined(absl::StrCat("'dict object' has no attribute '", attr, "'"));
    }
    return GetAttr(in, attr);
  }
  if (name == "striptags") Fail("striptags is not supported");
  Fail(absl::StrCat("No filter named '", std::string(name), "'."));
}

bool ApplyTest(std::string_view name, const Value& v, const CallArgs& args) {
  const Signature* sig = TestSignature(name);
  CheckSignature("test", name, sig, args);
  const Value* arg = sig->params.empty() ? nullptr : args.Get(0, sig->params[0]);
  auto need = [&]() -> const Value& {
    if (arg == nullptr) Fail(absl::StrCat("test '", std::string(name), "' needs an argument"));
    return *arg;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "sequence") return v.is_string() || (v.is_list() && !v.is_generator()) || v.is_dict() || v.is_undefined();
  if (name == "callable") return v.is_callable();
  if (name == "sameas") return v.SameAs(need());
  if (name == "escaped") return false;
  if (name == "lower") return v.is_string() && Lower(v.str()) == v.str() && Upper(v.str()) != v.str();
  if (name == "upper") return v.is_string() && Upper(v.str()) == v.str() && Lower(v.str()) != v.str();
  if (name == "odd" || name == "even" || name == "divisibleby") {
    Value d = name == "divisibleby" ? need() : Value::Int(2);
    Value r = BinaryOp("%", v, d, INT64_MAX);
    if (name == "odd") return Equals(r, Value::Int(1));
    return Equals(r, Value::Int(0));
  }
  if (name == "eq" || name == "equalto" || name == "==") return Equals(v, need());
  if (name == "ne" || name == "!=") return !Equals(v, need());
  if (name == "lt" || name == "<" || name == "lessthan") return Compare(v, need()) < 0;
  if (name == "le" || name == "<=") return Compare(v, need()) <= 0;
  if (name == "gt" || name == ">" || name == "greaterthan") return Compare(v, need()) > 0;
  if (name == "ge" || name == ">=") return Compare(v, need()) >= 0;
  if (name == "in") return Contains(need(), v);
  if (name == "filter") return v.is_string() && IsKnownFilter(v.str());
  if (name == "test") return v.is_string() && IsKnownTest(v.str());
  Fail(absl::StrCat("No test named '", std::string(name), "'."));
}

bool HasMethod(const Value& self, std::string_view name) {
  static const std::set<std::string_view> str_methods = {
      "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "replace",
      "upper", "lower", "title", "capitalize", "find", "rfind", "index", "count", "join",
      "format", "splitlines", "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower",
      "removeprefix", "removesuffix", "zfill", "ljust", "rjust", "center", "partition",
      "rpartition", "swapcase", "casefold", "isnumeric", "isdecimal"};
  // Mutating methods are absent: the immutable sandbox treats them as
  // unsafe attributes (undefined; calling one fails).
  static const std::set<std::string_view> dict_methods = {"items", "keys", "values", "get", "copy"};
  static const std::set<std::string_view> list_methods = {"index", "count", "copy"};
  if (self.is_string()) return str_methods.count(name) > 0;
  if (self.is_dict()) return dict_methods.count(name) > 0;
  if (self.is_list() && !self.is_generator()) {
    return self.is_tuple() ? (name == "index" || name == "count") : list_methods.count(name) > 0;
  }
  return false;
}

Value CallMethod(const Value& self, std::string_view name, const CallArgs& args) {
  const auto& P = args.positional;
  if (self.is_loop() && name == "cycle") {
    if (P.empty()) Fail("no items for cycling given");
    return P[self.loop().index0 % static_cast<int64_t>(P.size())];
  }
  if (self.is_dict()) {
    const Dict& d = self.dict();
    if (name == "items" || name == "keys" || name == "values") {
      List out;
      for (const auto& [k, v] : d.items) {
        out.push_back(name == "items" ? Value::MakeList({k, v}, true) : name == "keys" ? k : v);
      }
      return Value::MakeList(std::move(out));
    }
    if (name == "get") {
      if (P.empty()) Fail("get expected at least 1 argument");
      const Value* v = d.Find(P[0]);
      return v ? *v : (P.size() > 1 ? P[1] : Value::None());
    }
    if (name == "copy") return self;
  }
  if (self.is_list()) {
    if (name == "copy") return Value::MakeList(self.list());
    if (name == "count") {
      if (P.empty()) Fail("count() takes exactly one argument");
      int64_t n = 0;
      for (const Value& v : self.list()) n += Equals(v, P[0]);
      return Value::Int(n);
    }
    if (name == "index") {
      if (P.empty()) Fail("index expected at least 1 argument");
      for (size_t i = 0; i < self.list().size(); ++i) {
        if (Equals(self.list()[i], P[0])) return Value::Int(static_cast<int64_t>(i));
      }
      Fail("value is not in list");
    }
  }
  if (self.is_string()) {
    const std::string& s = self.str();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      return Value::String(Strip(s, args.Get(0, "chars"), name != "rstrip", name != "lstrip"));
    }
    if (name == "split" || name == "rsplit") {
      const Value* ms = args.Get(1, "maxsplit");
      return Value::MakeList(Split(s, args.Get(0, "sep"), IntArg(ms, -1, "maxsplit"), name == "rsplit"));
    }
    if (name == "startswith" || name == "endswith") {
      if (P.empty()) Fail(absl::StrCat(std::string(name), " takes at least 1 argument"));
      List options = P[0].is_tuple() ? P[0].list() : List{P[0]};
      for (const Value& o : options) {
        if (!o.is_string()) Fail(absl::StrCat(std::string(name), " first arg must be str or a tuple of str"));
        const std::string& x = o.str();
        if (x.size() <= s.size() && (name == "startswith" ? s.compare(0, x.size(), x) == 0
                                                         : s.compare(s.size() - x.size(), x.size(), x) == 0)) {
          return Value::Bool(true);
        }
      }
      return Value::Bool(false);
    }
    if (name == "replace") {
      if (P.size() < 2 || !P[0].is_string() || !P[1].is_string()) Fail("replace expects two strings");
      return Value::String(Replace(s, P[0].str(), P[1].str(), IntArg(args.Get(2, "count"), -1, "count")));
    }
    if (name == "upper") return Value::String(Upper(s));
    if (name == "lower") return Value::String(Lower(s));
    if (name == "title") return Value::String(PyTitle(s));
    if (name == "capitalize") return Value::String(Capitalize(s));
    if (name == "find" || name == "rfind" || name == "index") {
      if (P.empty() || !P[0].is_string()) Fail(absl::StrCat(std::string(name), " expects a string"));
      size_t f = name == "rfind" ? s.rfind(P[0].str()) : s.find(P[0].str());
      if (f == std::string::npos) {
        if (name == "index") Fail("substring not found");
        return Value::Int(-1);
      }
      return Value::Int(static_cast<int64_t>(CodePointCount(std::string_view(s).substr(0, f))));
    }
    if (name == "count") {
      if (P.empty() || !P[0].is_string()) Fail("count expects a string");
      const std::string& x = P[0].str();
      if (x.empty()) return Value::Int(static_cast<int64_t>(CodePointCount(s)) + 1);
      int64_t n = 0;
      for (size_t f = s.find(x); f != std::string::npos; f = s.find(x, f + x.size())) ++n;
      return Value::Int(n);
    }
    if (name == "join") {
      if (P.empty()) Fail("join takes exactly one argument");
      std::string out;
      bool first = true;
      for (const Value& v : Iterate(P[0])) {
        if (!v.is_string()) Fail(absl::StrCat("sequence item: expected str instance, ", v.TypeName(), " found"));
        if (!first) out += s;
        first = false;
        out += v.str();
      }
      return Value::String(std::move(out));
    }
    if (name == "format") return Value::String(PyFormat(s, args));
    if (name == "splitlines") {
      List out;
      for (auto& l : SplitLines(s)) out.push_back(Value::String(std::move(l)));
      return Value::MakeList(std::move(out));
    }
    if (name == "removeprefix" || name == "removesuffix") {
      if (P.empty() || !P[0].is_string()) Fail(absl::StrCat(std::string(name), " expects a string"));
      const std::string& x = P[0].str();
      if (name == "removeprefix") return Value::String(s.compare(0, x.size(), x) == 0 ? s.substr(x.size()) : s);
      return Value::String(x.size() <= s.size() && s.compare(s.size() - x.size(), x.size(), x) == 0
                               ? s.substr(0, s.size() - x.size()) : s);
    }
    if (name == "zfill" || name == "ljust" || name == "rjust" || name == "center") {
      int64_t width = IntArg(args.Get(0, "width"), 0, "width");
      const Value* fill_v = args.Get(1, "fillchar");
      std::string fill = fill_v ? StrArg(fill_v, "fillchar") : " ";
      if (CodePointCount(fill) != 1) Fail("The fill character must be exactly one character long");
      int64_t n = static_cast<int64_t>(CodePointCount(s));
      if (width <= n) return Value::String(s);
      int64_t pad = width - n, left = 0;
      if (name == "zfill") {
        bool sign = !s.empty() && (s[0] == '+' || s[0] == '-');
        std::string out = sign ? s.substr(0, 1) : "";
        out += std::string(pad, '0');
        out += sign ? s.substr(1) : s;
        return Value::String(std::move(out));
      }
      if (name == "rjust") left = pad;
      if (name == "center") left = pad / 2 + (pad & width & 1);
      std::string out;
      for (int64_t i = 0; i < left; ++i) out += fill;
      out += s;
      for (int64_t i = left; i < pad; ++i) out += fill;
      return Value::String(std::move(out));
    }
    if (name == "partition" || name == "rpartition") {
      const std::string& sep = StrArg(args.Get(0, "sep"), "separator");
      if (sep.empty()) Fail("empty separator");
      size_t f = name == "partition" ? s.find(sep) : s.rfind(sep);
      if (f == std::string::npos) {
        return name == "partition" ? Value::MakeList({Value::String(s), Value::String(""), Value::String("")}, true)
                                   : Value::MakeList({Value::String(""), Value::String(""), Value::String(s)}, true);
      }
      return Value::MakeList({Value::String(s.substr(0, f)), Value::String(sep), Value::String(s.substr(f + sep.size()))},
                             true);
    }
    if (name == "swapcase") {
      return Value::String(MapCps(s, [](std::string* out, char32_t c) {
        AppendUtf8(out, ToUpperCp(c) != c ? ToUpperCp(c) : ToLowerCp(c));
      }));
    }
    if (name == "casefold") return Value::String(Lower(s));
    if (name == "isnumeric" || name == "isdecimal") {
      if (s.empty()) return Value::Bool(false);
      return Value::Bool(std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }));
    }
    if (name.substr(0, 2) == "is") {
      if (s.empty()) return Value::Bool(false);
      bool all = true, any_cased = false;
      size_t pos = 0;
      while (pos < s.size()) {
        char32_t c = DecodeUtf8(s, &pos);
        bool digit = c >= '0' && c <= '9';
        bool alpha = IsCased(c) || (c >= 0x4e00 && c <= 0x9fff);
        if (name == "isdigit") all &= digit;
        else if (name == "isalpha") all &= alpha;
        else if (name == "isalnum") all &= digit || alpha;
        else if (name == "isspace") all &= IsPySpace(c);
        else if (name == "isupper" && IsCased(c)) {
          any_cased = true;
          all &= ToUpperCp(c) == c && c != 0xdf;
        } else if (name == "islower" && IsCased(c)) {
          any_cased = true;
          all &= ToLowerCp(c) == c;
        }
      }
      if (name == "isupper" || name == "islower") return Value::Bool(all && any_cased);
      return Value::Bool(all);
    }
  }
  Fail(absl::StrCat("'", self.TypeName(), "' object has no method '", std::string(name), "'"));
}

namespace {

// str.format with {} / {0} / {name} fields and no format specs.
std::string PyFormat(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      size_t close = fmt.find('}', i);
      if (close == std::string::npos) Fail("Single '{' encountered in format string");
      std::string field = fmt.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos) Fail("format specs are not supported");
      const Value* v = nullptr;
      if (field.empty()) {
        if (auto_index < args.positional.size()) v = &args.positional[auto_index];
        ++auto_index;
      } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
        size_t idx = std::stoul(field);
        if (idx < args.positional.size()) v = &args.positional[idx];
      } else {
        for (const auto& [k, val] : args.keyword) {
          if (k == field) v = &val;
        }
      }
      if (v == nullptr) Fail(absl::StrCat("format: missing argument for {", field, "}"));
      out += ToStr(*v);
      i = close;
    } else if (c == '}') {
      Fail("Single '}' encountered in format string");
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

// printf-style formatting for the `format` filter and `%`: %s %r %d %i %%.
std::string PrintfFormat(const std::string& fmt, const List& args) {
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) Fail("incomplete format");
    char f = fmt[i];
    if (f == '%') {
      out += '%';
      continue;
    }
    if (next >= args.size()) Fail("not enough arguments for format string");
    const Value& v = args[next++];
    if (f == 's') out += ToStr(v);
    else if (f == 'r') out += Repr(v);
    else if (f == 'd' || f == 'i') {
      if (!v.is_number()) Fail(absl::StrCat("%d format: a real number is required, not ", v.TypeName()));
      out += std::to_string(v.is_float() ? static_cast<int64_t>(v.as_number()) : v.as_int());
    } else {
      Fail(absl::StrCat("unsupported format character '", std::string(1, f), "'"));
    }
  }
  if (next < args.size()) Fail("not all arguments converted during string formatting");
  return out;
}

}  // namespace specline::jinja
