// The lexer follows jinja2's rules for where whitespace goes, since chat
// templates are written around them (every `{%- ... %}` and trim_blocks
// newline decides a prompt's bytes):
//   - `{%-` / `{{-` / `{#-` strip all whitespace before the tag, `-%}` /
//     `-}}` / `-#}` all whitespace after it;
//   - trim_blocks removes one newline right after `%}` or `#}` (not `}}`),
//     unless the tag ends `+%}`;
//   - lstrip_blocks removes spaces and tabs (any whitespace) between the
//     start of a line and a `{%` or `{#` (never `{{`), unless it is `{%+`;
//     "start of a line" includes text right after a tag that itself ended
//     with a newline;
//   - line breaks become "\n" and one trailing newline of the source is
//     dropped (keep_trailing_newline=False).
#include "model/jinja/lexer.h"

#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "model/jinja/value.h"

namespace specline::jinja {
namespace {

[[noreturn]] void SyntaxError(int line, std::string_view what) {
  Fail(absl::StrCat("chat template line ", line, ": ", std::string(what)));
}

bool IsSpaceAt(std::string_view s, size_t pos, size_t* len) {
  size_t p = pos;
  char32_t cp = DecodeUtf8(s, &p);
  *len = p - pos;
  return IsPySpace(cp);
}

// Python's str.rstrip().
std::string_view RStrip(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80) --start;
    size_t len;
    if (!IsSpaceAt(s, start, &len)) break;
    end = start;
  }
  return s.substr(0, end);
}

// Length of the whitespace run at `pos` (regex \s*).
size_t SpanSpace(std::string_view s, size_t pos) {
  size_t p = pos, len;
  while (p < s.size() && IsSpaceAt(s, p, &len)) p += len;
  return p - pos;
}

