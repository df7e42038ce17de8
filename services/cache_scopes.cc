#include "services/cache_scopes.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace specline {
namespace {

// (This absl's string_view is its own type, so std::string crosses into it.)
absl::Status GroupError(const std::string& group, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("--cache-share-group ", group, ": ", why));
}

// "a,b,,c" -> {"a", "b", "", "c"}: empty names are kept, to be refused.
std::vector<std::string> SplitMembers(const std::string& list) {
  std::vector<std::string> out(1);
  for (char c : list) {
    if (c == ',') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

}  // namespace

std::string EncodeCacheScope(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) {
    out += std::to_string(p.size());
    out += ':';
    out += p;
  }
  return out;
}

absl::StatusOr<CacheScopes> CacheScopes::Make(const Principals* principals,
                                              const std::vector<std::string>& groups) {
  CacheScopes scopes;
  scopes.authenticated_ = principals != nullptr;
  if (groups.empty()) return scopes;
  if (!principals) {
    return absl::InvalidArgumentError(
        "--cache-share-group needs --auth-token-file (without it every request is in one "
        "namespace already)");
  }
  std::set<std::string, std::less<>> names;
  for (const std::string& value : groups) {
    const size_t eq = value.find('=');
    if (eq == std::string::npos) {
      return GroupError(absl::StrCat("'", value, "'"), "expected NAME=PRINCIPAL[,PRINCIPAL...]");
    }
    const std::string name = value.substr(0, eq);
    if (name.empty()) return GroupError(absl::StrCat("'", value, "'"), "the group's NAME is empty");
    if (!names.insert(name).second) return GroupError(name, "the group is given twice");
    for (const std::string& member : SplitMembers(value.substr(eq + 1))) {
      if (member.empty()) return GroupError(name, "an empty principal name");
      if (!principals->Contains(member)) {
        return GroupError(name, absl::StrCat("unknown principal '", member,
                                             "' (not in --auth-token-file)"));
      }
      auto [it, added] = scopes.group_of_.emplace(member, name);
      if (!added) {
        return GroupError(name, it->second == name
                                    ? absl::StrCat("principal '", member, "' is named twice")
                                    : absl::StrCat("principal '", member, "' is already in group '",
                                                   it->second, "' (a principal is in one group at most)"));
      }
    }
  }
  scopes.group_count_ = names.size();
  return scopes;
}

std::string CacheScopes::Scope(const std::string& principal, std::string_view cache_salt) const {
  if (!authenticated_) {
    // One namespace: the shared one, split only by a salt.
    return cache_salt.empty() ? std::string() : EncodeCacheScope({"", "", cache_salt});
  }
  if (auto it = group_of_.find(principal); it != group_of_.end()) {
    return EncodeCacheScope({"group", it->second, cache_salt});
  }
  return EncodeCacheScope({"principal", principal, cache_salt});
}

}  // namespace specline
