// Encoding speed of each tokenizer family, in microseconds per KB of text
// (median of repeats over the golden text set, repeated to ~64 KB).
//
//   build/bench/tokenizer_bench [--json bench_tokenizer.json]
// Uses ../shared/models (SentencePiece), the SmolLM2 GGUF in the model cache
// (byte-level BPE) and the committed unigram test model; skips what is absent.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "model/formats/gguf.h"
#include "model/tokenizer/tokenizer.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  using namespace specline;
  std::string json_path = "bench_tokenizer.json";
  if (argc == 3 && std::string(argv[1]) == "--json") json_path = argv[2];
  const fs::path src = fs::path(__FILE__).parent_path().parent_path();
  std::ifstream golden_in(src / "tests/data/tokenizer/llama2.json");
  const nlohmann::json golden = nlohmann::json::parse(golden_in);
  std::string text;
  for (const auto& c : golden["cases"]) text += c["text"].get<std::string>() + "\n";
  while (text.size() < 65536) text += text;

  const char* home = std::getenv("HOME");
  const fs::path cache = std::getenv("SPECLINE_MODEL_CACHE")
                             ? fs::path(std::getenv("SPECLINE_MODEL_CACHE"))
                             : fs::path(home ? home : "/tmp") / ".cache/specline/models";
  struct Case {
    std::string name;
    fs::path path;
  };
  const Case cases[] = {
      {"llama2 SentencePiece BPE", src.parent_path() / "shared/models/llama2-tokenizer/tokenizer.model"},
      {"SmolLM2 byte-level BPE", cache / "SmolLM2-135M-Instruct.Q4_1.gguf"},
      {"unigram (test model)", src / "tests/data/tokenizer/unigram_small.model"},
  };
  std::printf("%-28s %12s %12s\n", "tokenizer", "us/KB", "MB/s");
  nlohmann::json results = nlohmann::json::array();
  for (const Case& c : cases) {
    if (!fs::exists(c.path)) {
      std::printf("%-28s %12s\n", c.name.c_str(), "(absent)");
      continue;
    }
    std::unique_ptr<Tokenizer> tok;
    std::unique_ptr<GgufFile> gguf;
    if (c.path.extension() == ".gguf") {
      gguf = GgufFile::Open(c.path.string());
      tok = LoadGgufTokenizer(*gguf);
    } else {
      tok = LoadSentencePieceModel(c.path.string());
    }
    std::vector<double> times;
    for (int r = 0; r < 7; ++r) {
      const double t0 = bench::Now();
      auto ids = tok->Encode(text, false);
      times.push_back(bench::Now() - t0);
      if (ids.empty()) return 1;
    }
    const double us_per_kb = bench::Median(times) * 1e6 / (text.size() / 1024.0);
    std::printf("%-28s %12.1f %12.2f\n", c.name.c_str(), us_per_kb, 1024.0 / us_per_kb);
    results.push_back({{"tokenizer", c.name}, {"us_per_KB", us_per_kb}});
  }
  std::ofstream(json_path) << nlohmann::json{{"bench", "tokenizer"}, {"text_bytes", text.size()},
                                             {"results", results}}.dump(2)
                           << "\n";
  return 0;
}
