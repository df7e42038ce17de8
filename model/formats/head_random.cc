// Randomly initialised heads (WriteRandomDraftHead). Kept in model/formats
// beside the writer, as random_model.cc is for base models: it only makes
// tensor values of the shapes ExpectedDraftHeadTensors lists and hands them
// to WriteDraftHead, and the tools that use it (`specline make-random-head`,
// tests, benches) need nothing of a draft model's run time.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/ops.h"
#include "model/formats/head_file.h"

namespace specline {

void WriteRandomDraftHead(const std::string& dir, const HeadConfig& spec,
                          const ModelConfig& base, uint64_t seed, const ModelSource* init_from,
                          DType dtype) {
  const auto expected = ExpectedDraftHeadTensors(spec, base);
  std::vector<std::pair<std::string, std::vector<float>>> tensors;
  for (const auto& [name, shape] : expected) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    std::vector<float> v(numel);
    const TensorInfo* from = nullptr;
    if (init_from != nullptr) {
      if (name == "norm.weight") from = &init_from->Require("model.norm.weight", shape);
      if (name == "lm_head.weight") {
        from = init_from->Find("lm_head.weight");
        if (from == nullptr || init_from->config().tied_embeddings) {
          from = &init_from->Require("model.embed_tokens.weight");
        }
        from = &init_from->Require(from->name, shape);
      }
    }
    if (from != nullptr) {
      kernels::DequantizeRow(from->dtype, from->data, numel, v.data());
    } else {
      // splitmix64 stream seeded by (seed, name).
      uint64_t state = seed;
      for (unsigned char ch : name) state = (state ^ ch) * 0x100000001b3ull;
      auto next = [&state] {
        uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        return static_cast<float>(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
      };
      const bool is_norm = name.find("norm.weight") != std::string::npos;
      const bool is_bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
      const float sqrt3 = std::sqrt(3.0f);
      float center = 0.0f, half = 0.1f;
      if (is_norm) {
        center = 1.0f;
      } else if (!is_bias) {
        const float std = name == "lm_head.weight" ? 2.0f / std::sqrt(float(shape[1]))
                                                   : 1.0f / std::sqrt(float(shape[1]));
        half = std * sqrt3;
      }
      for (float& x : v) x = center + next() * half;
    }
    tensors.push_back({name, std::move(v)});
  }
  WriteDraftHead(dir, spec, base, tensors, dtype);
}

}  // namespace specline
