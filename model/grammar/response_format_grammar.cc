#include "model/grammar/response_format_grammar.h"

#include <cstdio>
#include <exception>
#include <stdexcept>
#include <vector>

#include "absl/status/status.h"
#include "model/grammar/json_schema_drafts.h"

namespace specline::grammar {
namespace {

xgrammar::Grammar LiteralGrammar(const std::string& text) {
  return xgrammar::Grammar::FromEBNF("root ::= " + EbnfLiteral(text));
}

std::string ReplaceAll(std::string text, const std::string& from, const std::string& to) {
  for (size_t p = 0; (p = text.find(from, p)) != std::string::npos; p += to.size()) {
    text.replace(p, from.size(), to);
  }
  return text;
}

// xgrammar 0.2.8's JSON strings are laxer than JSON (found by
// scripts/reference/grammar_fuzz.py): the characters of a length-bounded
// string are [^"\\\r\n], which lets raw control characters through, and
// every string character class takes UTF-8 surrogates (ED A0..BF xx), which
// no strict JSON parser reads. Both classes are narrowed in the grammar's
// EBNF text, which is then parsed again.
xgrammar::Grammar StrictJsonStrings(const xgrammar::Grammar& grammar) {
  const std::string strict_char = R"([^\0-\x1f\"\\\ud800-\udfff])";
  std::string ebnf = grammar.ToString();
  ebnf = ReplaceAll(ebnf, R"([^\"\\\r\n])", strict_char);
  ebnf = ReplaceAll(ebnf, R"([^\0-\x1f\"\\\r\n])", strict_char);
  return xgrammar::Grammar::FromEBNF(ebnf, "root");
}

xgrammar::Grammar JsonSchemaGrammar(const std::string& schema, bool strict,
                                    const JsonOptions& json) {
  return StrictJsonStrings(xgrammar::Grammar::FromJSONSchema(
      TupleItemsAsPrefixItems(schema), json.any_whitespace, /*indent=*/std::nullopt,
      /*separators=*/std::nullopt,
      /*strict_mode=*/strict,
      json.any_whitespace ? std::optional<int>(json.max_whitespace) : std::nullopt));
}

// The format's own grammar, without prefix and suffix. Throws what xgrammar
// throws on bad input.
xgrammar::Grammar BodyGrammar(const v1::ResponseFormat& format, const JsonOptions& json) {
  switch (format.grammar_case()) {
    case v1::ResponseFormat::kJsonObject:
      // Not strict: strict mode forbids properties a schema does not name,
      // and {"type": "object"} names none.
      return JsonSchemaGrammar(R"({"type": "object"})", /*strict=*/false, json);
    case v1::ResponseFormat::kJsonSchema:
      // Strict, as vLLM compiles OpenAI's json_schema: no property or item
      // the schema does not describe.
      return JsonSchemaGrammar(format.json_schema(), /*strict=*/true, json);
    case v1::ResponseFormat::kRegex:
      return xgrammar::Grammar::FromRegex(format.regex());
    case v1::ResponseFormat::kEbnf:
      return xgrammar::Grammar::FromEBNF(format.ebnf(), "root");
    case v1::ResponseFormat::kChoice: {
      std::string rule = "root ::= ";
      const auto& choices = format.choice().choices();
      for (int i = 0; i < choices.size(); ++i) {
        rule += (i ? " | " : "") + EbnfLiteral(choices[i]);
      }
      return xgrammar::Grammar::FromEBNF(rule);
    }
    case v1::ResponseFormat::GRAMMAR_NOT_SET: break;
  }
  throw std::invalid_argument(
      "no grammar set (one of json_object, json_schema, regex, ebnf, choice)");
}

const char* FormatName(const v1::ResponseFormat& format) {
  switch (format.grammar_case()) {
    case v1::ResponseFormat::kJsonObject: return "json_object";
    case v1::ResponseFormat::kJsonSchema: return "json_schema";
    case v1::ResponseFormat::kRegex: return "regex";
    case v1::ResponseFormat::kEbnf: return "ebnf";
    case v1::ResponseFormat::kChoice: return "choice";
    case v1::ResponseFormat::GRAMMAR_NOT_SET: break;
  }
  return "response_format";
}

}  // namespace

std::string XgrammarMessage(const std::exception& e) {
  std::string message = e.what();
  if (!message.empty() && message[0] == '[') {
    const size_t source = message.find(".cc:");
    const size_t colon = source == std::string::npos ? source : message.find(": ", source);
    if (colon != std::string::npos) message = message.substr(colon + 2);
  }
  // An XGRAMMAR_CHECK's condition says nothing to the user; its text does.
  if (message.rfind("Check failed: ", 0) == 0) {
    const size_t text = message.find(" is false: ");
    if (text != std::string::npos) message = message.substr(text + 11);
  }
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  return message;
}

std::string EbnfLiteral(const std::string& text) {
  // Bytes of 0x80 and above pass through: xgrammar reads the literal as
  // UTF-8, and its \x escapes name code points, not bytes.
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

absl::StatusOr<std::string> TextOrJsonSchemaEbnf(const std::string& json_schema,
                                                 const JsonOptions& json) {
  try {
    const xgrammar::Grammar object = JsonSchemaGrammar(json_schema, /*strict=*/true, json);
    const xgrammar::Grammar text =
        xgrammar::Grammar::FromEBNF(R"(root ::= [ \t\r\n]* ([^{ \t\r\n] [^]*)?)");
    return xgrammar::Grammar::Union({object, text}).ToString();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError("json_schema: " + XgrammarMessage(e));
  }
}

absl::StatusOr<xgrammar::Grammar> GrammarOf(const v1::ResponseFormat& format,
                                            const JsonOptions& json) {
  if (format.grammar_case() == v1::ResponseFormat::kChoice &&
      format.choice().choices().empty()) {
    return absl::InvalidArgumentError("response_format choice: the list of choices is empty");
  }
  try {
    std::vector<xgrammar::Grammar> parts;
    if (!format.prefix().empty()) parts.push_back(LiteralGrammar(format.prefix()));
    parts.push_back(BodyGrammar(format, json));
    if (!format.suffix().empty()) parts.push_back(LiteralGrammar(format.suffix()));
    return parts.size() == 1 ? parts[0] : xgrammar::Grammar::Concat(parts);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(std::string("response_format ") + FormatName(format) +
                                      ": " + XgrammarMessage(e));
  }
}

}  // namespace specline::grammar
