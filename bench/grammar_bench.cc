// Cost of structured output on the default model's vocabulary (SmolLM2,
// 49152 tokens): the per-token mask (FillAllowed) over constrained random
// walks of JSON Schema outputs, Accept, and applying the mask to a row of
// logits, against the model's decode TPOT; and the compile time of a
// 50-field schema, cold and from the compiler's cache.
//
//   build/bench/grammar_bench [--walks 20] [--threads 2] [--json bench_grammar.json]
// Needs the SmolLM2 GGUF in the model cache (scripts/setup.sh fetches it).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "model/grammar/grammar_compiler.h"
#include "model/grammar/grammar_matcher.h"
#include "model/grammar/grammar_random_walk.h"
#include "model/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using namespace specline;

namespace {

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

// 50 properties of every kind a form-filling or extraction schema has,
// all required.
std::string FiftyFieldSchema() {
  ordered_json props = ordered_json::object();
  for (int i = 0; i < 50; ++i) {
    const std::string name = "field_" + std::to_string(i);
    switch (i % 7) {
      case 0: props[name] = {{"type", "string"}}; break;
      case 1: props[name] = {{"type", "integer"}, {"minimum", 0}, {"maximum", 1000}}; break;
      case 2: props[name] = {{"type", "number"}}; break;
      case 3: props[name] = {{"type", "boolean"}}; break;
      case 4: props[name] = {{"enum", {"low", "medium", "high", "critical"}}}; break;
      case 5:
        props[name] = {{"type", "array"}, {"items", {{"type", "string"}}}, {"maxItems", 3}};
        break;
      default:
        props[name] = {{"type", "object"},
                       {"properties", {{"city", {{"type", "string"}}}, {"zip", {{"type", "string"}, {"pattern", "^[0-9]{5}$"}}}}},
                       {"required", {"city", "zip"}}};
    }
  }
  ordered_json required = ordered_json::array();
  for (auto it = props.begin(); it != props.end(); ++it) required.push_back(it.key());
  return ordered_json{{"type", "object"}, {"properties", props}, {"required", required}}.dump();
}

const char* kToolCallSchema = R"({"type": "object", "properties": {
  "name": {"enum": ["get_weather", "search", "send_email"]},
  "arguments": {"type": "object", "properties": {
    "location": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 14}},
    "required": ["location"]}},
  "required": ["name", "arguments"]})";

const char* kNestedSchema = R"({"type": "object", "properties": {
  "name": {"type": "string"}, "age": {"type": "integer"},
  "role": {"enum": ["admin", "user", "guest"]},
  "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}, "minItems": 1, "maxItems": 3},
  "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "integer"},
    "geo": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}},
    "required": ["city", "geo"]}},
  "required": ["name", "role", "tags", "address"]})";

