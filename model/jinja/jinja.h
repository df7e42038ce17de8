// A Jinja template engine for chat templates: the subset of Jinja2 that
// Hugging Face chat templates use, rendered the way transformers'
// apply_chat_template renders them (ImmutableSandboxedEnvironment with
// trim_blocks and lstrip_blocks, loopcontrols, its own tojson, and the
// raise_exception / strftime_now globals). docs/chat_templates.md describes
// the subset and how it is checked against Python's jinja2.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace specline::jinja {

// Safe limits; exceeding one is a render error (ResourceExhausted) naming it.
struct Limits {
  int64_t max_output_bytes = 4 << 20;
  int64_t max_loop_iterations = 1 << 20;  // total over the render
  int max_recursion_depth = 64;           // macro calls / nested evaluation
};

struct Options {
  bool trim_blocks = true;  // as transformers.apply_chat_template sets jinja2 up
  bool lstrip_blocks = true;
  Limits limits;
};

struct Program;  // the parsed template (internal; model/jinja/ast.h)

class Template {
 public:
  // Parses `source`. InvalidArgument on a syntax error, message like
  // "chat template line 12: expected 'endif'...".
  static absl::StatusOr<Template> Parse(std::string_view source, Options options = {});

  // Renders with `context` (an object: messages, tools, add_generation_prompt,
  // bos_token, eos_token, any extra kwargs) as the template's variables.
  // InvalidArgument naming the error; raise_exception("msg") gives exactly
  // "msg" prefixed by "chat template raised: ". Limits exceeded:
  // ResourceExhausted.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context) const;

  // Copyable/movable (shared immutable AST); Render is thread-safe.
  Template(const Template&) = default;
  Template(Template&&) noexcept = default;
  Template& operator=(const Template&) = default;
  Template& operator=(Template&&) noexcept = default;
  ~Template();

 private:
  Template(std::shared_ptr<const Program> program, Options options);
  std::shared_ptr<const Program> program_;
  Options options_;
};

}  // namespace specline::jinja
