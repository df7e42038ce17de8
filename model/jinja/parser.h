// Builds the AST from tokens with jinja2's grammar and operator precedence.
// Unknown tags, filters and tests are syntax errors, as jinja2 reports them
// when it compiles a template.
#pragma once

#include <memory>
#include <vector>

#include "model/jinja/ast.h"
#include "model/jinja/lexer.h"

namespace specline::jinja {

// Throws Error (InvalidArgument, "chat template line N: ...").
std::unique_ptr<Program> ParseTokens(std::vector<Token> tokens);

}  // namespace specline::jinja
