// The values a template computes with: Python's objects as jinja2 sees them
// (None, bool, int, float, str, list/tuple, dict, callables) plus jinja2's
// own (Undefined, namespace, the loop object). Lists and dicts are immutable
// once built, as ImmutableSandboxedEnvironment refuses every mutating
// method, so they are shared by pointer; a namespace is the one mutable
// object (`{% set ns.x = ... %}`).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"

namespace specline::jinja {

// A render (or parse) failure. Thrown inside the engine and turned into a
// Status at the API boundary: errors unwind through deep recursion, and the
// happy path pays nothing for them.
struct Error {
  absl::StatusCode code;
  std::string message;
};
[[noreturn]] void Fail(std::string message);  // InvalidArgument
[[noreturn]] void FailLimit(std::string message);  // ResourceExhausted

class Value;
struct Dict;
struct Callable;
struct Namespace;
struct LoopState;
using List = std::vector<Value>;

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict,
    kCallable, kNamespace, kLoop,
  };

  Value() = default;  // Undefined
  static Value Undefined(std::string name = "") {
    Value v;
    v.str_ = std::move(name);
    return v;
  }
  static Value None() { return Value(Kind::kNone); }
  static Value Bool(bool b) { Value v(Kind::kBool); v.int_ = b; return v; }
  static Value Int(int64_t i) { Value v(Kind::kInt); v.int_ = i; return v; }
  static Value Float(double f) { Value v(Kind::kFloat); v.float_ = f; return v; }
  static Value String(std::string s) { Value v(Kind::kString); v.str_ = std::move(s); return v; }
  // markupsafe.Markup (from `safe` and `escape`): a str that escapes what
  // is added to it with `+`, which templates rely on without knowing.
  static Value Markup(std::string s) { Value v = String(std::move(s)); v.flag_ = kMarkup; return v; }
  static Value MakeList(List items, bool tuple = false);
  // A generator (select, map, reverse...): iterable once in Python, so it
  // has no len(), cannot be indexed and is always true; printing it shows
  // an object address. Kept as a list with this flag.
  static Value Generator(List items);
  static Value MakeDict(Dict dict);
  static Value MakeCallable(std::shared_ptr<const Callable> c);
  static Value MakeNamespace(std::shared_ptr<Namespace> ns);
  static Value MakeLoop(std::shared_ptr<const LoopState> loop);
  static Value FromJson(const nlohmann::ordered_json& j, int depth = 0);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // Python's numbers.Number: bool is an int.
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_markup() const { return kind_ == Kind::kString && flag_ == kMarkup; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && flag_ == kTuple; }
  bool is_generator() const { return kind_ == Kind::kList && flag_ == kGenerator; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_loop() const { return kind_ == Kind::kLoop; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }  // int or bool
  double as_number() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& str() const { return str_; }  // string, or undefined's name
  const List& list() const { return *static_cast<const List*>(ptr_.get()); }
  const Dict& dict() const { return *static_cast<const Dict*>(ptr_.get()); }
  const Callable& callable() const { return *static_cast<const Callable*>(ptr_.get()); }
  Namespace& ns() const { return *static_cast<Namespace*>(const_cast<void*>(ptr_.get())); }
  const LoopState& loop() const { return *static_cast<const LoopState*>(ptr_.get()); }

  // Python truthiness (jinja2's Undefined is false; generators are true).
  bool Truthy() const;
  // Python's type name, for error messages ("'int' object is not iterable").
  std::string TypeName() const;
  // Identity for the `sameas` test: same object, or equal for immutables.
  bool SameAs(const Value& other) const;

 private:
  enum Flag : uint8_t { kPlain, kTuple, kGenerator, kMarkup };
  explicit Value(Kind k) : kind_(k) {}
  Kind kind_ = Kind::kUndefined;
  uint8_t flag_ = kPlain;
  int64_t int_ = 0;
  double float_ = 0;
  std::string str_;
  // The list, dict, callable, namespace or loop state, by kind_.
  std::shared_ptr<const void> ptr_;
};

// An insertion-ordered dict, as Python's. Chat template dicts are small
// (a message, a tool's schema), so lookups scan.
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  void Set(Value key, Value value);  // replaces in place, or appends
};

// jinja2's namespace(): attributes set with `{% set ns.x = ... %}`, visible
// across loop scopes because it is shared by reference.
struct Namespace {
  Dict attrs;
};

// The `loop` variable of a for loop.
struct LoopState {
  const List* items = nullptr;
  int64_t index0 = 0;
  int depth0 = 0;
};

// Arguments of a call: positional, then keyword in the order written.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The keyword argument `name`, else positional `pos` (when present), else
  // nullptr; marks which were used so extras can be refused.
  const Value* Get(size_t pos, std::string_view name) const;
};

class Renderer;
// A function value: a global (range, namespace...), a macro, or a bound
// method of a str/dict/list (`s.strip`, `d.items`), which jinja2 resolves
// as attributes.
struct Callable {
  std::string name;
  std::function<Value(Renderer&, CallArgs&)> fn;
  // For bound methods: the object and method name (fn is unset).
  Value self;
  bool is_method = false;
};

// Python semantics over values.
bool Equals(const Value& a, const Value& b);
// -1/0/1, Python's `<`; fails (TypeError) on types Python cannot order.
int Compare(const Value& a, const Value& b);
// Python's str() and repr(); jinja2 prints undefined as "".
std::string ToStr(const Value& v);
std::string Repr(const Value& v);
// Python's float repr (shortest round-trip, "1.0", "1e+16").
std::string FloatRepr(double d);

// json.dumps(v, ensure_ascii=False, indent, separators, sort_keys), as
// transformers' tojson filter calls it. `indent` is null (None), an int or
// a string.
struct JsonOptions {
  bool has_indent = false;
  std::string indent;  // per level
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;  // \uXXXX for everything past ASCII
};
std::string ToJson(const Value& v, const JsonOptions& options);

// UTF-8 helpers: Python indexes strings by code point.
size_t CodePointCount(std::string_view s);
// Code points of `s` as byte offsets: offsets[i] is where code point i
// starts, offsets[count] == s.size().
std::vector<size_t> CodePointOffsets(std::string_view s);
char32_t DecodeUtf8(std::string_view s, size_t* pos);
void AppendUtf8(std::string* out, char32_t cp);
bool IsPySpace(char32_t cp);  // str.isspace()

}  // namespace specline::jinja
