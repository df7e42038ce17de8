// grammar_walk: constrained random walks for the structured-output fuzz
// check (scripts/reference/grammar_fuzz.py). Reads JSON lines
//   {"format": {"json_schema": {...} | "json_object": true | "regex": "..." |
//               "ebnf": "..." | "choice": [...], "prefix": "...", "suffix": "..."},
//    "seed": 1, "walks": 3, "max_tokens": 2048}
// and writes one JSON line per input: {"outputs": [{"text", "terminated",
// "tokens", "mismatches"[, "invalid_utf8_hex"]}, ...]} or {"error": "...", "code": "..."}. One
// process, one vocabulary, one compiler (its cache) for every case.
//   grammar_walk --tokenizer PATH [--vocab-size N] [--compact-json]
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "model/grammar/grammar_compiler.h"
#include "model/grammar/grammar_matcher.h"
#include "model/grammar/grammar_random_walk.h"
#include "model/tokenizer/tokenizer.h"

namespace {

specline::v1::ResponseFormat FormatOf(const nlohmann::json& j) {
  specline::v1::ResponseFormat f;
  if (j.contains("json_schema")) {
    const auto& s = j["json_schema"];
    f.set_json_schema(s.is_string() ? s.get<std::string>() : s.dump());
  } else if (j.contains("json_object")) {
    f.set_json_object(true);
  } else if (j.contains("regex")) {
    f.set_regex(j["regex"].get<std::string>());
  } else if (j.contains("ebnf")) {
    f.set_ebnf(j["ebnf"].get<std::string>());
  } else if (j.contains("choice")) {
    for (const auto& c : j["choice"]) f.mutable_choice()->add_choices(c.get<std::string>());
  }
  f.set_prefix(j.value("prefix", ""));
  f.set_suffix(j.value("suffix", ""));
  return f;
}

bool ValidUtf8(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();  // the strict handler throws on invalid UTF-8
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

std::string Hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : bytes) {
    hex += digits[c >> 4];
    hex += digits[c & 15];
  }
  return hex;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_path;
  int vocab_size = 0;
  specline::grammar::CompilerOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--tokenizer" && i + 1 < argc) {
      tokenizer_path = argv[++i];
    } else if (a == "--vocab-size" && i + 1 < argc) {
      vocab_size = std::atoi(argv[++i]);
    } else if (a == "--compact-json") {
      options.json.any_whitespace = false;
    } else {
      std::cerr << "usage: grammar_walk --tokenizer PATH [--vocab-size N] [--compact-json]\n";
      return 2;
    }
  }
  if (tokenizer_path.empty()) {
    std::cerr << "grammar_walk: --tokenizer is required (a GGUF, tokenizer.json or .model)\n";
    return 2;
  }
  std::unique_ptr<specline::Tokenizer> tokenizer = specline::LoadTokenizer(tokenizer_path, vocab_size);
  auto vocab = std::make_shared<specline::grammar::GrammarVocabulary>(*tokenizer, vocab_size);
  specline::grammar::GrammarCompiler compiler(vocab, options);

  std::ios::sync_with_stdio(false);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    nlohmann::json result;
    try {
      auto req = nlohmann::json::parse(line);
      const auto t0 = std::chrono::steady_clock::now();
      auto compiled = compiler.Compile(FormatOf(req.at("format")));
      result["compile_ms"] =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!compiled.ok()) {
        result["error"] = std::string(compiled.status().message());
        result["code"] = absl::StatusCodeToString(compiled.status().code());
      } else {
        result["outputs"] = nlohmann::json::array();
        specline::grammar::WalkOptions walk_options;
        walk_options.seed = req.value("seed", uint64_t{1});
        walk_options.max_tokens = req.value("max_tokens", 2048);
        const int walks = req.value("walks", 1);
        for (int w = 0; w < walks; ++w, ++walk_options.seed) {
          specline::grammar::GrammarMatcher matcher(*compiled);
          auto walk = specline::grammar::RandomWalk(matcher, walk_options);
          nlohmann::json out = {{"text", walk.text},
                                {"terminated", walk.terminated},
                                {"tokens", walk.tokens.size()},
                                {"mismatches", walk.mask_accept_mismatches}};
          if (!ValidUtf8(walk.text)) out["invalid_utf8_hex"] = Hex(walk.text);
          result["outputs"].push_back(out);
        }
      }
    } catch (const std::exception& e) {
      result["error"] = std::string("bad request: ") + e.what();
      result["code"] = "BAD_REQUEST";
    }
    std::cout << result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    std::cout.flush();
  }
  return 0;
}