v1::ResponseFormat SchemaFormat(const std::string& schema) {
  v1::ResponseFormat f;
  f.set_json_schema(schema);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  int walks = 20, threads = 2;
  std::string json_path = "bench_grammar.json";
  if (!bench::ParseArgs(argc, argv, [&](const std::string& a, auto next) {
        if (a == "--walks") walks = std::stoi(next());
        else if (a == "--threads") threads = std::stoi(next());
        else if (a == "--json") json_path = next();
        else return false;
        return true;
      })) {
    std::fprintf(stderr, "usage: grammar_bench [--walks N] [--threads N] [--json PATH]\n");
    return 2;
  }
  const char* home = std::getenv("HOME");
  const fs::path cache = std::getenv("SPECLINE_MODEL_CACHE")
                             ? fs::path(std::getenv("SPECLINE_MODEL_CACHE"))
                             : fs::path(home ? home : "/tmp") / ".cache/specline/models";
  const fs::path model = cache / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(model)) {
    std::fprintf(stderr, "grammar_bench: %s absent (scripts/setup.sh fetches it)\n", model.c_str());
    return 1;
  }
  auto tokenizer = LoadTokenizer(model.string(), 0);
  double t0 = bench::Now();
  auto vocab = std::make_shared<grammar::GrammarVocabulary>(*tokenizer, tokenizer->vocab_size());
  const double vocab_ms = (bench::Now() - t0) * 1e3;
  grammar::CompilerOptions options;
  options.threads = threads;

  ordered_json results = {{"bench", "grammar_bench"},
                          {"vocab_size", vocab->vocab_size()},
                          {"compile_threads", threads},
                          {"vocabulary_setup_ms", vocab_ms}};

  // Compile time of the 50-field schema: cold (a fresh compiler each time,
  // so nothing cached), then from the cache.
  const v1::ResponseFormat fifty = SchemaFormat(FiftyFieldSchema());
  std::vector<double> cold_ms, cached_us;
  for (int r = 0; r < 3; ++r) {
    grammar::GrammarCompiler fresh(vocab, options);
    t0 = bench::Now();
    if (!fresh.Compile(fifty).ok()) return 1;
    cold_ms.push_back((bench::Now() - t0) * 1e3);
    for (int i = 0; i < 100; ++i) {
      t0 = bench::Now();
      if (!fresh.Compile(fifty).ok()) return 1;
      cached_us.push_back((bench::Now() - t0) * 1e6);
    }
  }
  std::printf("vocabulary setup (49152 tokens): %.1f ms\n", vocab_ms);
  std::printf("50-field schema compile: cold %.1f ms (median of 3), cached %.2f us\n\n",
              bench::Median(cold_ms), bench::Median(cached_us));
  results["compile_50_field_cold_ms"] = bench::Median(cold_ms);
  results["compile_50_field_cached_us"] = bench::Median(cached_us);

  // Per-token costs over random walks, both whitespace modes.
  std::printf("%-34s %8s %10s %10s %10s %10s %10s %10s\n", "schema (whitespace)", "tokens",
              "compile ms", "fill p50", "fill p90", "fill p99", "accept p50", "apply p50");
  std::printf("%-34s %8s %10s %10s %10s %10s %10s %10s\n", "", "", "", "us", "us", "us", "us",
              "us");
  std::vector<float> logits(vocab->vocab_size());
  std::mt19937 rng(5);
  for (float& l : logits) l = std::normal_distribution<float>(0, 1)(rng);
  ordered_json rows = ordered_json::array();
  std::vector<double> all_fill;
  const std::pair<const char*, std::string> schemas[] = {
      {"tool call", kToolCallSchema}, {"nested", kNestedSchema}, {"50 fields", FiftyFieldSchema()}};
  for (bool any_ws : {true, false}) {
    grammar::CompilerOptions o = options;
    o.json.any_whitespace = any_ws;
    grammar::GrammarCompiler compiler(vocab, o);
    for (const auto& [name, schema] : schemas) {
      t0 = bench::Now();
      auto g = compiler.Compile(SchemaFormat(schema));
      const double compile_ms = (bench::Now() - t0) * 1e3;
      if (!g.ok()) return 1;
      std::vector<double> fill, accept, apply;
      size_t tokens = 0;
      for (int w = 0; w < walks; ++w) {
        grammar::GrammarMatcher m(*g);
        grammar::WalkOptions wo;
        wo.seed = 100 + w;
        grammar::Walk walk = grammar::RandomWalk(m, wo);
        fill.insert(fill.end(), walk.fill_us.begin(), walk.fill_us.end());
        tokens += walk.tokens.size();
        // Replay: Accept's cost, and the mask applied to a logit row (what
        // the sampler adds per constrained token).
        m.Reset();
        std::vector<uint32_t> mask(m.mask_words());
        std::vector<float> row(logits.size());
        for (int32_t id : walk.tokens) {
          m.FillAllowed(mask);
          std::copy(logits.begin(), logits.end(), row.begin());
          double a0 = bench::Now();
          grammar::MaskLogits(mask, row);
          apply.push_back((bench::Now() - a0) * 1e6);
          a0 = bench::Now();
          if (!m.Accept(id)) return 1;
          accept.push_back((bench::Now() - a0) * 1e6);
        }
      }
      all_fill.insert(all_fill.end(), fill.begin(), fill.end());
      const std::string label = std::string(name) + (any_ws ? " (any)" : " (compact)");
      std::printf("%-34s %8zu %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f\n", label.c_str(), tokens,
                  compile_ms, bench::Median(fill), Percentile(fill, 0.9), Percentile(fill, 0.99),
                  bench::Median(accept), bench::Median(apply));
      rows.push_back({{"schema", name},
                      {"any_whitespace", any_ws},
                      {"tokens", tokens},
                      {"compile_ms", compile_ms},
                      {"fill_us_p50", bench::Median(fill)},
                      {"fill_us_p90", Percentile(fill, 0.9)},
                      {"fill_us_p99", Percentile(fill, 0.99)},
                      {"accept_us_p50", bench::Median(accept)},
                      {"apply_us_p50", bench::Median(apply)}});
    }
  }
  results["walks"] = rows;
  results["fill_us_p50_all"] = bench::Median(all_fill);
  results["fill_us_p99_all"] = Percentile(all_fill, 0.99);
  std::printf("\nmask fill over every walk: median %.1f us, p99 %.1f us\n", bench::Median(all_fill),
              Percentile(all_fill, 0.99));
  std::ofstream(json_path) << results.dump(2) << "\n";
  std::printf("wrote %s\n", json_path.c_str());
  return 0;
}
