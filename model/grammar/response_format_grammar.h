// A structured-output request (specline.v1.ResponseFormat) as an xgrammar
// grammar over text: JSON (any object, or a JSON Schema), a regular
// expression, an EBNF grammar or a list of choices, between an optional
// literal prefix and suffix. Vocabulary-independent; GrammarCompiler turns
// the grammar into token masks.
#pragma once

#include <exception>
#include <optional>
#include <string>

#include <xgrammar/grammar.h>

#include "absl/status/statusor.h"
#include "specline/v1/generation.pb.h"

namespace specline::grammar {

struct JsonOptions {
  // Whitespace wherever JSON allows it (vLLM's default), each run at most
  // `max_whitespace` characters, so a model cannot stall in blanks. With
  // any_whitespace false the output is one line, {"a": 1, "b": [2, 3]},
  // and more of it is forced (jump-forward drafts).
  bool any_whitespace = true;
  int max_whitespace = 16;
  bool operator==(const JsonOptions&) const = default;
};

// InvalidArgument naming what is wrong (a schema xgrammar cannot read, a
// bad regex, an EBNF syntax error, no grammar set, an empty choice list).
absl::StatusOr<xgrammar::Grammar> GrammarOf(const v1::ResponseFormat& format,
                                            const JsonOptions& json = {});

// A grammar, as EBNF text (ResponseFormat.ebnf), of either free text whose
// first character after any whitespace is not "{" (or no text at all), or
// one JSON value of `json_schema` (strict, as a json_schema format is):
// the model chooses between a plain answer and the object. InvalidArgument
// when the schema does not compile.
absl::StatusOr<std::string> TextOrJsonSchemaEbnf(const std::string& json_schema,
                                                 const JsonOptions& json = {});

// What an exception of xgrammar's says, without the time stamp and source
// position its logging puts first ("[18:56:17] .../regex_converter.cc:83: ")
// and without the condition of a failed check.
std::string XgrammarMessage(const std::exception& e);

// `text` as an EBNF string literal.
std::string EbnfLiteral(const std::string& text);

}  // namespace specline::grammar
