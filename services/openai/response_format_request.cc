#include "services/openai/response_format_request.h"

#include "absl/strings/str_cat.h"

namespace specline::openai {
namespace {

using nlohmann::json;

// A schema given as an object or as its JSON text.
std::optional<ApiError> ReadSchema(const json& v, const std::string& param, std::string* out) {
  if (v.is_object()) {
    *out = v.dump();
    return std::nullopt;
  }
  if (v.is_string()) {
    const json parsed = json::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_object()) return BadField(param, "must be a JSON Schema object (or its JSON text)");
    *out = parsed.dump();
    return std::nullopt;
  }
  if (v.is_boolean() && v.get<bool>()) {  // the schema `true`: any JSON value
    *out = "{}";
    return std::nullopt;
  }
  return BadField(param, "must be a JSON Schema object");
}

std::optional<ApiError> ReadString(const json& v, const std::string& param, std::string* out) {
  if (!v.is_string() || v.get<std::string>().empty()) return BadField(param, "must be a non-empty string");
  *out = v.get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> ReadChoices(const json& v, const std::string& param,
                                    v1::ResponseFormat* out) {
  if (!v.is_array() || v.empty()) return BadField(param, "must be a non-empty list of strings");
  auto* choices = out->mutable_choice();
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) return BadField(absl::StrCat(param, "[", i, "]"), "must be a string");
    choices->add_choices(v[i].get<std::string>());
  }
  return std::nullopt;
}

// OpenAI's response_format object.
std::optional<ApiError> ReadOpenAiFormat(const json& v, v1::ResponseFormat* out, bool* set) {
  if (!v.is_object() || !v.contains("type") || !v["type"].is_string()) {
    return BadField("response_format", "must be an object with a string \"type\"");
  }
  const std::string type = v["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    // llama-server also reads a schema here.
    if (auto it = v.find("schema"); it != v.end() && !it->is_null()) {
      *set = true;
      return ReadSchema(*it, "response_format.schema", out->mutable_json_schema());
    }
    out->set_json_object(true);
    *set = true;
    return std::nullopt;
  }
  if (type == "json_schema") {
    auto js = v.find("json_schema");
    if (js == v.end() || !js->is_object()) {
      return BadField("response_format.json_schema", "must be an object with a \"schema\"");
    }
    if (auto name = js->find("name"); name != js->end() && !name->is_string()) {
      return BadField("response_format.json_schema.name", "must be a string");
    }
    if (auto strict = js->find("strict"); strict != js->end() && !strict->is_null() &&
                                          !strict->is_boolean()) {
      return BadField("response_format.json_schema.strict", "must be a boolean");
    }
    // The output always follows the schema: `strict` asks for nothing more.
    auto schema = js->find("schema");
    *set = true;
    if (schema == js->end() || schema->is_null()) {  // OpenAI allows it: any JSON object
      out->set_json_object(true);
      return std::nullopt;
    }
    return ReadSchema(*schema, "response_format.json_schema.schema", out->mutable_json_schema());
  }
  return BadField("response_format.type", absl::StrCat("must be \"text\", \"json_object\" or \"json_schema\", got \"",
                                                  type, "\""));
}

}  // namespace

const std::set<std::string>& ResponseFormatFields() {
  static const std::set<std::string> fields = {
      "response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
      "guided_decoding_backend", "structured_outputs", "json_schema", "grammar"};
  return fields;
}

std::optional<ApiError> ReadResponseFormat(const json& body, v1::GenerateRequest* out) {
  v1::ResponseFormat format;
  std::string given;  // the field that set it
  auto take = [&](const char* name) -> std::optional<ApiError> {
    if (!given.empty()) {
      return BadField(name, absl::StrCat("only one structured-output field may be given (", given,
                                    " was too)"));
    }
    given = name;
    return std::nullopt;
  };
  auto field = [&](const char* name) -> const json* {
    auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  if (const json* v = field("response_format")) {
    bool set = false;
    if (auto e = ReadOpenAiFormat(*v, &format, &set)) return e;
    if (set) given = "response_format";
  }
  if (const json* v = field("guided_json")) {
    if (auto e = take("guided_json")) return e;
    if (auto e = ReadSchema(*v, "guided_json", format.mutable_json_schema())) return e;
  }
  if (const json* v = field("json_schema")) {
    if (auto e = take("json_schema")) return e;
    if (auto e = ReadSchema(*v, "json_schema", format.mutable_json_schema())) return e;
  }
  if (const json* v = field("guided_regex")) {
    if (auto e = take("guided_regex")) return e;
    if (auto e = ReadString(*v, "guided_regex", format.mutable_regex())) return e;
  }
  if (const json* v = field("guided_choice")) {
    if (auto e = take("guided_choice")) return e;
    if (auto e = ReadChoices(*v, "guided_choice", &format)) return e;
  }
  for (const char* name : {"guided_grammar", "grammar"}) {
    if (const json* v = field(name)) {
      if (auto e = take(name)) return e;
      if (auto e = ReadString(*v, name, format.mutable_ebnf())) return e;
    }
  }
  if (const json* v = field("guided_decoding_backend")) {
    if (!v->is_string()) return BadField("guided_decoding_backend", "must be a string");
    const std::string b = v->get<std::string>();
    if (b != "auto" && b != "xgrammar") {
      return BadField("guided_decoding_backend", "this server's backend is \"xgrammar\"");
    }
  }
  if (const json* v = field("structured_outputs")) {
    if (!v->is_object()) return BadField("structured_outputs", "must be an object");
    for (const auto& [key, value] : v->items()) {
      if (value.is_null()) continue;
      const std::string param = "structured_outputs." + key;
      std::optional<ApiError> e;
      if (key == "json") {
        if (!(e = take(param.c_str()))) e = ReadSchema(value, param, format.mutable_json_schema());
      } else if (key == "regex") {
        if (!(e = take(param.c_str()))) e = ReadString(value, param, format.mutable_regex());
      } else if (key == "choice") {
        if (!(e = take(param.c_str()))) e = ReadChoices(value, param, &format);
      } else if (key == "grammar") {
        if (!(e = take(param.c_str()))) e = ReadString(value, param, format.mutable_ebnf());
      } else if (key == "json_object") {
        if (!value.is_boolean()) return BadField(param, "must be a boolean");
        if (value.get<bool>() && !(e = take(param.c_str()))) format.set_json_object(true);
      } else if (key != "backend" && key != "disable_any_whitespace" &&
                 key != "disable_additional_properties") {
        return BadField(param, "unrecognized structured-output field");
      }
      if (e) return e;
    }
  }
  if (!given.empty()) *out->mutable_response_format() = std::move(format);
  return std::nullopt;
}

}  // namespace specline::openai