bool AllSpace(std::string_view s) { return SpanSpace(s, 0) == s.size(); }

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Python's "unicode-escape" decoding of a string literal's body, as jinja2
// applies it.
std::string Unescape(std::string_view body, int line) {
  std::string out;
  out.reserve(body.size());
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out += c;
      continue;
    }
    char e = body[++i];
    auto hex = [&](int n) -> char32_t {
      char32_t v = 0;
      for (int k = 1; k <= n; ++k) {
        if (i + k >= body.size()) SyntaxError(line, "truncated escape in string literal");
        char h = body[i + k];
        int d = IsDigit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
        if (d < 0) SyntaxError(line, "bad escape in string literal");
        v = v * 16 + d;
      }
      i += n;
      return v;
    };
    switch (e) {
      case '\n': break;  // line continuation
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': AppendUtf8(&out, hex(2)); break;
      case 'u': AppendUtf8(&out, hex(4)); break;
      case 'U': AppendUtf8(&out, hex(8)); break;
      default:
        if (e >= '0' && e <= '7') {
          char32_t v = e - '0';
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) {
            v = v * 8 + (body[++i] - '0');
          }
          AppendUtf8(&out, v);
        } else {
          out += '\\';  // unknown escapes stay as written
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const LexOptions& options) : src_(std::move(source)), opt_(options) {}

  std::vector<Token> Run() {
    std::string_view s = src_;
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s.size()) {
      size_t tag = FindTagStart(pos);
      if (tag == std::string_view::npos) {
        Emit(TokenType::kData, std::string(s.substr(pos)), pos);
        break;
      }
      char kind = s[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < s.size() ? s[tag + 2] : 0;
      if (sign != '-' && sign != '+') sign = 0;
      std::string_view text = s.substr(pos, tag - pos);
      if (sign == '-') {
        text = RStrip(text);
      } else if (sign != '+' && opt_.lstrip_blocks && kind != '{') {
        size_t nl = text.rfind('\n');
        size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && AllSpace(text.substr(l_pos))) {
          text = text.substr(0, l_pos);
        }
      }
      if (!text.empty()) Emit(TokenType::kData, std::string(text), pos);
      size_t body = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        pos = EndComment(body, tag);
      } else if (kind == '%' && IsRawBegin(body, &pos)) {
        pos = LexRaw(pos, tag, s[pos - 1] == '\n');
      } else {
        pos = LexTag(kind, body, tag);
      }
      line_starting = pos > 0 && s[pos - 1] == '\n';
    }
    Emit(TokenType::kEof, "", s.size());
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    for (size_t p = src_.find('{', from); p != std::string::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) {
        return p;
      }
    }
    return std::string_view::npos;
  }

  int LineAt(size_t pos) {
    for (; line_pos_ < pos && line_pos_ < src_.size(); ++line_pos_) line_ += src_[line_pos_] == '\n';
    return line_;
  }

  void Emit(TokenType type, std::string text, size_t pos) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.line = LineAt(pos);
    tokens_.push_back(std::move(t));
  }

  // After a `%}` or `#}` at `end` (just past it): trim_blocks' newline.
  size_t AfterBlockEnd(size_t end, char sign) const {
    if (sign == '-') return end + SpanSpace(src_, end);
    if (sign == '+') return end;
    if (opt_.trim_blocks && end < src_.size() && src_[end] == '\n') return end + 1;
    return end;
  }

  size_t EndComment(size_t body, size_t tag) {
    size_t end = src_.find("#}", body);
    if (end == std::string::npos) SyntaxError(LineAt(tag), "Missing end of comment tag");
    char sign = end > body && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    return AfterBlockEnd(end + 2, sign);
  }

  // `{% raw %}` (the `{%` and its sign already consumed up to `body`).
  bool IsRawBegin(size_t body, size_t* after) const {
    size_t p = body + SpanSpace(src_, body);
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    if (p < src_.size() && (IsNameStart(src_[p]) || IsDigit(src_[p]))) return false;
    p += SpanSpace(src_, p);
    if (src_.compare(p, 3, "-%}") == 0) {
      *after = p + 3 + SpanSpace(src_, p + 3);
      return true;
    }
    if (src_.compare(p, 2, "%}") == 0) {
      *after = p + 2;  // raw's opening tag takes no trim_blocks newline
      return true;
    }
    return false;
  }

  size_t LexRaw(size_t pos, size_t tag, bool line_starting) {
    for (size_t p = src_.find("{%", pos); p != std::string::npos; p = src_.find("{%", p + 1)) {
      size_t q = p + 2;
      char sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      q += SpanSpace(src_, q);
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      q += SpanSpace(src_, q);
      char end_sign = 0;
      if (src_.compare(q, 3, "+%}") == 0 || src_.compare(q, 3, "-%}") == 0) {
        end_sign = src_[q];
        q += 3;
      } else if (src_.compare(q, 2, "%}") == 0) {
        q += 2;
      } else {
        continue;
      }
      std::string_view text = std::string_view(src_).substr(pos, p - pos);
      if (sign == '-') {
        text = RStrip(text);
      } else if (sign != '+' && opt_.lstrip_blocks) {
        size_t nl = text.rfind('\n');
        size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && AllSpace(text.substr(l_pos))) {
          text = text.substr(0, l_pos);
        }
      }
      if (!text.empty()) Emit(TokenType::kData, std::string(text), pos);
      return AfterBlockEnd(q, end_sign);
    }
    SyntaxError(LineAt(tag), "Missing end of raw directive");
  }

  // The tokens of a `{{ }}` or `{% %}` tag; returns the position after it.
  size_t LexTag(char kind, size_t pos, size_t tag) {
    bool block = kind == '%';
    Emit(block ? TokenType::kBlockBegin : TokenType::kVarBegin, "", tag);
    std::vector<char> balance;
    const std::string& s = src_;
    while (true) {
      if (pos >= s.size()) SyntaxError(LineAt(tag), "unexpected end of template, tag not closed");
      if (balance.empty()) {
        // The tag's end, tried before anything else at each position, as
        // jinja2 does (`{{ x -}}` ends the tag; it is no minus).
        if (block) {
          if (s.compare(pos, 3, "+%}") == 0 || s.compare(pos, 3, "-%}") == 0) {
            Emit(TokenType::kBlockEnd, "", pos);
            return AfterBlockEnd(pos + 3, s[pos]);
          }
          if (s.compare(pos, 2, "%}") == 0) {
            Emit(TokenType::kBlockEnd, "", pos);
            return AfterBlockEnd(pos + 2, 0);
          }
        } else {
          if (s.compare(pos, 3, "-}}") == 0) {
            Emit(TokenType::kVarEnd, "", pos);
            return pos + 3 + SpanSpace(s, pos + 3);
          }
          if (s.compare(pos, 2, "}}") == 0) {
            Emit(TokenType::kVarEnd, "", pos);
            return pos + 2;
          }
        }
      }
      size_t space = SpanSpace(s, pos);
      if (space > 0) {
        pos += space;
        continue;
      }
      char c = s[pos];
      if (IsDigit(c)) {
        pos = LexNumber(pos);
      } else if (IsNameStart(c)) {
        size_t end = pos;
        while (end < s.size() && (IsNameStart(s[end]) || IsDigit(s[end]))) ++end;
        Emit(TokenType::kName, s.substr(pos, end - pos), pos);
        pos = end;
      } else if (c == '\'' || c == '"') {
        size_t end = pos + 1;
        while (end < s.size() && s[end] != c) end += s[end] == '\\' ? 2 : 1;
        if (end >= s.size()) SyntaxError(LineAt(pos), "unexpected end of string literal");
        Token t;
        t.type = TokenType::kString;
        t.line = LineAt(pos);
        t.text = Unescape(std::string_view(s).substr(pos + 1, end - pos - 1), t.line);
        tokens_.push_back(std::move(t));
        pos = end + 1;
      } else {
        static const char* kOps2[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (const char* o : kOps2) {
          if (s.compare(pos, 2, o) == 0) op = o;
        }
        if (op.empty()) {
          if (std::string_view("+-*/%~[](){}<>=.:|,;").find(c) == std::string_view::npos) {
            SyntaxError(LineAt(pos), absl::StrCat("unexpected char '", std::string(1, c), "'"));
          }
          op = std::string(1, c);
          if (c == '(' || c == '[' || c == '{') {
            balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
          } else if (c == ')' || c == ']' || c == '}') {
            if (balance.empty()) SyntaxError(LineAt(pos), absl::StrCat("unexpected '", std::string(op), "'"));
            if (balance.back() != c) {
              SyntaxError(LineAt(pos), absl::StrCat("unexpected '", std::string(op), "', expected '",
                                                    std::string(1, balance.back()), "'"));
            }
            balance.pop_back();
          }
        }
        Emit(TokenType::kOp, op, pos);
        pos += op.size();
      }
    }
  }

  size_t LexNumber(size_t pos) {
    const std::string& s = src_;
    auto digits = [&](size_t p) {
      size_t start = p;
      while (p < s.size() && (IsDigit(s[p]) || (s[p] == '_' && p > start && p + 1 < s.size() && IsDigit(s[p + 1])))) ++p;
      return p;
    };
    size_t end = digits(pos);
    bool is_float = false;
    if (end + 1 < s.size() && s[end] == '.' && IsDigit(s[end + 1])) {
      end = digits(end + 1);
      is_float = true;
    }
    if (end < s.size() && (s[end] == 'e' || s[end] == 'E')) {
      size_t p = end + 1;
      if (p < s.size() && (s[p] == '+' || s[p] == '-')) ++p;
      if (p < s.size() && IsDigit(s[p])) {
        end = digits(p);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = pos; i < end; ++i) {
      if (s[i] != '_') text += s[i];
    }
    Token t;
    t.line = LineAt(pos);
    if (is_float) {
      t.type = TokenType::kFloat;
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      t.type = TokenType::kInt;
      errno = 0;
      t.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) SyntaxError(t.line, "integer literal too large");
    }
    t.text = std::move(text);
    tokens_.push_back(std::move(t));
    return end;
  }

  std::string src_;
  LexOptions opt_;
  std::vector<Token> tokens_;
  int line_ = 1;
  size_t line_pos_ = 0;
};

// "\r\n" and "\r" become "\n"; one trailing newline goes.
std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> Tokenize(std::string_view source, const LexOptions& options) {
  return Lexer(NormalizeNewlines(source), options).Run();
}

}  // namespace specline::jinja
