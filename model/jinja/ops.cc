// jinja2's object protocol over Values: attribute/item access (which never
// raise except on Undefined, as Environment.getattr/getitem turn Python's
// errors into Undefined), slicing and indexing by code point, iteration,
// and the arithmetic operators with Python's int/float semantics.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/jinja/builtins.h"

namespace specline::jinja {

void FailUndefined(const Value& v) {
  if (v.str().empty()) Fail("value is undefined");
  Fail(v.str());
}

void RequireDefined(const Value& v) {
  if (v.is_undefined()) FailUndefined(v);
}

namespace {

Value UndefinedAttr(const Value& obj, const std::string& name) {
  return Value::Undefined(absl::StrCat("'", obj.TypeName(), " object' has no attribute '", std::string(name), "'"));
}

Value BoundMethod(const Value& obj, const std::string& name) {
  auto c = std::make_shared<Callable>();
  c->name = name;
  c->self = obj;
  c->is_method = true;
  return Value::MakeCallable(std::move(c));
}

// Python's index normalisation: negative counts from the end.
bool NormalizeIndex(int64_t* i, int64_t n) {
  if (*i < 0) *i += n;
  return *i >= 0 && *i < n;
}

}  // namespace

Value GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) {
    FailUndefined(obj.str().empty() ? obj : Value::Undefined(obj.str()));
  }
  // The sandbox hides underscore attributes (an unsafe-access Undefined).
  if (!name.empty() && name[0] == '_') return UndefinedAttr(obj, name);
  if (obj.is_namespace()) {
    const Value* v = obj.ns().attrs.Find(name);
    return v ? *v : UndefinedAttr(obj, name);
  }
  if (obj.is_loop()) {
    const LoopState& l = obj.loop();
    int64_t n = static_cast<int64_t>(l.items->size());
    int64_t i = l.index0;
    if (name == "index") return Value::Int(i + 1);
    if (name == "index0") return Value::Int(i);
    if (name == "revindex") return Value::Int(n - i);
    if (name == "revindex0") return Value::Int(n - i - 1);
    if (name == "first") return Value::Bool(i == 0);
    if (name == "last") return Value::Bool(i == n - 1);
    if (name == "length") return Value::Int(n);
    if (name == "depth") return Value::Int(l.depth0 + 1);
    if (name == "depth0") return Value::Int(l.depth0);
    if (name == "previtem") {
      return i > 0 ? (*l.items)[i - 1] : Value::Undefined("there is no previous item");
    }
    if (name == "nextitem") {
      return i + 1 < n ? (*l.items)[i + 1] : Value::Undefined("there is no next item");
    }
    if (name == "cycle") return BoundMethod(obj, name);
    return UndefinedAttr(obj, name);
  }
  if (HasMethod(obj, name)) return BoundMethod(obj, name);
  if (obj.is_dict()) {
    const Value* v = obj.dict().Find(name);
    if (v) return *v;
  }
  return UndefinedAttr(obj, name);
}

Value GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) FailUndefined(obj);
  if (obj.is_dict()) {
    const Value* v = obj.dict().Find(key);
    if (v) return *v;
  } else if ((obj.is_list() && !obj.is_generator()) || obj.is_string()) {
    if (key.is_int() || key.is_bool()) {
      int64_t i = key.as_int();
      if (obj.is_list()) {
        if (NormalizeIndex(&i, static_cast<int64_t>(obj.list().size()))) return obj.list()[i];
      } else {
        std::vector<size_t> off = CodePointOffsets(obj.str());
        if (NormalizeIndex(&i, static_cast<int64_t>(off.size()) - 1)) {
          return Value::String(obj.str().substr(off[i], off[i + 1] - off[i]));
        }
      }
      return Value::Undefined(absl::StrCat(obj.TypeName(), " object has no element ", key.as_int()));
    }
  }
  // A string key falls back to attribute lookup (d['items'] is the method).
  if (key.is_string()) return GetAttr(obj, key.str());
  return Value::Undefined(absl::StrCat(obj.TypeName(), " object has no element ", Repr(key)));
}

