// The gateway's input handling without a server: raw request parsing
// (request_parser.h) against the committed bad-request corpus, the UTF-8
// rule, the bearer-token file of principals (principals.h), and the
// cluster-secret file every process reads (common/cluster_secret.h).
#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

#include "absl/strings/escaping.h"
#include "common/cluster_secret.h"
#include "services/principals.h"
#include "services/request_parser.h"
#include "specline/v1/generation.pb.h"
#include "tests/test_util.h"

namespace specline::testing {
namespace {

struct BadRequest {
  std::string name, bytes, expect;
};

std::vector<BadRequest> LoadCorpus() {
  std::ifstream in(SourcePath("tests/data/bad_requests/generate.txt"));
  std::vector<BadRequest> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    BadRequest b;
    std::string hex;
    fields >> b.name >> hex;
    std::getline(fields >> std::ws, b.expect);
    b.bytes = absl::HexStringToBytes(hex);
    out.push_back(b);
  }
  return out;
}

TEST(RequestParser, EveryCorpusCaseIsInvalidArgumentNamingTheProblem) {
  const std::vector<BadRequest> corpus = LoadCorpus();
  ASSERT_GE(corpus.size(), 10u) << "the corpus file was not found or is empty";
  for (const BadRequest& b : corpus) {
    v1::GenerateRequest req;
    absl::Status st = ParseRequestBytes(b.bytes, &req);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << b.name;
    EXPECT_NE(st.message().find(b.expect), std::string_view::npos)
        << b.name << ": got \"" << st.message() << "\", want it to contain \"" << b.expect << "\"";
  }
}

TEST(RequestParser, ValidRequestsRoundTrip) {
  v1::GenerateRequest req;
  req.set_request_id("r-1");
  auto* chat = req.mutable_chat();
  auto* m = chat->add_messages();
  m->set_role("user");
  m->set_content("h\xc3\xa9llo \xf0\x9f\x98\x80");  // é and an emoji: 2- and 4-byte sequences
  req.add_stop("\xe2\x82\xac");                      // €
  req.mutable_sampling()->set_seed(7);
  v1::GenerateRequest back;
  ASSERT_TRUE(ParseRequestBytes(req.SerializeAsString(), &back).ok());
  EXPECT_EQ(back.SerializeAsString(), req.SerializeAsString());
  // An empty body is a valid (empty) message: the request's own checks
  // reject it later with the field they miss.
  EXPECT_TRUE(ParseRequestBytes("", &back).ok());
}

TEST(RequestParser, RandomBytesNeverCrashAndErrorsAreNeverEmpty) {
  std::mt19937 rng(14);
  int refused = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bytes(rng() % 64, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    v1::GenerateRequest req;
    absl::Status st = ParseRequestBytes(bytes, &req);
    if (st.ok()) continue;
    ++refused;
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_FALSE(st.message().empty());
  }
  EXPECT_GT(refused, 1000) << "random bytes should mostly be refused";
}

TEST(Utf8, FollowsTheStandardsRules) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("\xc2\x80"));          // U+0080, the first 2-byte
  EXPECT_TRUE(IsValidUtf8("\xef\xbf\xbf"));      // U+FFFF
  EXPECT_TRUE(IsValidUtf8("\xf4\x8f\xbf\xbf"));  // U+10FFFF, the last
  EXPECT_FALSE(IsValidUtf8("\x80"));             // a lone continuation byte
  EXPECT_FALSE(IsValidUtf8("\xc1\xbf"));         // overlong U+007F
  EXPECT_FALSE(IsValidUtf8("\xe0\x9f\xbf"));     // overlong U+07FF
  EXPECT_FALSE(IsValidUtf8("\xed\xbf\xbf"));     // surrogate U+DFFF
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80")); // U+110000
  EXPECT_FALSE(IsValidUtf8("\xf8\x88\x80\x80\x80"));
  EXPECT_FALSE(IsValidUtf8("ab\xe2\x82"));       // cut short
}

TEST(Principals, NamedAndBareTokens) {
  auto p = Principals::Parse("# team tokens\nalice tok-a\nbob\ttok-b  # a comment\n\n", "f");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->size(), 2u);
  EXPECT_EQ(p->Authenticate("Bearer tok-a").value_or(""), "alice");
  EXPECT_EQ(p->Authenticate("Bearer tok-b").value_or(""), "bob");
  EXPECT_FALSE(p->Authenticate("Bearer tok-c").has_value());
  EXPECT_FALSE(p->Authenticate("tok-a").has_value()) << "the Bearer scheme is required";
  EXPECT_FALSE(p->Authenticate("Bearer tok-a ").has_value());
  EXPECT_FALSE(p->Authenticate("Bearer ").has_value());

  auto single = Principals::Parse("only-token\n", "f");
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->Authenticate("Bearer only-token").value_or(""), "default");
}

TEST(Principals, MalformedFilesAreRefusedNamingTheLine) {
  EXPECT_NE(Principals::Parse("a b c\n", "f").status().message().find("f:1"), std::string_view::npos);
  EXPECT_NE(Principals::Parse("alice x\nalice y\n", "f").status().message().find("appears twice"),
            std::string_view::npos);
  EXPECT_NE(Principals::Parse("alice x\nbob x\n", "f").status().message().find("f:2"),
            std::string_view::npos);
  EXPECT_EQ(Principals::Parse("# nothing\n", "f").status().code(), absl::StatusCode::kInvalidArgument);
  // Names travel in proto string fields (SubmitRequest.tenant, cache_scope).
  EXPECT_NE(Principals::Parse("al\xffice x\n", "f").status().message().find("not valid UTF-8"),
            std::string_view::npos);
}

TEST(Principals, ContainsNamesOnly) {
  auto p = Principals::Parse("alice tok-a\nbob tok-b\n", "f");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->Contains("alice"));
  EXPECT_TRUE(p->Contains("bob"));
  EXPECT_FALSE(p->Contains("tok-a"));
  EXPECT_FALSE(p->Contains("carol"));
}

TEST(ClusterSecret, FilesTooShortOrMissingAreRefusedNamingTheFile) {
  const std::string dir = TempDir();
  std::ofstream(dir + "/short") << "not-long-enough\n";
  absl::StatusOr<std::string> s = ReadClusterSecret(dir + "/short");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find(dir + "/short"), std::string_view::npos) << s.status();
  EXPECT_FALSE(ReadClusterSecret(dir + "/absent").ok());

  const std::string made = NewClusterSecret();
  EXPECT_EQ(made.size(), 64u);
  EXPECT_NE(made, NewClusterSecret()) << "secrets must be random";
  std::ofstream(dir + "/good") << made << "\n\n";
  EXPECT_EQ(ReadClusterSecret(dir + "/good").value_or(""), made) << "trailing whitespace trimmed";
}

TEST(ClusterSecret, ComparisonIsExact) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcd"));
  EXPECT_FALSE(ConstantTimeEquals("abcd", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("", "a"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

}  // namespace
}  // namespace specline::testing
