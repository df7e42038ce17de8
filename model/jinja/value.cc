// Python's semantics for the values templates see: truthiness, equality and
// ordering, str()/repr() and json.dumps, each as CPython prints it, since
// chat templates print Python objects into prompts.
#include "model/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace specline::jinja {

void Fail(std::string message) { throw Error{absl::StatusCode::kInvalidArgument, std::move(message)}; }
void FailLimit(std::string message) {
  throw Error{absl::StatusCode::kResourceExhausted, std::move(message)};
}

Value Value::MakeList(List items, bool tuple) {
  Value v(Kind::kList);
  v.flag_ = tuple ? kTuple : kPlain;
  v.ptr_ = std::make_shared<const List>(std::move(items));
  return v;
}
Value Value::Generator(List items) {
  Value v = MakeList(std::move(items));
  v.flag_ = kGenerator;
  return v;
}
Value Value::MakeDict(Dict dict) {
  Value v(Kind::kDict);
  v.ptr_ = std::make_shared<const Dict>(std::move(dict));
  return v;
}
Value Value::MakeCallable(std::shared_ptr<const Callable> c) {
  Value v(Kind::kCallable);
  v.ptr_ = std::move(c);
  return v;
}
Value Value::MakeNamespace(std::shared_ptr<Namespace> ns) {
  Value v(Kind::kNamespace);
  v.ptr_ = std::move(ns);
  return v;
}
Value Value::MakeLoop(std::shared_ptr<const LoopState> loop) {
  Value v(Kind::kLoop);
  v.ptr_ = std::move(loop);
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& j, int depth) {
  // Deeper than Python's own json module would go without RecursionError.
  if (depth > 500) FailLimit("context nested too deeply");
  switch (j.type()) {
    case nlohmann::json::value_t::null: return None();
    case nlohmann::json::value_t::boolean: return Bool(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return Int(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) Fail("integer in the context is too large");
      return Int(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Float(j.get<double>());
    case nlohmann::json::value_t::string: return String(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e, depth + 1));
      return MakeList(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      d.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        d.items.emplace_back(String(it.key()), FromJson(it.value(), depth + 1));
      }
      return MakeDict(std::move(d));
    }
    default: Fail("unsupported JSON value in the context");
  }
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool:
    case Kind::kInt: return int_ != 0;
    case Kind::kFloat: return float_ != 0;
    case Kind::kString: return !str_.empty();
    case Kind::kList: return flag_ == kGenerator || !list().empty();
    case Kind::kDict: return !dict().items.empty();
    default: return true;
  }
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return flag_ == kTuple ? "tuple" : flag_ == kGenerator ? "generator" : "list";
    case Kind::kDict: return "dict";
    case Kind::kCallable: return "function";
    case Kind::kNamespace: return "Namespace";
    case Kind::kLoop: return "LoopContext";
  }
  return "object";
}

bool Value::SameAs(const Value& other) const {
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined: return false;  // distinct Undefined objects
    case Kind::kNone: return true;
    case Kind::kBool: return int_ == other.int_;
    case Kind::kInt:  // CPython caches small ints; larger ones are distinct objects
      return int_ == other.int_ && int_ >= -5 && int_ <= 256;
    case Kind::kFloat: return false;
    case Kind::kString: return false;
    default: return ptr_ == other.ptr_;
  }
}

const Value* Dict::Find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (Equals(k, key)) return &v;
  }
  return nullptr;
}
const Value* Dict::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}
void Dict::Set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (Equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::Get(size_t pos, std::string_view name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  if (pos < positional.size()) return &positional[pos];
  return nullptr;
}

bool Equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_number() == b.as_number();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone: return true;
    case K::kString: return a.str() == b.str();
    case K::kList: {
      if (a.is_tuple() != b.is_tuple()) return false;
      if (a.is_generator() || b.is_generator()) return a.SameAs(b);
      const List& x = a.list();
      const List& y = b.list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!Equals(x[i], y[i])) return false;
      }
      return true;
    }
    case K::kDict: {
      const Dict& x = a.dict();
      const Dict& y = b.dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* o = y.Find(k);
        if (o == nullptr || !Equals(v, *o)) return false;
      }
      return true;
    }
    default: return a.SameAs(b);
  }
}

int Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_number(), y = b.as_number();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order is code point order, as Python compares str.
    int c = a.str().compare(b.str());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && !a.is_generator() && !b.is_generator() &&
      a.is_tuple() == b.is_tuple()) {
    const List& x = a.list();
    const List& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!Equals(x[i], y[i])) return Compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  Fail(absl::StrCat("'<' not supported between instances of '", a.TypeName(), "' and '",
                    b.TypeName(), "'"));
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: positional for
  // exponents in [-4, 16), scientific with a 2-digit exponent otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exp = std::atoi(sci.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    int point = exp + 1;  // digits before the decimal point
    if (point <= 0) {
      out += "0." + std::string(-point, '0') + digits;
    } else if (point >= static_cast<int>(digits.size())) {
      out += digits + std::string(point - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, point) + "." + digits.substr(point);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + ebuf;
}

namespace {

// Python's repr of a str: single quotes unless the text holds a single
// quote and no double quote; backslash escapes for control characters.
std::string ReprString(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  size_t pos = 0;
  while (pos < s.size()) {
    size_t start = pos;
    char32_t cp = DecodeUtf8(s, &pos);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0) || cp == 0xad) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
      out += buf;
    } else if ((cp >= 0x2028 && cp <= 0x2029) || (cp >= 0x200b && cp <= 0x200f) ||
               (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x2064) ||
               cp == 0xfeff || (cp >= 0xd800 && cp <= 0xdfff)) {
      // Not printable for str.isprintable(): separators and format chars.
      char buf[12];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(s, start, pos - start);
    }
  }
  out += quote;
  return out;
}

void AppendRepr(std::string* out, const Value& v, int depth);

void AppendStr(std::string* out, const Value& v, int depth) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::kUndefined: return;
    case K::kNone: *out += "None"; return;
    case K::kBool: *out += v.as_bool() ? "True" : "False"; return;
    case K::kInt: *out += std::to_string(v.as_int()); return;
    case K::kFloat: *out += FloatRepr(v.as_number()); return;
    case K::kString: *out += v.str(); return;
    default: AppendRepr(out, v, depth);
  }
}

void AppendRepr(std::string* out, const Value& v, int depth) {
  if (depth > 500) FailLimit("value nested too deeply to print");
  using K = Value::Kind;
  switch (v.kind()) {
    case K::kString: *out += ReprString(v.str()); return;
    case K::kList: {
      if (v.is_generator()) {
        *out += "<generator object>";
        return;
      }
      *out += v.is_tuple() ? '(' : '[';
      const List& l = v.list();
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) *out += ", ";
        AppendRepr(out, l[i], depth + 1);
      }
      if (v.is_tuple() && l.size() == 1) *out += ',';
      *out += v.is_tuple() ? ')' : ']';
      return;
    }
    case K::kDict: {
      *out += '{';
      bool first = true;
      for (const auto& [k, val] : v.dict().items) {
        if (!first) *out += ", ";
        first = false;
        AppendRepr(out, k, depth + 1);
        *out += ": ";
        AppendRepr(out, val, depth + 1);
      }
      *out += '}';
      return;
    }
    case K::kNamespace: {
      *out += "<Namespace ";
      AppendRepr(out, Value::MakeDict(v.ns().attrs), depth + 1);
      *out += '>';
      return;
    }
    case K::kCallable: *out += "<function " + v.callable().name + ">"; return;
    case K::kLoop: *out += "<LoopContext>"; return;
    case K::kUndefined: *out += "Undefined"; return;  // repr(), inside a list or tuple
    default: AppendStr(out, v, depth);
  }
}

void AppendJsonString(std::string* out, const std::string& s, bool ensure_ascii) {
  *out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    unsigned char u = static_cast<unsigned char>(c);
    if (ensure_ascii && u == 0x7f) {
      *out += "\\u007f";
      continue;
    }
    if (ensure_ascii && u >= 0x80) {
      size_t pos = i;
      char32_t cp = DecodeUtf8(s, &pos);
      i = pos - 1;
      char buf[16];
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xd800 + (cp >> 10)),
                      static_cast<unsigned>(0xdc00 + (cp & 0x3ff)));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      }
      *out += buf;
      continue;
    }
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (u < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", u);
          *out += buf;
        } else {
          *out += c;
        }
    }
  }
  *out += '"';
}

