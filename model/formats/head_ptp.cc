// The PTP head reader (method "ptp"): an adapter over the base's own layers
// (u_embed and a gated LoRA on kPtpLoraTargets of every layer). The "ptp"
// object carries the parameters the runtime needs and the choices this
// runtime implements; anything else is refused, not guessed at.
#include <cmath>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>

#include "model/formats/head_format.h"

namespace specline::head_format {
namespace {

std::vector<std::string> LoraTargets() {
  return {std::begin(kPtpLoraTargets), std::end(kPtpLoraTargets)};
}

std::vector<int> EveryLayer(const ModelConfig& base) {
  std::vector<int> layers(base.n_layers);
  for (int i = 0; i < base.n_layers; ++i) layers[i] = i;
  return layers;
}

}  // namespace

HeadLayers ReadPtp(const json& j, const ReadContext& ctx, HeadConfig* s) {
  const std::string& jpath = ctx.jpath;
  if (!j.contains("ptp") || !j["ptp"].is_object()) Fail(jpath, "missing object 'ptp'");
  const json& p = j["ptp"];
  s->ptp_n_aux = Field<int>(p, "n_aux", jpath, "ptp.");
  s->ptp_lora_rank = Field<int>(p, "lora_rank", jpath, "ptp.");
  s->ptp_lora_alpha = Field<double>(p, "lora_alpha", jpath, "ptp.");
  const double scale = Field<double>(p, "lora_scale", jpath, "ptp.");
  if (s->ptp_lora_rank > 0 &&
      std::fabs(scale - s->ptp_lora_alpha / s->ptp_lora_rank) > 1e-9 * std::fabs(scale)) {
    Fail(jpath, "field 'ptp.lora_scale' is not lora_alpha / lora_rank");
  }
  auto expect_string = [&](const char* key, const char* want) {
    const std::string got = Field<std::string>(p, key, jpath, "ptp.");
    if (got != want) {
      Fail(jpath, std::string("field 'ptp.") + key + "' is \"" + got + "\", expected \"" + want +
                      "\"");
    }
  };
  expect_string("u_embed", "piecewise_linear_3");
  expect_string("variant", "one-hot");
  expect_string("u_generator", "splitmix64");
  const std::vector<std::string> targets = LoraTargets();
  if (!p.contains("lora_targets") || p["lora_targets"] != json(targets)) {
    Fail(jpath, "field 'ptp.lora_targets' must be " + json(targets).dump());
  }
  if (!p.contains("lora_layers") || p["lora_layers"] != json(EveryLayer(ctx.base))) {
    Fail(jpath, "field 'ptp.lora_layers' must list every layer 0.." +
                    std::to_string(ctx.base.n_layers - 1));
  }
  return HeadLayers{0, ctx.base.n_layers};  // LoRA tensors for every base layer
}

void PtpTensors(const HeadConfig& s, const ModelConfig& c, TensorList* out) {
  if (s.ptp_n_aux < 1) throw std::invalid_argument("ptp.n_aux must be at least 1");
  if (s.ptp_lora_rank < 1) throw std::invalid_argument("ptp.lora_rank must be at least 1");
  const int64_t dim = c.dim;
  const int64_t q = int64_t{c.n_heads} * c.head_dim, kv = int64_t{c.n_kv_heads} * c.head_dim;
  const std::map<std::string, std::pair<int64_t, int64_t>> in_out = {
      {"self_attn.q_proj", {dim, q}},         {"self_attn.k_proj", {dim, kv}},
      {"self_attn.v_proj", {dim, kv}},        {"self_attn.o_proj", {q, dim}},
      {"mlp.gate_proj", {dim, c.hidden_dim}}, {"mlp.up_proj", {dim, c.hidden_dim}},
      {"mlp.down_proj", {c.hidden_dim, dim}}};
  out->push_back({"u_embed.weight", {3, dim}});
  for (int j = 0; j < c.n_layers; ++j) {
    for (const char* target : kPtpLoraTargets) {
      const auto [d_in, d_out] = in_out.at(target);
      const std::string prefix = "layers." + std::to_string(j) + "." + target;
      out->push_back({prefix + ".lora_A", {s.ptp_lora_rank, d_in}});
      out->push_back({prefix + ".lora_B", {d_out, s.ptp_lora_rank}});
    }
  }
}

void WritePtp(const HeadConfig& s, const ModelConfig& base, json* j) {
  (*j)["ptp"] = {{"n_aux", s.ptp_n_aux}, {"lora_rank", s.ptp_lora_rank},
                 {"lora_alpha", s.ptp_lora_alpha},
                 {"lora_scale", s.ptp_lora_alpha / s.ptp_lora_rank},
                 {"lora_targets", LoraTargets()}, {"lora_layers", EveryLayer(base)},
                 {"u_embed", "piecewise_linear_3"}, {"u_embed_knots", {0.0, 0.5, 1.0}},
                 {"variant", "one-hot"}, {"u_generator", "splitmix64"},
                 {"layout", "verify rows then auxiliary rows"}};
}

}  // namespace specline::head_format