Value Slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) FailUndefined(obj);
  auto get = [](const Value& v, bool* present) -> int64_t {
    *present = false;
    if (v.is_none()) return 0;  // an Undefined index is a TypeError, as in Python
    if (!v.is_int() && !v.is_bool()) Fail("slice indices must be integers or None");
    *present = true;
    return v.as_int();
  };
  bool has_start, has_stop, has_step;
  int64_t a = get(start, &has_start), b = get(stop, &has_stop), c = get(step, &has_step);
  if (!has_step) c = 1;
  if (c == 0) Fail("slice step cannot be zero");
  bool is_str = obj.is_string();
  if (!is_str && !(obj.is_list() && !obj.is_generator())) {
    return Value::Undefined(absl::StrCat("'", obj.TypeName(), "' object is not subscriptable"));
  }
  std::vector<size_t> off;
  int64_t n;
  if (is_str) {
    off = CodePointOffsets(obj.str());
    n = static_cast<int64_t>(off.size()) - 1;
  } else {
    n = static_cast<int64_t>(obj.list().size());
  }
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](int64_t v, bool present, int64_t def) {
    if (!present) return def;
    if (v < 0) {
      v += n;
      if (v < 0) v = c < 0 ? -1 : 0;
    } else if (v >= n) {
      v = c < 0 ? n - 1 : n;
    }
    return v;
  };
  a = adjust(a, has_start, c < 0 ? n - 1 : 0);
  b = adjust(b, has_stop, c < 0 ? -1 : n);
  if (is_str) {
    std::string out;
    for (int64_t i = a; c > 0 ? i < b : i > b; i += c) out.append(obj.str(), off[i], off[i + 1] - off[i]);
    return Value::String(std::move(out));
  }
  List out;
  for (int64_t i = a; c > 0 ? i < b : i > b; i += c) out.push_back(obj.list()[i]);
  return Value::MakeList(std::move(out), obj.is_tuple());
}

List Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.list();
    case Value::Kind::kDict: {
      List keys;
      keys.reserve(v.dict().items.size());
      for (const auto& [k, _] : v.dict().items) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      const std::string& s = v.str();
      size_t pos = 0;
      while (pos < s.size()) {
        size_t start = pos;
        DecodeUtf8(s, &pos);
        chars.push_back(Value::String(s.substr(start, pos - start)));
      }
      return chars;
    }
    default: Fail(absl::StrCat("'", v.TypeName(), "' object is not iterable"));
  }
}

int64_t Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(CodePointCount(v.str()));
    case Value::Kind::kList:
      if (v.is_generator()) break;
      return static_cast<int64_t>(v.list().size());
    case Value::Kind::kDict: return static_cast<int64_t>(v.dict().items.size());
    default: break;
  }
  Fail(absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
}

bool Contains(const Value& c, const Value& item) {
  if (c.is_string()) {
    if (!item.is_string()) {
      Fail(absl::StrCat("'in <string>' requires string as left operand, not ", item.TypeName()));
    }
    return c.str().find(item.str()) != std::string::npos;
  }
  if (c.is_dict()) return c.dict().Find(item) != nullptr;
  if (c.is_list()) {
    for (const Value& e : c.list()) {
      if (Equals(e, item)) return true;
    }
    return false;
  }
  if (c.is_undefined()) return false;
  Fail(absl::StrCat("argument of type '", c.TypeName(), "' is not iterable"));
}

namespace {

[[noreturn]] void Unsupported(std::string_view op, const Value& a, const Value& b) {
  Fail(absl::StrCat("unsupported operand type(s) for ", std::string(op), ": '", a.TypeName(), "' and '",
                    b.TypeName(), "'"));
}

Value Repeat(const Value& seq, int64_t times, int64_t max_string) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    if (times > 0 && static_cast<int64_t>(seq.str().size()) > max_string / times) {
      FailLimit("max_output_bytes exceeded by string repetition");
    }
    std::string out;
    out.reserve(seq.str().size() * times);
    for (int64_t i = 0; i < times; ++i) out += seq.str();
    return Value::String(std::move(out));
  }
  if (times > 0 && static_cast<int64_t>(seq.list().size()) > max_string / times) {
    FailLimit("max_output_bytes exceeded by list repetition");
  }
  List out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return Value::MakeList(std::move(out), seq.is_tuple());
}

}  // namespace

