// The policies' option declarations (scheduler/policies/policy_flag.h): the
// scheduler's command line parses a policy's flags into that policy's own
// options, refuses bad values with the flag's message, defaults and refuses
// policies from the declarations; and what generation.proto declares of
// each policy (short name, lossless) is what the code reads.
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "proto/policy_names.h"
#include "scheduler/flags.h"
#include "scheduler/policies/ppsd.h"
#include "scheduler/policies/ptp.h"
#include "scheduler/policies/recycle.h"
#include "scheduler/policies/registry.h"
#include "scheduler/policies/spd.h"

namespace specline::scheduler {
namespace {

absl::StatusOr<SchedulerFlags> Parse(std::vector<std::string> extra) {
  std::vector<std::string> args = {"specline-scheduler", "--model", "m.gguf", "--stage-grpc",
                                   "127.0.0.1:1"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return ParseSchedulerFlags(static_cast<int>(argv.size()), argv.data());
}

std::string Error(std::vector<std::string> extra) {
  absl::StatusOr<SchedulerFlags> f = Parse(std::move(extra));
  EXPECT_FALSE(f.ok());
  return f.ok() ? "" : std::string(f.status().message());
}

TEST(PolicyFlags, ParsedIntoTheirOwnersOptions) {
  absl::StatusOr<SchedulerFlags> f =
      Parse({"--recycle-drafts", "5", "--recycle-candidates", "3", "--lookup-ngram", "3:5",
             "--recycle-recent-tokens", "1024", "--recycle-memory-mib", "64", "--spd-drafter", "recycle", "--spd-head", "h",
             "--ppsd-head", "p", "--ptp-head", "t", "--ptp-n-aux", "2", "--spec-max-drafts", "4"});
  ASSERT_TRUE(f.ok()) << f.status();
  const SpecOptions& o = f->engine.spec;
  EXPECT_EQ(o.Of<RecycleOptions>().drafts, 5);
  const TrainingFreeDrafterOptions& t = o.Of<TrainingFreeDrafterOptions>();
  EXPECT_EQ(t.k, 3);
  EXPECT_EQ(t.min_ngram, 3);
  EXPECT_EQ(t.max_ngram, 5);
  EXPECT_EQ(t.recent_tokens, 1024);
  EXPECT_EQ(t.memory_mib, 64);
  EXPECT_EQ(o.Of<SpdOptions>().drafter, "recycle");
  EXPECT_EQ(o.Of<SpdOptions>().head, "h");
  EXPECT_EQ(o.Of<PpsdOptions>().head, "p");
  EXPECT_EQ(o.Of<PtpOptions>().head, "t");
  EXPECT_EQ(o.Of<PtpOptions>().n_aux, 2);
  EXPECT_EQ(o.max_drafts, 4);
}

TEST(PolicyFlags, DefaultsWhenNotGiven) {
  absl::StatusOr<SchedulerFlags> f = Parse({});
  ASSERT_TRUE(f.ok()) << f.status();
  const SpecOptions& o = f->engine.spec;
  EXPECT_EQ(o.Of<RecycleOptions>().drafts, 8);
  EXPECT_EQ(o.Of<TrainingFreeDrafterOptions>().k, 8);
  EXPECT_EQ(o.Of<TrainingFreeDrafterOptions>().recent_tokens, int64_t{1} << 18);
  EXPECT_EQ(o.Of<TrainingFreeDrafterOptions>().memory_mib, 512);
  EXPECT_EQ(o.Of<SpdOptions>().drafter, "module");
  EXPECT_TRUE(o.Of<PpsdOptions>().head.empty());
}

TEST(PolicyFlags, BadValuesNameTheFlag) {
  EXPECT_EQ(Error({"--recycle-candidates", "0"}), "--recycle-candidates must be >= 1");
  EXPECT_EQ(Error({"--recycle-drafts", "-1"}), "--recycle-drafts must be >= 0");
  EXPECT_EQ(Error({"--recycle-recent-tokens", "-5"}), "--recycle-recent-tokens must be >= 0");
  EXPECT_EQ(Error({"--recycle-memory-mib", "-1"}), "--recycle-memory-mib must be >= 0");
  EXPECT_EQ(Error({"--lookup-ngram", "4:2"}), "--lookup-ngram: MIN:MAX with 1 <= MIN <= MAX");
  EXPECT_EQ(Error({"--spd-drafter", "magic"}), "--spd-drafter: \"magic\" is not module or recycle");
  EXPECT_EQ(Error({"--spec-policy", "sometimes"}),
            "--spec-policy: \"sometimes\" is not auto, always or never");
  EXPECT_EQ(Error({"--default-policy", "fast"}),
            "--default-policy: \"fast\" is not ar, ppsd, spd, pipo, ptp or recycle");
  EXPECT_EQ(Error({"--pipo-tau", "high"}), "--pipo-tau: \"high\" is not a number");
  EXPECT_EQ(Error({"--no-such-policy-flag", "1"}), "unknown flag --no-such-policy-flag");
}

TEST(PolicyFlags, DefaultPolicyIsRecycleWhenServedElsePlainDecoding) {
  EXPECT_EQ(Parse({})->engine.spec.default_mode, v1::DECODING_POLICY_RECYCLE);
  EXPECT_EQ(Parse({"--recycle-drafts", "0"})->engine.spec.default_mode,
            v1::DECODING_POLICY_AUTOREGRESSIVE);
  EXPECT_EQ(Parse({"--default-policy", "ppsd"})->engine.spec.default_mode,
            v1::DECODING_POLICY_PPSD);
  EXPECT_EQ(Parse({"--default-policy", "ar"})->engine.spec.default_mode,
            v1::DECODING_POLICY_AUTOREGRESSIVE);
}

TEST(PolicyFlags, EveryDeclaredFlagIsFoundUniqueAndInTheUsage) {
  const std::string usage = SchedulerUsage();
  std::set<std::string> names;
  for (const PolicyFlag& f : AllPolicyFlags()) {
    EXPECT_TRUE(names.insert(f.name).second) << "--" << f.name << " is declared twice";
    ASSERT_NE(FindPolicyFlag(f.name), nullptr) << f.name;
    EXPECT_NE(usage.find(std::string("--") + f.name + " " + f.value), std::string::npos)
        << f.name << " is missing from the usage:\n" << usage;
  }
  EXPECT_EQ(FindPolicyFlag("model"), nullptr);  // a core flag, not a policy's
}

TEST(PolicyFlags, UsageWrapsContinuationsAndShowsTheDefault) {
  const PolicyFlag flags[] = {
      {"x", "N", "first line\nsecond line", "3", nullptr},
  };
  EXPECT_EQ(PolicyFlagUsage(flags, 10),
            "  --x N   first line\n"
            "          second line (default 3)\n");
  EXPECT_EQ(PolicyFlagUsage(flags, 4),
            "  --x N\n"
            "    first line\n"
            "    second line (default 3)\n");
}

TEST(PolicyDeclarations, NotServedNamesTheFlagThatEnablesThePolicy) {
  EXPECT_EQ(NotServed(v1::DECODING_POLICY_PPSD).message(),
            "policy ppsd is not available on this deployment (the scheduler has no --ppsd-head)");
  EXPECT_NE(NotServed(v1::DECODING_POLICY_RECYCLE).message().find("--recycle-drafts 0"),
            std::string::npos);
  for (const PolicyDeclaration* d : PolicyDeclarations()) {
    EXPECT_NE(std::string(d->not_served).find("--"), std::string::npos) << d->not_served;
    EXPECT_NE(std::string(PolicyShortName(d->mode)), "") << d->mode;
  }
}

TEST(PolicyNames, ReadFromTheProtoDeclaration) {
  EXPECT_EQ(PolicyNames(), "ar, ppsd, spd, pipo, ptp or recycle");
  for (v1::DecodingPolicy p :
       {v1::DECODING_POLICY_AUTOREGRESSIVE, v1::DECODING_POLICY_PPSD, v1::DECODING_POLICY_SPD,
        v1::DECODING_POLICY_PIPO, v1::DECODING_POLICY_PTP, v1::DECODING_POLICY_RECYCLE}) {
    absl::StatusOr<v1::DecodingPolicy> back = PolicyFromName(PolicyShortName(p));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, p);
  }
  EXPECT_STREQ(PolicyShortName(v1::DECODING_POLICY_AUTOREGRESSIVE), "ar");
  EXPECT_STREQ(PolicyShortName(v1::DECODING_POLICY_UNSPECIFIED), "");
  EXPECT_EQ(*PolicyFromName(""), v1::DECODING_POLICY_UNSPECIFIED);
  EXPECT_EQ(PolicyFromName("fast").status().message(),
            "--policy: \"fast\" is not ar, ppsd, spd, pipo, ptp or recycle");
}

TEST(PolicyNames, OnlyPipoIsLossy) {
  EXPECT_FALSE(PolicyIsLossless(v1::DECODING_POLICY_PIPO));
  EXPECT_FALSE(PolicyIsLossless(v1::DECODING_POLICY_UNSPECIFIED));
  for (v1::DecodingPolicy p : {v1::DECODING_POLICY_AUTOREGRESSIVE, v1::DECODING_POLICY_PPSD,
                               v1::DECODING_POLICY_SPD, v1::DECODING_POLICY_PTP,
                               v1::DECODING_POLICY_RECYCLE}) {
    EXPECT_TRUE(PolicyIsLossless(p)) << PolicyShortName(p);
  }
}

}  // namespace
}  // namespace specline::scheduler
