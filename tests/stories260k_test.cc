// The real stories260K model: greedy generation from BOS for 256 steps must
// print exactly what llama2.c's run.c prints, from the llama2.c checkpoint
// and from the GGUF alike, and for any split into stage slices.
#include <gtest/gtest.h>

#include "model/runtime/generator.h"
#include "model/tokenizer/model_tokenizer.h"
#include "tests/test_util.h"

namespace specline {
namespace {

// run.c's loop: start from BOS, 256 positions, stop early only at BOS.
std::string GreedyFromBos(const std::string& model_path, int slices) {
  auto model = OpenModel(model_path);
  auto tok = OpenTokenizerFor(*model, testing::SharedModelPath("stories260K/tok512.bin"));
  LocalPipeline p(*model, EvenSplit(model->config().n_layers, slices),
                  {.kv_capacity_tokens = 512}, 2);
  GenerationOptions opt;
  opt.max_tokens = 256;
  opt.stop_ids = {tok->bos_id()};
  auto r = Generate(p, 1, std::vector<int32_t>{tok->bos_id()}, opt);
  EXPECT_TRUE(r.ok()) << r.status();
  IncrementalDetokenizer detok(*tok, tok->bos_id());
  std::string text;
  for (int32_t t : r->tokens) text += detok.Push(t);
  return text + detok.Flush() + "\n";
}

class Stories260kTest : public ::testing::TestWithParam<std::string> {};

TEST_P(Stories260kTest, GreedyFromBosMatchesLlama2c) {
  const std::string model = testing::SharedModelPath("stories260K/" + GetParam());
  const std::string ref = testing::SharedModelPath("stories260K/reference-greedy-from-bos-256.txt");
  if (model.empty() || ref.empty()) GTEST_SKIP() << "../shared/models/stories260K is absent";
  EXPECT_EQ(GreedyFromBos(model, 1), testing::ReadFile(ref));
  EXPECT_EQ(GreedyFromBos(model, 5), testing::ReadFile(ref)) << "one layer per slice";
}

INSTANTIATE_TEST_SUITE_P(Formats, Stories260kTest,
                         ::testing::Values("stories260K.bin", "stories260K.gguf"));

}  // namespace
}  // namespace specline
