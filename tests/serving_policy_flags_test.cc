// `specline serve` takes the policies' flags from their declarations
// (scheduler/policies/registry.h): its usage lists every one, and it hands
// each to the scheduler process as given.
#include <algorithm>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "model/formats/random_model.h"
#include "scheduler/policies/registry.h"
#include "tests/serving_stack.h"

namespace specline::testing {
namespace {

// argv of a running process, one string per argument.
std::vector<std::string> CommandLine(pid_t pid) {
  const std::string raw = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
  std::vector<std::string> out;
  std::string arg;
  for (char c : raw) {
    if (c == '\0') {
      out.push_back(arg);
      arg.clear();
    } else {
      arg += c;
    }
  }
  return out;
}

TEST(ServePolicyFlags, UsageListsEveryDeclaredFlag) {
  const std::string log = TempDir() + "/serve-help.log";
  const pid_t pid = Spawn({BinaryPath("specline"), "serve", "--help"}, log);
  ASSERT_EQ(Wait(pid, std::chrono::seconds(30)), 0);
  const std::string usage = ReadFile(log);
  for (const scheduler::PolicyFlag& f : scheduler::AllPolicyFlags()) {
    EXPECT_NE(usage.find(std::string("--") + f.name + " " + f.value), std::string::npos)
        << "--" << f.name << " is missing from serve's usage:\n" << usage;
  }
}

TEST(ServePolicyFlags, ForwardsEveryDeclaredFlagToTheScheduler) {
  // A valid value for each declared flag that needs no head file; the heads
  // are checked by the suites that have them (scheduler_*, serving_spec).
  const std::map<std::string, std::string> values = {
      {"default-policy", "ar"},         {"spec-policy", "always"},
      {"spec-min-acceptance", "0.5"},   {"spec-probe-interval", "8"},
      {"spec-max-drafts", "1"},         {"draft-kv-capacity-tokens", "4096"},
      {"allow-oracle", "true"},         {"spd-drafter", "recycle"},
      {"ptp-n-aux", "2"},               {"pipo-tau", "0.5"},
      {"recycle-drafts", "4"},          {"recycle-candidates", "4"},
      {"lookup-ngram", "2:3"},          {"recycle-recent-tokens", "1024"},
      {"recycle-memory-mib", "64"},
  };
  std::vector<std::string> extra;
  for (const scheduler::PolicyFlag& f : scheduler::AllPolicyFlags()) {
    auto it = values.find(f.name);
    if (it != values.end()) extra.insert(extra.end(), {std::string("--") + f.name, it->second});
  }
  const std::string model =
      WriteServingModel(LlamaShape(64, 128, 4, 4, 2, 256, 256), "policy-flags-model", 7);
  std::unique_ptr<ServingStack> s = StartStack(model, 1, extra);
  const std::vector<std::string> argv = CommandLine(s->ports["scheduler"]["pid"].get<pid_t>());
  for (const auto& [name, value] : values) {
    const auto at = std::find(argv.begin(), argv.end(), "--" + name);
    ASSERT_NE(at, argv.end()) << "--" << name << " was not forwarded";
    ASSERT_NE(at + 1, argv.end());
    EXPECT_EQ(*(at + 1), value) << "--" << name;
  }
  // Every flag the test gave a value is declared (so none is a stale name).
  for (const auto& [name, value] : values) {
    EXPECT_NE(scheduler::FindPolicyFlag(name), nullptr) << name;
  }
}

}  // namespace
}  // namespace specline::testing
