// The parsed template: expression and statement nodes, immutable after
// parsing and shared by every copy of a Template (so Render is
// thread-safe). Nodes are generic records rather than a class per kind:
// the renderer switches on `kind`, which keeps each kind's logic in one
// place (render.cc) instead of spread over virtual methods.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/jinja/value.h"

namespace specline::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind : uint8_t {
  kLiteral,   // value
  kName,      // name
  kList,      // args
  kTuple,     // args
  kDict,      // args: key0, value0, key1, value1...
  kGetAttr,   // object . name
  kGetItem,   // object [ args[0] ]
  kSlice,     // object [ args[0] : args[1] : args[2] ] (null parts absent)
  kCall,      // object ( args ), arg_names[i] non-empty for keywords
  kFilter,    // object | name ( args ); object null in filter blocks
  kTest,      // object is [not] name ( args )
  kNot,       // object
  kNeg,       // object
  kPos,       // object
  kBinary,    // op: + - * / // % ** ~ and or; args[0] op args[1]
  kCompare,   // object, then ops[i] applied to args[i]
  kCond,      // args[1] if args[0] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;
  std::string name;  // variable, attribute, filter, test or operator
  ExprPtr object;
  std::vector<ExprPtr> args;
  std::vector<std::string> arg_names;  // keyword names, "" for positional
  std::vector<std::string> ops;        // comparison operators
  bool negated = false;                // `is not`
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

enum class NodeKind : uint8_t {
  kText,        // text
  kPrint,       // {{ expr }}
  kIf,          // branches, else_body
  kFor,         // targets in expr [if cond] body [else else_body]
  kSet,         // targets (or attr target) = expr
  kSetBlock,    // {% set x %}body{% endset %}, filters applied
  kMacro,       // name(params) body
  kCallBlock,   // {% call(params) expr %}body{% endcall %}
  kFilterBlock, // {% filter f %}body{% endfilter %}
  kWith,        // {% with a = 1 %}body{% endwith %}
  kBreak,
  kContinue,
  kBody,        // a plain body ({% generation %})
};

struct Param {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Node {
  NodeKind kind;
  int line = 0;
  std::string text;                 // kText; macro name; set's namespace attr
  ExprPtr expr;                     // print/for iterable/set value/call expr
  ExprPtr cond;                     // for's `if` filter
  std::vector<std::string> targets; // for/set targets (set: ns name + text attr)
  bool unpack = false;              // targets written as a tuple
  std::vector<std::pair<ExprPtr, Body>> branches;  // if/elif
  Body body;
  Body else_body;
  std::vector<Param> params;        // macro / caller parameters
  std::vector<ExprPtr> filters;     // set block / filter block chain
  std::vector<std::pair<std::string, ExprPtr>> assigns;  // with
  // Macros: whether the body names `varargs` / `kwargs`, which decides
  // whether extra arguments are accepted (as jinja2 decides it).
  bool uses_varargs = false;
  bool uses_kwargs = false;
};

struct Program {
  Body body;
};

}  // namespace specline::jinja
