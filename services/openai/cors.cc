#include "services/openai/cors.h"

#include <algorithm>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"

namespace specline::openai {

absl::StatusOr<CorsPolicy> CorsPolicy::Parse(const std::string& spec) {
  CorsPolicy p;
  for (absl::string_view part : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    const std::string origin(absl::StripAsciiWhitespace(part));
    if (origin == "*") {
      p.any_ = true;
      continue;
    }
    // An origin is scheme://host[:port]: no path, no trailing slash (the
    // browser's Origin header never has one, so it would never match).
    const size_t scheme = origin.find("://");
    if (scheme == std::string::npos || scheme == 0 ||
        origin.find('/', scheme + 3) != std::string::npos || origin.size() == scheme + 3)
      return absl::InvalidArgumentError("--cors-origins: '" + origin +
                                        "' is not an origin (scheme://host[:port], or *)");
    p.origins_.push_back(origin);
  }
  return p;
}

std::optional<std::string> CorsPolicy::AllowOrigin(const std::string& origin) const {
  if (origin.empty()) return std::nullopt;
  if (any_) return std::string("*");
  if (std::find(origins_.begin(), origins_.end(), origin) != origins_.end()) return origin;
  return std::nullopt;
}

}  // namespace specline::openai
