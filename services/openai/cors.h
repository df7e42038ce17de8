// CORS for the OpenAI HTTP API (--cors-origins): which browser origins may
// call it. Off by default: a page on another origin then cannot read the
// API's answers (the browser's same-origin rule), which is the safe default
// for a server that may hold bearer tokens or sit on a private network.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace specline::openai {

class CorsPolicy {
 public:
  CorsPolicy() = default;  // allows no origin: no Access-Control-* header is ever sent
  // "" = none; "*" = any origin; else a comma-separated list of origins
  // ("https://app.example.com,http://localhost:3000"), matched exactly.
  static absl::StatusOr<CorsPolicy> Parse(const std::string& spec);

  bool enabled() const { return any_ || !origins_.empty(); }
  // The Access-Control-Allow-Origin value for a request from `origin`, or
  // nothing when that origin is not allowed (or no Origin was sent).
  std::optional<std::string> AllowOrigin(const std::string& origin) const;

  // What a preflight answer carries besides the origin.
  static constexpr const char* kAllowMethods = "GET, POST, OPTIONS";
  static constexpr const char* kDefaultAllowHeaders = "Authorization, Content-Type";
  static constexpr const char* kMaxAgeSeconds = "600";

 private:
  bool any_ = false;
  std::vector<std::string> origins_;
};

}  // namespace specline::openai
