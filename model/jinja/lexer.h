// Splits template source into tokens: template text (with jinja2's
// whitespace control already applied: `-` and `+` modifiers, trim_blocks,
// lstrip_blocks, the dropped trailing newline) and the tokens inside
// `{{ }}` and `{% %}`. Comments and raw blocks never reach the parser.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace specline::jinja {

enum class TokenType : uint8_t {
  kData,        // template text
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // text holds the unescaped value
  kInt,
  kFloat,
  kOp,          // operators and punctuation: + - ( ) | . , etc.
  kEof,
};

struct Token {
  TokenType type;
  std::string text;
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Throws Error (InvalidArgument, "chat template line N: ...") on a lexical
// error: an unterminated tag, comment or string.
std::vector<Token> Tokenize(std::string_view source, const LexOptions& options);

}  // namespace specline::jinja
