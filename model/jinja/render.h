// Walks the AST and writes the output. One Renderer per Render call: it
// holds the scopes, the output buffer and the limit counters, so renders
// share nothing but the immutable AST.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/jinja/ast.h"
#include "model/jinja/jinja.h"
#include "model/jinja/value.h"

namespace specline::jinja {

class Renderer {
 public:
  explicit Renderer(const Limits& limits) : limits_(limits) {}

  // Throws Error.
  std::string Run(const Program& program, const nlohmann::ordered_json& context);

  Value CallValue(const Value& callee, CallArgs& args);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct Frame {
    std::vector<std::pair<std::string, Value>> vars;
    int parent;
  };

  Flow Exec(const Body& body);
  Flow ExecNode(const Node& n);
  void ExecFor(const Node& n, Flow* flow);
  Value Eval(const Expr& e);
  CallArgs EvalArgs(const Expr& e);
  bool CompareOp(const std::string& op, const Value& a, const Value& b);

  const Value* Lookup(const std::string& name) const;
  void Assign(const std::string& name, Value v);
  int PushFrame(int parent);
  void PopFrame(int previous);
  void Write(std::string_view s);
  std::string Capture(const Body& body);
  Value MakeMacro(const Node& n, Value caller);
  Value CallMacro(const Node& n, const Value& caller, CallArgs& args);

  Limits limits_;
  std::vector<Frame> frames_;
  int cur_ = 0;
  std::string* out_ = nullptr;
  int64_t iterations_ = 0;
  int depth_ = 0;
};

}  // namespace specline::jinja
