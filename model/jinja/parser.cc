// Recursive descent over jinja2's grammar. Precedence, loosest first:
//   conditional (a if c else b) < or < and < not < comparisons (==, in, ...)
//   < + - < ~ < * / // % < ** < unary - + < postfix (. [] ()) < filters/tests
// (`-x|abs` filters -x; `not a is b` negates the test.)
#include "model/jinja/parser.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "model/jinja/builtins.h"

namespace specline::jinja {
namespace {

// Nesting deeper than this is refused rather than risking the C++ stack
// (Python's own recursion limit stops jinja2 at a similar depth).
constexpr int kMaxNesting = 200;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  std::unique_ptr<Program> Run() {
    auto program = std::make_unique<Program>();
    std::string end;
    program->body = ParseBody({}, &end);
    return program;
  }

 private:
  const Token& Cur() const { return toks_[pos_]; }
  const Token& Peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  void Advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }

  [[noreturn]] void ErrorAt(int line, std::string_view what) const {
    Fail(absl::StrCat("chat template line ", line, ": ", std::string(what)));
  }
  [[noreturn]] void Error(std::string_view what) const { ErrorAt(Cur().line, what); }

  static std::string Describe(const Token& t) {
    switch (t.type) {
      case TokenType::kData: return "template data";
      case TokenType::kVarBegin: return "begin of print statement";
      case TokenType::kVarEnd: return "end of print statement";
      case TokenType::kBlockBegin: return "begin of statement block";
      case TokenType::kBlockEnd: return "end of statement block";
      case TokenType::kString: return "string";
      case TokenType::kInt: return "integer";
      case TokenType::kFloat: return "float";
      case TokenType::kEof: return "end of template";
      default: return t.text;
    }
  }

