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
    uint64_t id;  // tells a live frame from a later one at the same index
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
  Value MakeMacro(const Node& n);
  // `scope`/`scope_id`: the frame the macro was defined in, its closure
  // while that frame lives (jinja2 macros see their defining scope).
  Value CallMacro(const Node& n, int scope, uint64_t scope_id, CallArgs& args);

  Limits limits_;
  std::vector<Frame> frames_;
  int cur_ = 0;
  std::string* out_ = nullptr;
  int64_t iterations_ = 0;
  int depth_ = 0;
  uint64_t next_frame_id_ = 0;
};

}  // namespace specline::jinja
