// specline::jinja::Template: parse once, render many times. Internal errors
// travel as exceptions (model/jinja/value.h's Error) and become Statuses
// here, so no failure inside a template can escape as a crash.
#include "model/jinja/jinja.h"

#include <exception>
#include <new>

#include "model/jinja/ast.h"
#include "model/jinja/lexer.h"
#include "model/jinja/parser.h"
#include "model/jinja/render.h"

namespace specline::jinja {

Template::Template(std::shared_ptr<const Program> program, Options options)
    : program_(std::move(program)), options_(options) {}

Template::~Template() = default;

absl::StatusOr<Template> Template::Parse(std::string_view source, Options options) {
  try {
    LexOptions lex;
    lex.trim_blocks = options.trim_blocks;
    lex.lstrip_blocks = options.lstrip_blocks;
    std::shared_ptr<const Program> program = ParseTokens(Tokenize(source, lex));
    return Template(std::move(program), options);
  } catch (const Error& e) {
    return absl::Status(e.code, e.message);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("chat template: out of memory while parsing");
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(std::string("chat template: ") + e.what());
  }
}

absl::StatusOr<std::string> Template::Render(const nlohmann::ordered_json& context) const {
  try {
    Renderer renderer(options_.limits);
    return renderer.Run(*program_, context);
  } catch (const Error& e) {
    return absl::Status(e.code, e.message);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("chat template: out of memory while rendering");
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(std::string("chat template: ") + e.what());
  }
}

}  // namespace specline::jinja
