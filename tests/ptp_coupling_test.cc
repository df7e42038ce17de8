// PTP's coupled-sampling arithmetic against the Python reference's golden
// (training/ptp_golden.py -> training/tests/data/ptp_golden.json): the
// counter-based uniforms, the teacher's token from real stories260K logits
// (greedy and T = 1), and the accept rule on every traced call.
#include <gtest/gtest.h>

#include <fstream>

#include "model/formats/head_file.h"
#include "model/formats/model_source.h"
#include "model/runtime/ptp_coupling.h"
#include "model/drafters/ptp_u_embed.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"

namespace specline {
namespace {

const nlohmann::json& Golden() { return testing::GoldenJson("training/tests/data/ptp_golden.json"); }

TEST(PtpCoupling, UniformsMatchTheReference) {
  const nlohmann::json& g = Golden();
  const uint64_t seed = g["seed"].get<uint64_t>();
  const auto& first = g["u_first_16"];
  for (size_t t = 0; t < first.size(); ++t) {
    EXPECT_EQ(PtpUniform(seed, static_cast<int64_t>(t)), first[t].get<double>()) << "t = " << t;
  }
  EXPECT_EQ(PtpUniform(0, 0), g["u_check"]["t0"].get<double>());
  EXPECT_EQ(PtpUniform(1234567, 0), g["u_check"]["seed_1234567_t0"].get<double>());
  // Every u a traced call used is the one of its absolute token index.
  for (const char* mode : {"greedy", "t1"}) {
    for (const auto& call : g["traces"][mode]["calls"]) {
      const int64_t first_index = call["generated_index_of_first_verify_target"].get<int64_t>();
      const auto& vu = call["verify_u"];
      for (size_t j = 0; j < vu.size(); ++j) {
        EXPECT_EQ(PtpUniform(seed, first_index + static_cast<int64_t>(j)), vu[j].get<double>());
      }
      // Proposals cover the indices after the verified ones.
      const auto& au = call["aux_u"];
      const int64_t aux_first = first_index + static_cast<int64_t>(vu.size()) - 1;
      for (size_t j = 0; j < au.size(); ++j) {
        EXPECT_EQ(PtpUniform(seed, aux_first + static_cast<int64_t>(j)), au[j].get<double>());
      }
    }
  }
}

TEST(PtpCoupling, TeacherTokenFromLogitsMatchesTheReference) {
  const nlohmann::json& g = Golden();
  int checked = 0;
  for (const char* mode : {"greedy", "t1"}) {
    const auto& trace = g["traces"][mode];
    for (const auto& call : trace["calls"]) {
      if (!call.contains("teacher_logits") || call["teacher_logits"].empty()) continue;
      for (size_t j = 0; j < call["teacher_logits"].size(); ++j) {
        const std::vector<float> logits = call["teacher_logits"][j].get<std::vector<float>>();
        const int32_t token =
            CoupledToken(logits, trace["temperature"].get<float>(), trace["top_k"].get<int>(),
                         trace["top_p"].get<float>(), call["verify_u"][j].get<double>());
        EXPECT_EQ(token, call["teacher_tokens"][j].get<int32_t>()) << mode << " row " << j;
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 2);
}

TEST(PtpCoupling, AcceptRuleMatchesEveryTracedCall) {
  for (const char* mode : {"greedy", "t1"}) {
    for (const auto& call : Golden()["traces"][mode]["calls"]) {
      const auto verify = call["verify_tokens"].get<std::vector<int32_t>>();
      // verify = [last committed token] + the previous call's proposals.
      const std::vector<int32_t> pending(verify.begin() + 1, verify.end());
      const auto teacher = call["teacher_tokens"].get<std::vector<int32_t>>();
      const PtpVerdict v = PtpAccept(teacher, pending);
      EXPECT_EQ(v.accepted, call["accepted"].get<int>()) << mode << " call " << call["call"];
      EXPECT_EQ(v.tokens, call["committed_tokens"].get<std::vector<int32_t>>()) << mode << " call " << call["call"];
    }
  }
}

// The auxiliary rows' inputs: u_embed(u) from the trained adapter's
// weights equals the reference's (rounded to 6 decimals in the golden).
TEST(PtpCoupling, AuxiliaryInputsMatchTheReference) {
  const std::string model = testing::SharedModelPath("stories260K/stories260K.bin");
  if (model.empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  const ModelConfig base = OpenModel(model)->config();
  auto head = LoadDraftHead(testing::SourcePath(Golden()["head"].get<std::string>()), base);
  const TensorInfo& w = *head->FileTensor("u_embed.weight");
  ASSERT_EQ(w.dtype, DType::kF32);
  const std::span<const float> weight(reinterpret_cast<const float*>(w.data), w.numel());
  const auto& call = Golden()["traces"]["t1"]["calls"][0];
  std::vector<float> row(base.dim);
  for (size_t j = 0; j < call["aux_u"].size(); ++j) {
    PtpUEmbed(call["aux_u"][j].get<double>(), weight, row);
    const auto want = call["aux_input_embeds"][j].get<std::vector<float>>();
    ASSERT_EQ(want.size(), row.size());
    for (size_t i = 0; i < row.size(); ++i) EXPECT_NEAR(row[i], want[i], 1e-5) << "row " << j << " [" << i << "]";
  }
  // The knots give the learned vectors themselves.
  PtpUEmbed(0.5, weight, row);
  for (int i = 0; i < base.dim; ++i) EXPECT_EQ(row[i], weight[base.dim + i]);
}

TEST(PtpCoupling, DistributionsFollowTheWarpRules) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 0.0f, 2.0f};
  // Greedy: one-hot at the first maximum.
  EXPECT_EQ(CoupledDistribution(logits, 0.0f, 0, 1.0f), (std::vector<double>{0, 1, 0, 0, 0}));
  // top-k 2 keeps the two tied maxima, renormalised, in vocabulary order.
  const std::vector<double> k2 = CoupledDistribution(logits, 1.0f, 2, 1.0f);
  EXPECT_DOUBLE_EQ(k2[1], 0.5);
  EXPECT_DOUBLE_EQ(k2[2], 0.5);
  EXPECT_EQ(k2[0] + k2[3] + k2[4], 0.0);
  // top-p just above the largest probability keeps the next one too.
  const std::vector<double> full = CoupledDistribution(logits, 1.0f, 0, 1.0f);
  const std::vector<double> p = CoupledDistribution(logits, 1.0f, 0, static_cast<float>(full[1]) + 1e-3f);
  EXPECT_GT(p[1], 0.0);
  EXPECT_GT(p[2], 0.0);
  EXPECT_EQ(p[4], 0.0);
  // The pick is the vocabulary-order inverse CDF.
  EXPECT_EQ(CoupledPick(k2, 0.0), 1);
  EXPECT_EQ(CoupledPick(k2, 0.49), 1);
  EXPECT_EQ(CoupledPick(k2, 0.5), 2);
  EXPECT_EQ(CoupledPick(k2, 0.999999), 2);
  EXPECT_THROW(PtpAccept(std::vector<int32_t>{1}, std::vector<int32_t>{1}), std::invalid_argument);
  const PtpVerdict all = PtpAccept(std::vector<int32_t>{4, 5, 6}, std::vector<int32_t>{4, 5});
  EXPECT_EQ(all.accepted, 2);
  EXPECT_EQ(all.tokens, (std::vector<int32_t>{4, 5, 6}));
}

}  // namespace
}  // namespace specline