// A dict key as json.dumps turns it into a string.
std::string JsonKey(const Value& k) {
  using K = Value::Kind;
  switch (k.kind()) {
    case K::kString: return k.str();
    case K::kBool: return k.as_bool() ? "true" : "false";
    case K::kNone: return "null";
    case K::kInt: return std::to_string(k.as_int());
    case K::kFloat: return FloatRepr(k.as_number());
    default:
      Fail(absl::StrCat("keys must be str, int, float, bool or None, not ", k.TypeName()));
  }
}

void AppendJson(std::string* out, const Value& v, const JsonOptions& o, int level) {
  if (level > 500) FailLimit("value nested too deeply for tojson");
  using K = Value::Kind;
  auto newline = [&](int lvl) {
    *out += '\n';
    for (int i = 0; i < lvl; ++i) *out += o.indent;
  };
  switch (v.kind()) {
    case K::kNone: *out += "null"; return;
    case K::kBool: *out += v.as_bool() ? "true" : "false"; return;
    case K::kInt: *out += std::to_string(v.as_int()); return;
    case K::kFloat: {
      double d = v.as_number();
      if (std::isnan(d)) *out += "NaN";
      else if (std::isinf(d)) *out += d > 0 ? "Infinity" : "-Infinity";
      else *out += FloatRepr(d);
      return;
    }
    case K::kString: AppendJsonString(out, v.str(), o.ensure_ascii); return;
    case K::kList: {
      if (v.is_generator()) break;
      const List& l = v.list();
      if (l.empty()) {
        *out += "[]";
        return;
      }
      *out += '[';
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) *out += o.item_sep;
        if (o.has_indent) newline(level + 1);
        AppendJson(out, l[i], o, level + 1);
      }
      if (o.has_indent) newline(level);
      *out += ']';
      return;
    }
    case K::kDict: {
      const Dict& d = v.dict();
      if (d.items.empty()) {
        *out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      entries.reserve(d.items.size());
      for (const auto& [k, val] : d.items) entries.emplace_back(JsonKey(k), &val);
      if (o.sort_keys) {
        for (const auto& [k, val] : d.items) {
          if (!k.is_string()) Fail("tojson: sort_keys needs string keys");
        }
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      *out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) *out += o.item_sep;
        if (o.has_indent) newline(level + 1);
        AppendJsonString(out, entries[i].first, o.ensure_ascii);
        *out += o.key_sep;
        AppendJson(out, *entries[i].second, o, level + 1);
      }
      if (o.has_indent) newline(level);
      *out += '}';
      return;
    }
    default: break;
  }
  Fail(absl::StrCat("Object of type ", v.TypeName(), " is not JSON serializable"));
}

}  // namespace

std::string ToStr(const Value& v) {
  std::string out;
  AppendStr(&out, v, 0);
  return out;
}

std::string Repr(const Value& v) {
  if (v.is_undefined()) return "Undefined";
  std::string out;
  AppendRepr(&out, v, 0);
  return out;
}

std::string ToJson(const Value& v, const JsonOptions& options) {
  std::string out;
  AppendJson(&out, v, options, 0);
  return out;
}

char32_t DecodeUtf8(std::string_view s, size_t* pos) {
  unsigned char c = static_cast<unsigned char>(s[*pos]);
  int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (*pos + len > s.size()) len = 1;
  char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
  for (int i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[*pos + i]) & 0x3f);
  *pos += len;
  return cp;
}

void AppendUtf8(std::string* out, char32_t cp) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xc0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xe0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    *out += static_cast<char>(0xf0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

size_t CodePointCount(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  return n;
}

std::vector<size_t> CodePointOffsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xc0) != 0x80) offsets.push_back(i);
  }
  offsets.push_back(s.size());
  return offsets;
}

bool IsPySpace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

}  // namespace specline::jinja
