// The gateway's prefix-cache scopes without a server (services/cache_scopes.h):
// the unambiguous encoding, which requests share a namespace (one principal,
// a --cache-share-group, everyone without authentication, split by
// cache_salt), the start-up errors of bad groups, and cache_salt's
// validation in the shared request builder.
#include <gtest/gtest.h>

#include "services/cache_scopes.h"
#include "services/request_builder.h"

namespace specline {
namespace {

Principals Team() {
  auto p = Principals::Parse("alice tok-a\nbob tok-b\ncarol tok-c\ndave tok-d\n", "tokens");
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

CacheScopes MakeOk(const Principals* principals, const std::vector<std::string>& groups) {
  auto s = CacheScopes::Make(principals, groups);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : CacheScopes();
}

std::string MakeError(const Principals* principals, const std::vector<std::string>& groups) {
  auto s = CacheScopes::Make(principals, groups);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(s.status().message());
}

TEST(CacheScopeEncoding, PartsAreLengthPrefixed) {
  EXPECT_EQ(EncodeCacheScope({"ab", "", "c"}), "2:ab0:1:c");
  // Moving bytes between parts, or a separator into a part, changes it.
  EXPECT_NE(EncodeCacheScope({"a", "bc"}), EncodeCacheScope({"ab", "c"}));
  EXPECT_NE(EncodeCacheScope({"a", "1:b"}), EncodeCacheScope({"a1:", "b"}));
  EXPECT_NE(EncodeCacheScope({"a:", "b"}), EncodeCacheScope({"a", ":b"}));
  EXPECT_NE(EncodeCacheScope({"", ""}), EncodeCacheScope({""}));
}

TEST(CacheScopes, EachPrincipalHasItsOwnNamespace) {
  const Principals team = Team();
  const CacheScopes scopes = MakeOk(&team, {});
  EXPECT_EQ(scopes.Scope("alice", ""), scopes.Scope("alice", ""));
  EXPECT_NE(scopes.Scope("alice", ""), scopes.Scope("bob", ""));
  EXPECT_NE(scopes.Scope("alice", ""), "");  // never the unauthenticated namespace
  // A salt splits a namespace; the same salt in two namespaces does not join them.
  EXPECT_NE(scopes.Scope("alice", "s"), scopes.Scope("alice", ""));
  EXPECT_NE(scopes.Scope("alice", "s"), scopes.Scope("alice", "t"));
  EXPECT_EQ(scopes.Scope("alice", "s"), scopes.Scope("alice", "s"));
  EXPECT_NE(scopes.Scope("alice", "s"), scopes.Scope("bob", "s"));
  // A name and a salt cannot trade bytes.
  EXPECT_NE(scopes.Scope("alice", "x"), scopes.Scope("alicex", ""));
}

TEST(CacheScopes, AGroupSharesOneNamespace) {
  const Principals team = Team();
  const CacheScopes scopes = MakeOk(&team, {"devs=alice,bob", "ops=carol"});
  EXPECT_EQ(scopes.groups(), 2u);
  EXPECT_EQ(scopes.Scope("alice", ""), scopes.Scope("bob", ""));
  EXPECT_EQ(scopes.Scope("alice", "s"), scopes.Scope("bob", "s"));
  EXPECT_NE(scopes.Scope("alice", "s"), scopes.Scope("bob", "t"));
  EXPECT_NE(scopes.Scope("alice", ""), scopes.Scope("carol", ""));
  EXPECT_NE(scopes.Scope("alice", ""), scopes.Scope("dave", ""));
  // A group named like a principal is still not that principal's namespace.
  const CacheScopes named = MakeOk(&team, {"dave=alice,bob"});
  EXPECT_NE(named.Scope("alice", ""), named.Scope("dave", ""));
}

TEST(CacheScopes, WithoutAuthenticationEveryoneSharesOneNamespace) {
  const CacheScopes scopes = MakeOk(nullptr, {});
  EXPECT_EQ(scopes.Scope("", ""), "");  // the shared namespace
  EXPECT_EQ(scopes.Scope("", "s"), scopes.Scope("", "s"));
  EXPECT_NE(scopes.Scope("", "s"), "");
  EXPECT_NE(scopes.Scope("", "s"), scopes.Scope("", "t"));
  EXPECT_EQ(CacheScopes().Scope("", ""), "");
}

TEST(CacheScopes, BadGroupsAreStartUpErrorsNamingTheProblem) {
  const Principals team = Team();
  EXPECT_NE(MakeError(nullptr, {"devs=alice"}).find("needs --auth-token-file"), std::string::npos);
  EXPECT_NE(MakeError(&team, {"devs"}).find("expected NAME=PRINCIPAL"), std::string::npos);
  EXPECT_NE(MakeError(&team, {"=alice,bob"}).find("NAME is empty"), std::string::npos);
  EXPECT_NE(MakeError(&team, {"devs="}).find("an empty principal name"), std::string::npos);
  EXPECT_NE(MakeError(&team, {"devs=alice,,bob"}).find("an empty principal name"), std::string::npos);
  EXPECT_NE(MakeError(&team, {"devs=alice,"}).find("an empty principal name"), std::string::npos);
  const std::string unknown = MakeError(&team, {"devs=alice,zed"});
  EXPECT_NE(unknown.find("devs"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("unknown principal 'zed'"), std::string::npos) << unknown;
  const std::string twice = MakeError(&team, {"devs=alice,bob", "ops=carol,alice"});
  EXPECT_NE(twice.find("'alice' is already in group 'devs'"), std::string::npos) << twice;
  EXPECT_NE(MakeError(&team, {"devs=alice,alice"}).find("named twice"), std::string::npos);
  EXPECT_NE(MakeError(&team, {"devs=alice", "devs=bob"}).find("given twice"), std::string::npos);
}

// cache_salt is validated with the request's other fields: bounded, since
// the scheduler hashes it into every block key.
TEST(CacheScopes, CacheSaltIsBounded) {
  ServedModel model;
  model.vocab_size = 32;
  model.context_length = 64;
  v1::GenerateRequest r;
  r.mutable_token_ids()->add_ids(3);
  r.set_cache_salt(std::string(kMaxCacheSaltBytes, 's'));
  auto ok = PrepareRequest(r, model);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->cache_salt, r.cache_salt());
  r.set_cache_salt(std::string(kMaxCacheSaltBytes + 1, 's'));
  auto bad = PrepareRequest(r, model);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().rfind("cache_salt: ", 0), 0u) << bad.status();
}

}  // namespace
}  // namespace specline