Value BinaryOp(std::string_view op, const Value& a, const Value& b, int64_t max_string) {
  if (op == "~") return Value::String(ToStr(a) + ToStr(b));
  if (a.is_undefined()) FailUndefined(a);
  if (b.is_undefined()) FailUndefined(b);
  bool nums = a.is_number() && b.is_number();
  bool ints = nums && !a.is_float() && !b.is_float();
  if (op == "+") {
    if (ints) {
      int64_t r = 0;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) Fail("integer overflow");
      return Value::Int(r);
    }
    if (nums) return Value::Float(a.as_number() + b.as_number());
    if (a.is_string() && b.is_string()) {
      // Markup + str escapes the str (either side); the result is Markup.
      if (a.is_markup() != b.is_markup()) {
        return Value::Markup(a.is_markup() ? a.str() + HtmlEscape(b.str()) : HtmlEscape(a.str()) + b.str());
      }
      return a.is_markup() ? Value::Markup(a.str() + b.str()) : Value::String(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && !a.is_generator() && !b.is_generator() &&
        a.is_tuple() == b.is_tuple()) {
      List out = a.list();
      out.insert(out.end(), b.list().begin(), b.list().end());
      return Value::MakeList(std::move(out), a.is_tuple());
    }
    if (a.is_string()) Fail(absl::StrCat("can only concatenate str (not \"", b.TypeName(), "\") to str"));
    Unsupported(op, a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t r = 0;
      if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) Fail("integer overflow");
      return Value::Int(r);
    }
    if (nums) return Value::Float(a.as_number() - b.as_number());
    Unsupported(op, a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t r = 0;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) Fail("integer overflow");
      return Value::Int(r);
    }
    if (nums) return Value::Float(a.as_number() * b.as_number());
    bool a_seq = a.is_string() || (a.is_list() && !a.is_generator());
    bool b_seq = b.is_string() || (b.is_list() && !b.is_generator());
    if (a_seq && (b.is_int() || b.is_bool())) return Repeat(a, b.as_int(), max_string);
    if (b_seq && (a.is_int() || a.is_bool())) return Repeat(b, a.as_int(), max_string);
    Unsupported(op, a, b);
  }
  if (op == "%" && a.is_string()) {
    return Value::String(PrintfFormat(a.str(), b.is_tuple() ? b.list() : List{b}));
  }
  if (!nums) {
    Unsupported(op, a, b);
  }
  if (op == "/") {
    if (b.as_number() == 0) Fail("division by zero");
    return Value::Float(a.as_number() / b.as_number());
  }
  if (op == "//" || op == "%") {
    if (b.as_number() == 0) Fail(ints ? "integer division or modulo by zero" : "float modulo");
    if (ints) {
      int64_t x = a.as_int(), y = b.as_int();
      if (x == INT64_MIN && y == -1) Fail("integer overflow");
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      return Value::Int(op == "//" ? q : r);
    }
    double x = a.as_number(), y = b.as_number();
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    if (op == "%") return Value::Float(r);
    return Value::Float(std::floor(x / y));
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int();
      if (base == 0 || base == 1) return Value::Int(e == 0 ? 1 : base);
      if (base == -1) return Value::Int(e % 2 ? -1 : 1);
      int64_t r = 1;  // |base| >= 2 overflows within 63 steps
      for (; e > 0; --e) {
        if (__builtin_mul_overflow(r, base, &r)) Fail("integer overflow");
      }
      return Value::Int(r);
    }
    if (a.as_number() == 0 && b.as_number() < 0) Fail("0.0 cannot be raised to a negative power");
    return Value::Float(std::pow(a.as_number(), b.as_number()));
  }
  Fail(absl::StrCat("unknown operator ", std::string(op)));
}

Value Negate(const Value& v) {
  if (v.is_undefined()) FailUndefined(v);
  if (v.is_float()) return Value::Float(-v.as_number());
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) Fail("integer overflow");
    return Value::Int(-v.as_int());
  }
  Fail(absl::StrCat("bad operand type for unary -: '", v.TypeName(), "'"));
}

}  // namespace specline::jinja
