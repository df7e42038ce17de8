// Applies stop strings to streamed text. Text that might be the start of a
// stop string is held back until it is clear, so the client never receives
// a stop string or a piece of one -- unless `include_stop` (vLLM's
// include_stop_str_in_output): then the text ends with the stop string.
#pragma once

#include <string>
#include <vector>

namespace specline {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops, bool include_stop = false)
      : stops_(std::move(stops)), include_stop_(include_stop) {}

  // Adds text; returns what may be sent now. Sets *stopped when a stop
  // string was found: the result then ends just before it (with
  // include_stop: just after it), and the matcher must not be fed again.
  std::string Push(const std::string& text, bool* stopped);
  // The held-back tail, at the end of the stream.
  std::string Flush();
  // After Push set *stopped: the stop string it found.
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  bool include_stop_ = false;
  std::string pending_;
  std::string matched_;
};

}  // namespace specline
