#include "services/principals.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/cluster_secret.h"
#include "services/request_parser.h"

namespace specline {

absl::StatusOr<Principals> Principals::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError("--auth-token-file: cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return Parse(ss.str(), path);
}

absl::StatusOr<Principals> Principals::Parse(std::string_view text, const std::string& source) {
  Principals p;
  int line_no = 0;
  std::istringstream lines{std::string(text)};
  std::string line;
  while (std::getline(lines, line)) {
    ++line_no;
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    std::vector<std::string> words;
    for (std::string w; fields >> w;) words.push_back(w);
    if (words.empty()) continue;
    if (words.size() > 2) {
      return absl::InvalidArgumentError(absl::StrCat("--auth-token-file ", source, ":", line_no,
                                                     ": expected 'NAME TOKEN' or 'TOKEN'"));
    }
    Entry e{words.size() == 2 ? std::string(words[0]) : "default", std::string(words.back())};
    // The name travels in proto string fields (SubmitRequest.tenant and
    // cache_scope), which must be UTF-8.
    if (!IsValidUtf8(e.name)) {
      return absl::InvalidArgumentError(absl::StrCat("--auth-token-file ", source, ":", line_no,
                                                     ": the principal's name is not valid UTF-8"));
    }
    for (const Entry& other : p.entries_) {
      if (other.name == e.name || other.token == e.token) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--auth-token-file ", source, ":", line_no, ": ",
            other.name == e.name ? "principal '" + e.name + "' appears twice" : "a token appears twice"));
      }
    }
    p.entries_.push_back(std::move(e));
  }
  if (p.entries_.empty()) {
    return absl::InvalidArgumentError("--auth-token-file " + source + " holds no token");
  }
  return p;
}

bool Principals::Contains(std::string_view name) const {
  for (const Entry& e : entries_) {
    if (e.name == name) return true;
  }
  return false;
}

std::optional<std::string> Principals::Authenticate(std::string_view authorization) const {
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.substr(0, kBearer.size()) != kBearer) return std::nullopt;
  const std::string_view token = authorization.substr(kBearer.size());
  const Entry* match = nullptr;
  for (const Entry& e : entries_) {
    if (ConstantTimeEquals(token, e.token) && match == nullptr) match = &e;
  }
  if (match == nullptr) return std::nullopt;
  return match->name;
}

}  // namespace specline
