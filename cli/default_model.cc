#include "cli/default_model.h"

#include <cstdlib>
#include <filesystem>

namespace fs = std::filesystem;

namespace specline::cli {

std::string ModelCacheDir() {
  if (const char* env = std::getenv("SPECLINE_MODEL_CACHE")) return env;
  const char* home = std::getenv("HOME");
  return (fs::path(home ? home : "/tmp") / ".cache" / "specline" / "models").string();
}

std::string DefaultModelPath() {
  if (const char* env = std::getenv("SPECLINE_MODEL")) return env;
  const fs::path candidates[] = {
      fs::path(ModelCacheDir()) / "SmolLM2-135M-Instruct.Q4_1.gguf",
      fs::path("../shared/models/stories260K/stories260K.bin"),
  };
  for (const fs::path& p : candidates) {
    if (fs::exists(p)) return p.string();
  }
  return "";
}

}  // namespace specline::cli
