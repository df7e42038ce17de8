// Which prefix-cache namespace a request's blocks live in (docs/security.md
// "The prefix cache between principals"). A cached block is reused only by
// requests of the same scope, because whether a prompt hits the cache shows
// in its usage (cached tokens) and its time to first token: shared blocks
// would tell one principal what another sent.
//
// The scope of a request is (namespace, cache_salt): the namespace is its
// principal's own, or the --cache-share-group the operator put the
// principal in; without --auth-token-file every request is in one
// namespace. The gateway sends the scope as SubmitRequest.cache_scope, and
// the scheduler folds it into the salt of every block key
// (scheduler/prefix_cache.h), so different scopes never match.
#pragma once

#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "services/principals.h"

namespace specline {

// Each part as its decimal length, ':', then its bytes: no two different
// lists of parts encode alike ("a"+"bc" != "ab"+"c"), whatever bytes the
// parts hold.
std::string EncodeCacheScope(std::initializer_list<std::string_view> parts);

class CacheScopes {
 public:
  // No authentication: one namespace for every request.
  CacheScopes() = default;

  // `principals` null means no --auth-token-file. `groups` are the
  // --cache-share-group values, "NAME=PRINCIPAL[,PRINCIPAL...]". Errors
  // (INVALID_ARGUMENT naming the group and the problem): groups without
  // authentication, a malformed value, an empty name, a principal the token
  // file does not have, a principal in two groups, a group given twice.
  static absl::StatusOr<CacheScopes> Make(const Principals* principals,
                                          const std::vector<std::string>& groups);

  // SubmitRequest.cache_scope of a request of `principal` ("" without
  // authentication) carrying `cache_salt` ("" = none). "" exactly when
  // there is neither authentication nor a salt: the shared namespace.
  std::string Scope(const std::string& principal, std::string_view cache_salt) const;

  size_t groups() const { return group_count_; }

 private:
  bool authenticated_ = false;
  std::map<std::string, std::string, std::less<>> group_of_;  // principal -> group
  size_t group_count_ = 0;
};

}  // namespace specline
