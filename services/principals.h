// Who may call the public API: the bearer tokens of --auth-token-file, each
// naming a principal. Requests belong to the principal that made them, so
// one client can never abort another's (docs/serving.md "Authentication").
//
// File format, one token per line ('#' starts a comment):
//   NAME TOKEN    a named principal
//   TOKEN         the principal "default" (the single-token files of before)
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace specline {

class Principals {
 public:
  // INVALID_ARGUMENT naming the file and line for anything malformed, a
  // repeated name or token, or a file without any token.
  static absl::StatusOr<Principals> Load(const std::string& path);
  static absl::StatusOr<Principals> Parse(std::string_view text, const std::string& source);

  // The principal whose token `authorization` ("Bearer <token>") carries.
  // Compares with every token in constant time per token, so timing tells
  // neither the token nor which principal matched.
  std::optional<std::string> Authenticate(std::string_view authorization) const;

  size_t size() const { return entries_.size(); }
  bool Contains(std::string_view name) const;

 private:
  struct Entry {
    std::string name;
    std::string token;
  };
  std::vector<Entry> entries_;
};

}  // namespace specline
