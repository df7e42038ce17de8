// The port file every specline process writes once it listens, so a
// launcher or test that asked for port 0 learns the real ports.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace specline {

// Writes `content` to `path` atomically (temp file + rename), so a reader
// polling for the file never sees half of it. Throws std::runtime_error.
void WriteFileAtomically(const std::string& path, const std::string& content);

inline void WritePortFile(const std::string& path, const nlohmann::json& ports) {
  WriteFileAtomically(path, ports.dump() + "\n");
}

}  // namespace specline
