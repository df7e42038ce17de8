// The interpreter. Scoping follows jinja2: the template's top level is one
// scope; each for-loop iteration, macro call, `with` and call block opens a
// new one whose `set`s vanish when it ends (hence namespace() in chat
// templates); `if` opens none. A macro (and a call block's `caller`) sees
// the scope it was defined in while that scope lives, then the top level;
// never its caller's.
#include "model/jinja/render.h"

#include <ctime>

#include "absl/strings/str_cat.h"
#include "model/jinja/builtins.h"

namespace specline::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // the sandbox's MAX_RANGE

Value MakeBuiltin(std::string name, std::function<Value(Renderer&, CallArgs&)> fn) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->fn = std::move(fn);
  return Value::MakeCallable(std::move(c));
}

// The environment's globals (jinja2's defaults the templates use, plus
// transformers' raise_exception and strftime_now).
const Value* Global(const std::string& name) {
  static const auto* globals = new std::vector<std::pair<std::string, Value>>{
      {"range", MakeBuiltin("range", [](Renderer&, CallArgs& a) {
         if (!a.keyword.empty()) Fail("range() takes no keyword arguments");
         std::vector<int64_t> v;
         for (const Value& p : a.positional) {
           if (!p.is_int() && !p.is_bool()) {
             Fail(absl::StrCat("'", p.TypeName(), "' object cannot be interpreted as an integer"));
           }
           v.push_back(p.as_int());
         }
         if (v.empty() || v.size() > 3) Fail("range expected 1 to 3 arguments");
         int64_t start = v.size() == 1 ? 0 : v[0], stop = v.size() == 1 ? v[0] : v[1];
         int64_t step = v.size() == 3 ? v[2] : 1;
         if (step == 0) Fail("range() arg 3 must not be zero");
         int64_t n = 0;
         if (step > 0 && stop > start) n = (stop - start + step - 1) / step;
         if (step < 0 && stop < start) n = (start - stop - step - 1) / -step;
         if (n > kMaxRange) {
           Fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
         }
         List out;
         out.reserve(n);
         for (int64_t i = 0; i < n; ++i) out.push_back(Value::Int(start + i * step));
         return Value::MakeList(std::move(out));
       })},
      {"dict", MakeBuiltin("dict", [](Renderer&, CallArgs& a) {
         Dict d;
         if (!a.positional.empty()) {
           if (a.positional.size() > 1 || !a.positional[0].is_dict()) Fail("dict() takes a mapping");
           d = a.positional[0].dict();
         }
         for (auto& [k, v] : a.keyword) d.Set(Value::String(k), v);
         return Value::MakeDict(std::move(d));
       })},
      {"namespace", MakeBuiltin("namespace", [](Renderer&, CallArgs& a) {
         auto ns = std::make_shared<Namespace>();
         for (const Value& p : a.positional) {
           if (!p.is_dict()) Fail("namespace() takes a mapping");
           for (const auto& [k, v] : p.dict().items) ns->attrs.Set(k, v);
         }
         for (auto& [k, v] : a.keyword) ns->attrs.Set(Value::String(k), v);
         return Value::MakeNamespace(std::move(ns));
       })},
      {"raise_exception", MakeBuiltin("raise_exception", [](Renderer&, CallArgs& a) -> Value {
         const Value* m = a.Get(0, "message");
         throw Error{absl::StatusCode::kInvalidArgument,
                     absl::StrCat("chat template raised: ", m ? ToStr(*m) : "")};
       })},
      {"strftime_now", MakeBuiltin("strftime_now", [](Renderer&, CallArgs& a) {
         const Value* f = a.Get(0, "format");
         if (f == nullptr || !f->is_string()) Fail("strftime_now() needs a format string");
         std::time_t now = std::time(nullptr);
         std::tm tm{};
         localtime_r(&now, &tm);
         char buf[512];
         size_t n = std::strftime(buf, sizeof(buf), f->str().c_str(), &tm);
         return Value::String(std::string(buf, n));
       })},
  };
  for (const auto& [k, v] : *globals) {
    if (k == name) return &v;
  }
  return nullptr;
}

}  // namespace

std::string Renderer::Run(const Program& program, const nlohmann::ordered_json& context) {
  if (!context.is_object() && !context.is_null()) Fail("the context must be a JSON object");
  frames_.clear();
  frames_.push_back(Frame{{}, -1, next_frame_id_++});
  cur_ = 0;
  if (context.is_object()) {
    for (auto it = context.begin(); it != context.end(); ++it) {
      Assign(it.key(), Value::FromJson(it.value()));
    }
  }
  std::string out;
  out_ = &out;
  Exec(program.body);
  return out;
}

const Value* Renderer::Lookup(const std::string& name) const {
  for (int f = cur_; f >= 0; f = frames_[f].parent) {
    for (const auto& [k, v] : frames_[f].vars) {
      if (k == name) return &v;
    }
  }
  return Global(name);
}