  bool IsOp(std::string_view op) const { return Cur().type == TokenType::kOp && Cur().text == op; }
  bool IsName(std::string_view n) const { return Cur().type == TokenType::kName && Cur().text == n; }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Advance();
    return true;
  }
  bool SkipName(std::string_view n) {
    if (!IsName(n)) return false;
    Advance();
    return true;
  }
  void ExpectOp(std::string_view op) {
    if (!SkipOp(op)) Error(absl::StrCat("expected '", std::string(op), "', got '", Describe(Cur()), "'"));
  }
  std::string ExpectName() {
    if (Cur().type != TokenType::kName) Error(absl::StrCat("expected a std::string(name), got '", Describe(Cur()), "'"));
    std::string n = Cur().text;
    Advance();
    return n;
  }
  void ExpectBlockEnd() {
    if (Cur().type != TokenType::kBlockEnd) {
      Error(absl::StrCat("expected end of statement block, got '", Describe(Cur()), "'"));
    }
    Advance();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p(p) {
      if (++p->depth_ > kMaxNesting) p->Error("template nested too deeply");
    }
    ~DepthGuard() { --p->depth_; }
    Parser* p;
  };

  // Statements until a `{% name %}` whose name is in `ends` (consumed up
  // to the name; the name goes to *end). Empty `ends`: until EOF.
  Body ParseBody(const std::set<std::string>& ends, std::string* end) {
    DepthGuard guard(this);
    Body body;
    while (true) {
      const Token& t = Cur();
      if (t.type == TokenType::kEof) {
        if (!ends.empty()) {
          std::string expected;
          for (const auto& e : ends) expected += (expected.empty() ? "'" : " or '") + e + "'";
          Error(absl::StrCat("unexpected end of template, expected ", expected));
        }
        return body;
      }
      if (t.type == TokenType::kData) {
        auto n = NewNode(NodeKind::kText);
        n->text = t.text;
        body.push_back(std::move(n));
        Advance();
      } else if (t.type == TokenType::kVarBegin) {
        Advance();
        auto n = NewNode(NodeKind::kPrint);
        n->expr = Check(ParseTuple(true));
        if (Cur().type != TokenType::kVarEnd) {
          Error(absl::StrCat("expected end of print statement, got '", Describe(Cur()), "'"));
        }
        Advance();
        body.push_back(std::move(n));
      } else if (t.type == TokenType::kBlockBegin) {
        Advance();
        if (Cur().type == TokenType::kName && ends.count(Cur().text)) {
          *end = Cur().text;
          Advance();
          return body;
        }
        body.push_back(ParseStatement());
      } else {
        Error(absl::StrCat("unexpected '", Describe(t), "'"));
      }
    }
  }

  std::unique_ptr<Node> NewNode(NodeKind kind) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = Cur().line;
    return n;
  }

  std::unique_ptr<Node> ParseStatement() {
    if (Cur().type != TokenType::kName) Error("tag name expected");
    std::string tag = Cur().text;
    int line = Cur().line;
    Advance();
    std::unique_ptr<Node> n;
    std::string end;
    if (tag == "if") {
      n = NewNode(NodeKind::kIf);
      SoftScope soft(this, true);
      while (true) {
        ExprPtr cond = ParseTuple(false);
        ExpectBlockEnd();
        Body body = ParseBody({"elif", "else", "endif"}, &end);
        n->branches.emplace_back(std::move(cond), std::move(body));
        if (end == "elif") continue;
        if (end == "else") {
          ExpectBlockEnd();
          n->else_body = ParseBody({"endif"}, &end);
        }
        break;
      }
    } else if (tag == "for") {
      n = NewNode(NodeKind::kFor);
      ParseTargets(n.get(), "in");
      if (!SkipName("in")) Error("expected 'in'");
      n->expr = Check(ParseTuple(false, true));
      SoftScope hard(this, false);
      if (SkipName("if")) n->cond = Check(ParseExpression());
      if (IsName("recursive")) Error("recursive loops are not supported");
      ExpectBlockEnd();
      ++loop_depth_;
      n->body = ParseBody({"endfor", "else"}, &end);
      --loop_depth_;
      if (end == "else") {
        ExpectBlockEnd();
        n->else_body = ParseBody({"endfor"}, &end);
      }
    } else if (tag == "set") {
      n = NewNode(NodeKind::kSet);
      if (Cur().type == TokenType::kName && Peek().type == TokenType::kOp && Peek().text == ".") {
        n->targets.push_back(ExpectName());
        Advance();
        n->text = ExpectName();  // namespace attribute
      } else {
        ParseTargets(n.get(), "=");
      }
      if (SkipOp("=")) {
        n->expr = Check(ParseTuple(true));
      } else {
        bool saved_soft = soft_;
        SoftScope hard(this, false);
        if (n->unpack || !n->text.empty()) Error("block set needs a single name");
        n->kind = NodeKind::kSetBlock;
        ParseFilterChain(n.get(), false);
        for (const auto& f : n->filters) CheckKnown(*f, saved_soft);
        ExpectBlockEnd();
        n->body = ParseBody({"endset"}, &end);
      }
    } else if (tag == "macro") {
      n = NewNode(NodeKind::kMacro);
      SoftScope hard(this, false);
      n->text = ExpectName();
      ParseParams(n.get());
      ExpectBlockEnd();
      int varargs = varargs_refs_, kwargs = kwargs_refs_;
      n->body = ParseBody({"endmacro"}, &end);
      n->uses_varargs = varargs_refs_ > varargs;
      n->uses_kwargs = kwargs_refs_ > kwargs;
      if (Cur().type == TokenType::kName && Cur().text == n->text) Advance();
    } else if (tag == "call") {
      n = NewNode(NodeKind::kCallBlock);
      if (IsOp("(")) ParseParams(n.get());
      n->expr = Check(ParseExpression());
      SoftScope hard(this, false);
      if (n->expr->kind != ExprKind::kCall) ErrorAt(line, "expected call");
      ExpectBlockEnd();
      n->body = ParseBody({"endcall"}, &end);
    } else if (tag == "filter") {
      n = NewNode(NodeKind::kFilterBlock);
      ParseFilterChain(n.get(), true);
      for (const auto& f : n->filters) CheckKnown(*f, soft_);
      SoftScope hard(this, false);
      ExpectBlockEnd();
      n->body = ParseBody({"endfilter"}, &end);
    } else if (tag == "with") {
      n = NewNode(NodeKind::kWith);
      while (Cur().type != TokenType::kBlockEnd) {
        if (!n->assigns.empty()) ExpectOp(",");
        std::string name = ExpectName();
        ExpectOp("=");
        n->assigns.emplace_back(name, Check(ParseExpression()));
      }
      SoftScope hard(this, false);
      ExpectBlockEnd();
      n->body = ParseBody({"endwith"}, &end);
    } else if (tag == "generation") {
      // transformers' AssistantTracker: marks assistant text for masks;
      // renders its body unchanged.
      n = NewNode(NodeKind::kBody);
      SoftScope hard(this, false);
      ExpectBlockEnd();
      n->body = ParseBody({"endgeneration"}, &end);
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) ErrorAt(line, absl::StrCat("'", tag, "' outside of a loop"));
      n = NewNode(tag == "break" ? NodeKind::kBreak : NodeKind::kContinue);
    } else {
      ErrorAt(line, absl::StrCat("Encountered unknown tag '", tag, "'"));
    }
    n->line = line;
    ExpectBlockEnd();
    return n;
  }

  // for/set targets: `x` or `a, b` or `(a, b)`.
  void ParseTargets(Node* n, std::string_view stop) {
    bool paren = SkipOp("(");
    while (true) {
      n->targets.push_back(ExpectName());
      if (!SkipOp(",")) break;
      n->unpack = true;
      // jinja2 allows a trailing comma only inside parentheses: `for a, in`
      // reads `in` as a target and then misses the `in`.
      if (paren && IsOp(")")) break;
    }
    if (!paren && n->targets.back() == stop) Error(absl::StrCat("expected token '", std::string(stop), "'"));
    if (paren) {
      ExpectOp(")");
      n->unpack = true;
    }
  }

  void ParseParams(Node* n) {
    ExpectOp("(");
    while (!IsOp(")")) {
      if (!n->params.empty()) ExpectOp(",");
      if (IsOp(")")) break;
      Param p;
      p.name = ExpectName();
      if (SkipOp("=")) p.default_value = Check(ParseExpression());
      else if (!n->params.empty() && n->params.back().default_value) Error("non-default argument follows default argument");
      n->params.push_back(std::move(p));
    }
    ExpectOp(")");
  }

  // `{% set x | f | g %}` (start_inline false: begins at a `|`) and
  // `{% filter f | g %}` (true: begins at the first name).
  void ParseFilterChain(Node* n, bool start_inline) {
    while (start_inline || IsOp("|")) {
      if (!start_inline) Advance();
      start_inline = false;
      n->filters.push_back(ParseFilter(nullptr));
    }
  }

  // A comma-separated tuple, or a single expression.
  ExprPtr ParseTuple(bool with_condexpr, bool stop_at_if = false) {
    int line = Cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) {
        if (!SkipOp(",")) break;
        is_tuple = true;
      }
      if (TupleEnds(stop_at_if)) break;
      items.push_back(with_condexpr ? ParseExpression() : ParseOr());
    }
    if (!is_tuple) {
      if (items.empty()) Error(absl::StrCat("Expected an expression, got '", Describe(Cur()), "'"));
      return std::move(items[0]);
    }
    auto e = NewExpr(ExprKind::kTuple, line);
    e->args = std::move(items);
    return e;
  }

  bool TupleEnds(bool stop_at_if) const {
    const Token& t = Cur();
    if (t.type == TokenType::kVarEnd || t.type == TokenType::kBlockEnd || t.type == TokenType::kEof) return true;
    if (t.type == TokenType::kOp && (t.text == ")" || t.text == "=")) return true;
    if (stop_at_if && t.type == TokenType::kName && (t.text == "if" || t.text == "recursive")) return true;
    return false;
  }

  ExprPtr NewExpr(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  ExprPtr ParseExpression() {
    DepthGuard guard(this);
    int line = Cur().line;
    ExprPtr e = ParseOr();
    while (SkipName("if")) {
      auto c = NewExpr(ExprKind::kCond, line);
      ExprPtr cond = ParseOr();
      ExprPtr other = SkipName("else") ? ParseExpression() : nullptr;
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr Binary(std::string op, ExprPtr l, ExprPtr r, int line) {
    auto b = NewExpr(ExprKind::kBinary, line);
    b->name = std::move(op);
    b->args.push_back(std::move(l));
    b->args.push_back(std::move(r));
    return b;
  }

  ExprPtr ParseOr() {
    int line = Cur().line;
    ExprPtr e = ParseAnd();
    while (SkipName("or")) e = Binary("or", std::move(e), ParseAnd(), line);
    return e;
  }
  ExprPtr ParseAnd() {
    int line = Cur().line;
    ExprPtr e = ParseNot();
    while (SkipName("and")) e = Binary("and", std::move(e), ParseNot(), line);
    return e;
  }
  ExprPtr ParseNot() {
    if (IsName("not")) {
      DepthGuard guard(this);
      auto n = NewExpr(ExprKind::kNot, Cur().line);
      Advance();
      n->object = ParseNot();
      return n;
    }
    return ParseCompare();
  }
  ExprPtr ParseCompare() {
    int line = Cur().line;
    ExprPtr e = ParseMath1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Cur().type == TokenType::kOp &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == ">" ||
           Cur().text == "<=" || Cur().text == ">=")) {
        op = Cur().text;
        Advance();
      } else if (IsName("in")) {
        op = "in";
        Advance();
      } else if (IsName("not") && Peek().type == TokenType::kName && Peek().text == "in") {
        op = "notin";
        Advance();
        Advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = NewExpr(ExprKind::kCompare, line);
        cmp->object = std::move(e);
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(ParseMath1());
    }
    return cmp ? std::move(cmp) : std::move(e);
  }
  ExprPtr ParseMath1() {
    int line = Cur().line;
    ExprPtr e = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      std::string op = Cur().text;
      Advance();
      e = Binary(op, std::move(e), ParseConcat(), line);
    }
    return e;
  }
  ExprPtr ParseConcat() {
    int line = Cur().line;
    ExprPtr e = ParseMath2();
    while (SkipOp("~")) e = Binary("~", std::move(e), ParseMath2(), line);
    return e;
  }
  ExprPtr ParseMath2() {
    int line = Cur().line;
    ExprPtr e = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      std::string op = Cur().text;
      Advance();
      e = Binary(op, std::move(e), ParsePow(), line);
    }
    return e;
  }
  ExprPtr ParsePow() {
    int line = Cur().line;
    ExprPtr e = ParseUnary(true);
    while (SkipOp("**")) e = Binary("**", std::move(e), ParseUnary(true), line);
    return e;
  }
  ExprPtr ParseUnary(bool with_filter) {
    DepthGuard guard(this);
    int line = Cur().line;
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      auto u = NewExpr(IsOp("-") ? ExprKind::kNeg : ExprKind::kPos, line);
      Advance();
      u->object = ParseUnary(false);
      e = std::move(u);
    } else {
      e = ParsePrimary();
    }
    e = ParsePostfix(std::move(e));
    if (with_filter) e = ParseFilterExpr(std::move(e));
    return e;
  }

  ExprPtr ParsePrimary() {
    DepthGuard guard(this);
    const Token& t = Cur();
    int line = t.line;
    if (t.type == TokenType::kName) {
      std::string n = t.text;
      Advance();
      auto e = NewExpr(ExprKind::kLiteral, line);
      if (n == "true" || n == "True") e->value = Value::Bool(true);
      else if (n == "false" || n == "False") e->value = Value::Bool(false);
      else if (n == "none" || n == "None") e->value = Value::None();
      else {
        e->kind = ExprKind::kName;
        e->name = n;
        varargs_refs_ += n == "varargs";
        kwargs_refs_ += n == "kwargs";
      }
      return e;
    }
    if (t.type == TokenType::kString) {
      std::string s;
      while (Cur().type == TokenType::kString) {
        s += Cur().text;
        Advance();
      }
      auto e = NewExpr(ExprKind::kLiteral, line);
      e->value = Value::String(std::move(s));
      return e;
    }
    if (t.type == TokenType::kInt || t.type == TokenType::kFloat) {
      auto e = NewExpr(ExprKind::kLiteral, line);
      e->value = t.type == TokenType::kInt ? Value::Int(t.int_value) : Value::Float(t.float_value);
      Advance();
      return e;
    }
    if (SkipOp("(")) {
      // `()` is the empty tuple; `(x)` just x; `(x,)` a tuple.
      if (SkipOp(")")) return NewExpr(ExprKind::kTuple, line);
      ExprPtr e = ParseTuple(true);
      ExpectOp(")");
      return e;
    }
    if (SkipOp("[")) {
      auto e = NewExpr(ExprKind::kList, line);
      while (!IsOp("]")) {
        if (!e->args.empty()) ExpectOp(",");
        if (IsOp("]")) break;
        e->args.push_back(ParseExpression());
      }
      ExpectOp("]");
      return e;
    }
    if (SkipOp("{")) {
      auto e = NewExpr(ExprKind::kDict, line);
      while (!IsOp("}")) {
        if (!e->args.empty()) ExpectOp(",");
        if (IsOp("}")) break;
        e->args.push_back(ParseExpression());
        ExpectOp(":");
        e->args.push_back(ParseExpression());
      }
      ExpectOp("}");
      return e;
    }
    Error(absl::StrCat("unexpected '", Describe(t), "'"));
  }

  ExprPtr ParsePostfix(ExprPtr e) {
    while (true) {
      int line = Cur().line;
      if (SkipOp(".")) {
        if (Cur().type == TokenType::kName) {
          auto a = NewExpr(ExprKind::kGetAttr, line);
          a->object = std::move(e);
          a->name = ExpectName();
          e = std::move(a);
        } else if (Cur().type == TokenType::kInt) {
          auto a = NewExpr(ExprKind::kGetItem, line);
          a->object = std::move(e);
          auto idx = NewExpr(ExprKind::kLiteral, line);
          idx->value = Value::Int(Cur().int_value);
          Advance();
          a->args.push_back(std::move(idx));
          e = std::move(a);
        } else {
          Error("expected name or number after '.'");
        }
      } else if (SkipOp("[")) {
        e = ParseSubscript(std::move(e), line);
      } else if (IsOp("(")) {
        e = ParseCall(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr ParseSubscript(ExprPtr obj, int line) {
    // [a], [a:b], [a:b:c], [::-1]; a tuple index [a, b] is not used by
    // chat templates and is refused.
    std::vector<ExprPtr> parts;
    bool slice = false;
    parts.push_back(IsOp(":") ? nullptr : ParseExpression());
    while (SkipOp(":")) {
      slice = true;
      if (parts.size() == 3) Error("too many ':' in subscript");
      parts.push_back(IsOp(":") || IsOp("]") ? nullptr : ParseExpression());
    }
    ExpectOp("]");
    auto e = NewExpr(slice ? ExprKind::kSlice : ExprKind::kGetItem, line);
    e->object = std::move(obj);
    while (slice && parts.size() < 3) parts.push_back(nullptr);
    e->args = std::move(parts);
    return e;
  }

  void ParseArgs(Expr* e) {
    ExpectOp("(");
    while (!IsOp(")")) {
      if (!e->args.empty()) ExpectOp(",");
      if (IsOp(")")) break;
      if (IsOp("*") || IsOp("**")) Error("*args and **kwargs in calls are not supported");
      std::string kw;
      if (Cur().type == TokenType::kName && Peek().type == TokenType::kOp && Peek().text == "=") {
        kw = ExpectName();
        Advance();
      } else if (!e->arg_names.empty() && !e->arg_names.back().empty()) {
        Error("positional argument follows keyword argument");
      }
      e->args.push_back(ParseExpression());
      e->arg_names.push_back(kw);
    }
    ExpectOp(")");
  }

  ExprPtr ParseCall(ExprPtr callee) {
    auto e = NewExpr(ExprKind::kCall, Cur().line);
    e->object = std::move(callee);
    ParseArgs(e.get());
    return e;
  }

  ExprPtr ParseFilter(ExprPtr input) {
    int line = Cur().line;
    std::string name = ExpectName();
    while (IsOp(".") && Peek().type == TokenType::kName) {
      Advance();
      name += '.';
      name += ExpectName();
    }
    auto e = NewExpr(ExprKind::kFilter, line);
    e->name = name;
    e->object = std::move(input);
    if (IsOp("(")) ParseArgs(e.get());
    return e;
  }

  ExprPtr ParseFilterExpr(ExprPtr e) {
    while (true) {
      if (SkipOp("|")) {
        e = ParseFilter(std::move(e));
      } else if (IsName("is")) {
        int line = Cur().line;
        Advance();
        auto t = NewExpr(ExprKind::kTest, line);
        t->negated = SkipName("not");
        t->name = ExpectName();
        while (IsOp(".") && Peek().type == TokenType::kName) {
          Advance();
          t->name += '.';
          t->name += ExpectName();
        }
        t->object = std::move(e);
        const Token& c = Cur();
        if (IsOp("(")) {
          ParseArgs(t.get());
        } else if ((c.type == TokenType::kName || c.type == TokenType::kString ||
                    c.type == TokenType::kInt || c.type == TokenType::kFloat ||
                    (c.type == TokenType::kOp && (c.text == "(" || c.text == "[" || c.text == "{"))) &&
                   !(c.type == TokenType::kName && (c.text == "else" || c.text == "or" || c.text == "and"))) {
          if (IsName("is")) Error("You cannot chain multiple tests with is");
          t->args.push_back(ParsePostfix(ParsePrimary()));
          t->arg_names.push_back("");
        }
        e = std::move(t);
      } else if (IsOp("(")) {
        e = ParseCall(std::move(e));
      } else {
        return e;
      }
    }
  }

  // jinja2 reports an unknown filter or test when it compiles the
  // template, except inside an `if` (test or body, not crossing a loop,
  // macro or block) or a conditional expression, where it fails only if
  // evaluated. `soft_` says whether the statement being parsed is in such
  // an `if`; Check walks a finished expression for the rest.
  ExprPtr Check(ExprPtr e) {
    if (!soft_) CheckKnown(*e, false);
    return e;
  }
  void CheckKnown(const Expr& e, bool soft) {
    if (e.kind == ExprKind::kCond) soft = true;
    if (!soft && e.kind == ExprKind::kFilter && !IsKnownFilter(e.name)) {
      ErrorAt(e.line, absl::StrCat("No filter named '", e.name, "'."));
    }
    if (!soft && e.kind == ExprKind::kTest && !IsKnownTest(e.name)) {
      ErrorAt(e.line, absl::StrCat("No test named '", e.name, "'."));
    }
    if (e.object) CheckKnown(*e.object, soft);
    for (const auto& a : e.args) {
      if (a) CheckKnown(*a, soft);
    }
  }
  struct SoftScope {
    SoftScope(Parser* p, bool soft) : p(p), saved(p->soft_) { p->soft_ = soft; }
    ~SoftScope() { p->soft_ = saved; }
    Parser* p;
    bool saved;
  };

  std::vector<Token> toks_;
  bool soft_ = false;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  int varargs_refs_ = 0;
  int kwargs_refs_ = 0;
};

}  // namespace

std::unique_ptr<Program> ParseTokens(std::vector<Token> tokens) {
  return Parser(std::move(tokens)).Run();
}

}  // namespace specline::jinja
