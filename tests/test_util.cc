#include "tests/test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace specline::testing {

std::string SourcePath(const std::string& relative) {
  return (fs::path(SPECLINE_SOURCE_DIR) / relative).string();
}

std::string SharedModelPath(const std::string& relative) {
  fs::path root;
  if (const char* env = std::getenv("SPECLINE_SHARED_MODELS")) {
    root = env;
  } else {
    root = fs::path(SPECLINE_SOURCE_DIR).parent_path() / "shared" / "models";
  }
  fs::path p = root / relative;
  return fs::exists(p) ? p.string() : std::string();
}

std::string Gemma3Path() {
  fs::path cache;
  if (const char* env = std::getenv("SPECLINE_MODEL_CACHE")) {
    cache = env;
  } else if (const char* home = std::getenv("HOME")) {
    cache = fs::path(home) / ".cache" / "specline" / "models";
  }
  fs::path p = cache / "gemma-3-270m-q4_k_m.gguf";
  return fs::exists(p) ? p.string() : std::string();
}

std::string SmolLm2Path() {
  fs::path cache;
  if (const char* env = std::getenv("SPECLINE_MODEL_CACHE")) {
    cache = env;
  } else if (const char* home = std::getenv("HOME")) {
    cache = fs::path(home) / ".cache" / "specline" / "models";
  }
  fs::path p = cache / "SmolLM2-135M-Instruct.Q4_1.gguf";
  return fs::exists(p) ? p.string() : std::string();
}

std::string TempDir() {
  // One root per test process, removed when the process exits.
  static const fs::path root = [] {
    std::string tmpl = (fs::temp_directory_path() / "specline-test-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    static std::string to_remove = tmpl;
    // SPECLINE_KEEP_TEST_FILES=1 keeps them (logs of the processes a test
    // started, for a failure that only shows under load).
    if (const char* keep = std::getenv("SPECLINE_KEEP_TEST_FILES"); keep && *keep == '1')
      return fs::path(tmpl);
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(to_remove, ec);
    });
    return fs::path(tmpl);
  }();
  static int counter = 0;
  fs::path dir = root / std::to_string(counter++);
  fs::create_directories(dir);
  return dir.string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const nlohmann::json& GoldenJson(const std::string& relative) {
  static std::mutex mu;
  static std::map<std::string, nlohmann::json> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(relative);
  if (it == cache.end()) it = cache.emplace(relative, nlohmann::json::parse(ReadFile(SourcePath(relative)))).first;
  return it->second;
}

LogitRowsGap CompareLogitRows(const std::vector<float>& a, const std::vector<float>& b,
                              int64_t vocab) {
  LogitRowsGap gap;
  const int64_t n = static_cast<int64_t>(a.size()) / vocab;
  if (n == 0 || a.size() != b.size()) return gap;
  int64_t agree = 0;
  double kl_sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* x = a.data() + i * vocab;
    const float* y = b.data() + i * vocab;
    agree += std::max_element(x, x + vocab) - x == std::max_element(y, y + vocab) - y;
    const double mx = *std::max_element(x, x + vocab), my = *std::max_element(y, y + vocab);
    double zx = 0, zy = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      zx += std::exp(x[v] - mx);
      zy += std::exp(y[v] - my);
    }
    double kl = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double lx = x[v] - mx - std::log(zx), ly = y[v] - my - std::log(zy);
      kl += std::exp(lx) * (lx - ly);
    }
    kl_sum += kl;
    gap.kl_max = std::max(gap.kl_max, kl);
  }
  gap.top1 = double(agree) / n;
  gap.kl_mean = kl_sum / n;
  return gap;
}

}  // namespace specline::testing