void Renderer::Assign(const std::string& name, Value v) {
  for (auto& [k, old] : frames_[cur_].vars) {
    if (k == name) {
      old = std::move(v);
      return;
    }
  }
  frames_[cur_].vars.emplace_back(name, std::move(v));
}

int Renderer::PushFrame(int parent) {
  int previous = cur_;
  frames_.push_back(Frame{{}, parent, next_frame_id_++});
  cur_ = static_cast<int>(frames_.size()) - 1;
  return previous;
}

void Renderer::PopFrame(int previous) {
  frames_.pop_back();
  cur_ = previous;
}

void Renderer::Write(std::string_view s) {
  if (static_cast<int64_t>(out_->size() + s.size()) > limits_.max_output_bytes) {
    FailLimit(absl::StrCat("chat template output exceeds max_output_bytes (",
                           limits_.max_output_bytes, ")"));
  }
  out_->append(s);
}

std::string Renderer::Capture(const Body& body) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  try {
    Exec(body);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buf;
}

Renderer::Flow Renderer::Exec(const Body& body) {
  for (const auto& n : body) {
    Flow f = ExecNode(*n);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::ExecNode(const Node& n) {
  switch (n.kind) {
    case NodeKind::kText: Write(n.text); return Flow::kNormal;
    case NodeKind::kPrint: {
      Value v = Eval(*n.expr);
      if (v.is_string()) Write(v.str());
      else Write(ToStr(v));
      return Flow::kNormal;
    }
    case NodeKind::kIf:
      for (const auto& [cond, body] : n.branches) {
        if (Eval(*cond).Truthy()) return Exec(body);
      }
      return Exec(n.else_body);
    case NodeKind::kFor: {
      Flow flow = Flow::kNormal;
      ExecFor(n, &flow);
      return flow;
    }
    case NodeKind::kSet: {
      Value v = Eval(*n.expr);
      if (!n.text.empty()) {
        const Value* ns = Lookup(n.targets[0]);
        if (ns == nullptr || !ns->is_namespace()) Fail("cannot assign attribute on non-namespace object");
        ns->ns().attrs.Set(Value::String(n.text), std::move(v));
      } else if (n.unpack) {
        List items = Iterate(v);
        if (items.size() != n.targets.size()) {
          Fail(absl::StrCat("cannot unpack ", items.size(), " values into ", n.targets.size()));
        }
        for (size_t i = 0; i < items.size(); ++i) Assign(n.targets[i], items[i]);
      } else {
        Assign(n.targets[0], std::move(v));
      }
      return Flow::kNormal;
    }
    case NodeKind::kSetBlock: {
      Value v = Value::String(Capture(n.body));
      for (const auto& f : n.filters) v = ApplyFilter(f->name, v, EvalArgs(*f));
      Assign(n.targets[0], std::move(v));
      return Flow::kNormal;
    }
    case NodeKind::kMacro: Assign(n.text, MakeMacro(n)); return Flow::kNormal;
    case NodeKind::kCallBlock: {
      // The body becomes `caller`, a macro over the block's parameters.
      Value caller = MakeMacro(n);
      const Expr& call = *n.expr;
      Value callee = Eval(*call.object);
      CallArgs args = EvalArgs(call);
      args.keyword.emplace_back("caller", caller);
      Write(ToStr(CallValue(callee, args)));
      return Flow::kNormal;
    }
    case NodeKind::kFilterBlock: {
      Value v = Value::String(Capture(n.body));
      for (const auto& f : n.filters) v = ApplyFilter(f->name, v, EvalArgs(*f));
      Write(ToStr(v));
      return Flow::kNormal;
    }
    case NodeKind::kWith: {
      std::vector<Value> values;
      for (const auto& [name, e] : n.assigns) values.push_back(Eval(*e));
      int prev = PushFrame(cur_);
      for (size_t i = 0; i < values.size(); ++i) Assign(n.assigns[i].first, values[i]);
      Flow f;
      try {
        f = Exec(n.body);
      } catch (...) {
        PopFrame(prev);
        throw;
      }
      PopFrame(prev);
      return f;
    }
    case NodeKind::kBreak: return Flow::kBreak;
    case NodeKind::kContinue: return Flow::kContinue;
    case NodeKind::kBody: return Exec(n.body);
  }
  return Flow::kNormal;
}

void Renderer::ExecFor(const Node& n, Flow* flow) {
  *flow = Flow::kNormal;
  Value iterable = Eval(*n.expr);
  List items = Iterate(iterable);
  auto bind = [&](const Value& item) {
    if (!n.unpack) {
      Assign(n.targets[0], item);
      return;
    }
    List parts = Iterate(item);
    if (parts.size() != n.targets.size()) {
      Fail(absl::StrCat("cannot unpack ", parts.size(), " values into ", n.targets.size(), " loop variables"));
    }
    for (size_t i = 0; i < parts.size(); ++i) Assign(n.targets[i], parts[i]);
  };
  int prev = PushFrame(cur_);
  try {
    if (n.cond) {
      // The `if` filter runs before the loop, so loop.length counts only
      // the items it keeps.
      List kept;
      for (const Value& item : items) {
        if (++iterations_ > limits_.max_loop_iterations) {
          FailLimit(absl::StrCat("chat template exceeds max_loop_iterations (", limits_.max_loop_iterations, ")"));
        }
        frames_[cur_].vars.clear();
        bind(item);
        if (Eval(*n.cond).Truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    auto state = std::make_shared<LoopState>();
    state->items = &items;
    Value loop = Value::MakeLoop(state);
    for (size_t i = 0; i < items.size(); ++i) {
      if (++iterations_ > limits_.max_loop_iterations) {
        FailLimit(absl::StrCat("chat template exceeds max_loop_iterations (", limits_.max_loop_iterations, ")"));
      }
      state->index0 = static_cast<int64_t>(i);
      frames_[cur_].vars.clear();
      frames_[cur_].vars.emplace_back("loop", loop);
      bind(items[i]);
      Flow f = Exec(n.body);
      if (f == Flow::kBreak) break;
    }
    if (items.empty()) {
      frames_[cur_].vars.clear();
      *flow = Exec(n.else_body);
    }
  } catch (...) {
    PopFrame(prev);
    throw;
  }
  PopFrame(prev);
}

Value Renderer::MakeMacro(const Node& n) {
  auto c = std::make_shared<Callable>();
  c->name = n.kind == NodeKind::kMacro ? n.text : "caller";
  const Node* node = &n;
  int scope = cur_;
  uint64_t scope_id = frames_[cur_].id;
  c->fn = [node, scope, scope_id](Renderer& r, CallArgs& args) {
    return r.CallMacro(*node, scope, scope_id, args);
  };
  return Value::MakeCallable(std::move(c));
}

Value Renderer::CallMacro(const Node& n, int scope, uint64_t scope_id, CallArgs& args) {
  if (++depth_ > limits_.max_recursion_depth) {
    --depth_;
    FailLimit(absl::StrCat("chat template exceeds max_recursion_depth (", limits_.max_recursion_depth, ")"));
  }
  std::string name = n.kind == NodeKind::kMacro ? n.text : "caller";
  bool scope_alive = scope < static_cast<int>(frames_.size()) && frames_[scope].id == scope_id;
  int prev = PushFrame(scope_alive ? scope : 0);
  std::string result;
  try {
    size_t np = n.params.size();
    if (args.positional.size() > np && !n.uses_varargs) {
      Fail(absl::StrCat("macro '", std::string(name), "' takes not more than ", np, " argument(s)"));
    }
    std::vector<bool> set(np, false);
    for (size_t i = 0; i < np && i < args.positional.size(); ++i) {
      Assign(n.params[i].name, args.positional[i]);
      set[i] = true;
    }
    Dict extra_kwargs;
    Value caller_value;
    for (auto& [k, v] : args.keyword) {
      bool found = false;
      for (size_t i = 0; i < np; ++i) {
        if (n.params[i].name == k) {
          if (set[i]) Fail(absl::StrCat("macro '", std::string(name), "' got multiple values for argument '", k, "'"));
          Assign(k, v);
          set[i] = found = true;
        }
      }
      if (found) continue;
      if (k == "caller") {
        caller_value = v;
      } else if (n.uses_kwargs) {
        extra_kwargs.Set(Value::String(k), v);
      } else {
        Fail(absl::StrCat("macro '", std::string(name), "' takes no keyword argument '", k, "'"));
      }
    }
    for (size_t i = 0; i < np; ++i) {
      if (set[i]) continue;
      Assign(n.params[i].name, n.params[i].default_value
                                   ? Eval(*n.params[i].default_value)
                                   : Value::Undefined(absl::StrCat("parameter '", n.params[i].name,
                                                                   "' was not provided")));
    }
    if (n.uses_varargs) {
      List rest;
      for (size_t i = np; i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
      Assign("varargs", Value::MakeList(std::move(rest), true));
    }
    if (n.uses_kwargs) Assign("kwargs", Value::MakeDict(std::move(extra_kwargs)));
    if (!caller_value.is_undefined()) Assign("caller", caller_value);
    result = Capture(n.body);
  } catch (...) {
    PopFrame(prev);
    --depth_;
    throw;
  }
  PopFrame(prev);
  --depth_;
  return Value::String(std::move(result));
}

Value Renderer::CallValue(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) FailUndefined(callee);
  if (!callee.is_callable()) Fail(absl::StrCat("'", callee.TypeName(), "' object is not callable"));
  const Callable& c = callee.callable();
  if (c.is_method) return CallMethod(c.self, c.name, args);
  return c.fn(*this, args);
}

CallArgs Renderer::EvalArgs(const Expr& e) {
  CallArgs a;
  for (size_t i = 0; i < e.args.size(); ++i) {
    if (e.arg_names[i].empty()) a.positional.push_back(Eval(*e.args[i]));
    else a.keyword.emplace_back(e.arg_names[i], Eval(*e.args[i]));
  }
  return a;
}

bool Renderer::CompareOp(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return Equals(a, b);
  if (op == "!=") return !Equals(a, b);
  if (op == "in") return Contains(b, a);
  if (op == "notin") return !Contains(b, a);
  if (a.is_undefined()) FailUndefined(a);
  if (b.is_undefined()) FailUndefined(b);
  int c = Compare(a, b);
  if (op == "<") return c < 0;
  if (op == ">") return c > 0;
  if (op == "<=") return c <= 0;
  return c >= 0;
}

Value Renderer::Eval(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral: return e.value;
    case ExprKind::kName: {
      const Value* v = Lookup(e.name);
      return v ? *v : Value::Undefined(absl::StrCat("'", e.name, "' is undefined"));
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      List items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(Eval(*a));
      return Value::MakeList(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = Eval(*e.args[i]);
        if (k.is_list() || k.is_dict() || k.is_namespace()) Fail(absl::StrCat("unhashable type: '", k.TypeName(), "'"));
        d.Set(std::move(k), Eval(*e.args[i + 1]));
      }
      return Value::MakeDict(std::move(d));
    }
    case ExprKind::kGetAttr: return GetAttr(Eval(*e.object), e.name);
    case ExprKind::kGetItem: return GetItem(Eval(*e.object), Eval(*e.args[0]));
    case ExprKind::kSlice: {
      Value obj = Eval(*e.object);
      Value parts[3] = {Value::None(), Value::None(), Value::None()};  // absent parts
      for (int i = 0; i < 3; ++i) {
        if (e.args[i]) parts[i] = Eval(*e.args[i]);
      }
      return Slice(obj, parts[0], parts[1], parts[2]);
    }
    case ExprKind::kCall: {
      if (e.object->kind == ExprKind::kGetAttr) {
        // `s.strip()` calls the method without building a bound object.
        Value self = Eval(*e.object->object);
        const std::string& m = e.object->name;
        if ((self.is_loop() && m == "cycle") || (m[0] != '_' && HasMethod(self, m))) {
          CallArgs args = EvalArgs(e);
          return CallMethod(self, m, args);
        }
        Value callee = GetAttr(self, m);
        CallArgs args = EvalArgs(e);
        return CallValue(callee, args);
      }
      Value callee = Eval(*e.object);
      CallArgs args = EvalArgs(e);
      return CallValue(callee, args);
    }
    case ExprKind::kFilter: {
      Value in = Eval(*e.object);
      return ApplyFilter(e.name, in, EvalArgs(e));
    }
    case ExprKind::kTest: {
      Value in = Eval(*e.object);
      bool r = ApplyTest(e.name, in, EvalArgs(e));
      return Value::Bool(e.negated ? !r : r);
    }
    case ExprKind::kNot: return Value::Bool(!Eval(*e.object).Truthy());
    case ExprKind::kNeg: return Negate(Eval(*e.object));
    case ExprKind::kPos: {
      Value v = Eval(*e.object);
      if (v.is_undefined()) FailUndefined(v);
      if (!v.is_number()) Fail(absl::StrCat("bad operand type for unary +: '", v.TypeName(), "'"));
      return v.is_bool() ? Value::Int(v.as_int()) : v;
    }
    case ExprKind::kBinary: {
      if (e.name == "and" || e.name == "or") {
        Value a = Eval(*e.args[0]);
        if (a.Truthy() == (e.name == "or")) return a;
        return Eval(*e.args[1]);
      }
      Value a = Eval(*e.args[0]);
      Value b = Eval(*e.args[1]);
      return BinaryOp(e.name, a, b, limits_.max_output_bytes);
    }
    case ExprKind::kCompare: {
      Value left = Eval(*e.object);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = Eval(*e.args[i]);
        if (!CompareOp(e.ops[i], left, right)) return Value::Bool(false);
        left = std::move(right);
      }
      return Value::Bool(true);
    }
    case ExprKind::kCond: {
      if (Eval(*e.args[0]).Truthy()) return Eval(*e.args[1]);
      if (e.args[2]) return Eval(*e.args[2]);
      return Value::Undefined("the inline if-expression evaluated to false and no else section was defined");
    }
  }
  Fail("unknown expression");
}

}  // namespace specline::jinja
