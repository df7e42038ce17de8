// Applies stop strings to streamed text. Text that might be the start of a
// stop string is held back until it is clear, so the client never receives
// a stop string or a piece of one.
#pragma once

#include <string>
#include <vector>

namespace specline {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Adds text; returns what may be sent now. Sets *stopped when a stop
  // string was found: the result then ends just before it, and the matcher
  // must not be fed again.
  std::string Push(const std::string& text, bool* stopped);
  // The held-back tail, at the end of the stream.
  std::string Flush();

 private:
  std::vector<std::string> stops_;
  std::string pending_;
};

}  // namespace specline
