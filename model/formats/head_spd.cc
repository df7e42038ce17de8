// The SPD head reader (method "spd"): the speculation module's feature
// aggregation (FC matrices over the tapped hidden states), its decoder
// layers and LM head, and the tap arithmetic of the two feature layouts.
#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>

#include "model/formats/head_format.h"

namespace specline {
namespace {

// Number of FC feature-aggregation matrices and their input widths (in
// multiples of dim).
std::vector<int> SpdFcWidths(const HeadConfig& s) {
  std::vector<int> w;
  if (s.spd_layout == SpdFeatureLayout::kV10) {
    // fc.0: g^0 = FC(H^0); fc.k (k = 1..n): concat(H^0, H^{lmax/2}, H^{lmax}).
    w.push_back(1);
    for (int k = 1; k <= s.spd_stages; ++k) w.push_back(3);
  } else {
    for (size_t i = 0; i < s.spd_taps.size(); ++i) w.push_back(static_cast<int>(i) + 1);
  }
  return w;
}

}  // namespace

const char* SpdFeatureLayoutName(SpdFeatureLayout l) {
  return l == SpdFeatureLayout::kV10 ? "v10" : "v11";
}

std::vector<int> SpdDefaultTaps(int n_layers, int n_stages) {
  std::set<int> s;
  const int per = n_stages > 0 ? n_layers / n_stages : 0;
  for (int b : {0, per, 3 * per, 6 * per, n_layers - 1}) s.insert(std::clamp(b, 0, n_layers - 1));
  return {s.begin(), s.end()};
}

std::vector<int> SpdV10Taps(int n_layers, int n_stages) {
  std::set<int> s = {0};
  for (int k = 1; k <= n_stages; ++k) {
    const int l_max = k * n_layers / n_stages;
    s.insert(l_max / 2);
    s.insert(l_max);
  }
  return {s.begin(), s.end()};
}

namespace head_format {

HeadLayers ReadSpd(const json& j, const ReadContext& ctx, HeadConfig* s) {
  const std::string& jpath = ctx.jpath;
  if (!j.contains("spd") || !j["spd"].is_object()) Fail(jpath, "missing object 'spd'");
  const json& sp = j["spd"];
  s->spd_stages = Field<int>(sp, "n_stages", jpath, "spd.");
  s->spd_layers = Field<int>(sp, "n_layers", jpath, "spd.");
  const std::string layout = Field<std::string>(sp, "feature_layout", jpath, "spd.");
  if (layout == "v10") s->spd_layout = SpdFeatureLayout::kV10;
  else if (layout == "v11") s->spd_layout = SpdFeatureLayout::kV11;
  else Fail(jpath, "field 'spd.feature_layout' is \"" + layout + "\", expected v10 or v11");
  if (!sp.contains("taps") || !sp["taps"].is_array()) Fail(jpath, "missing array 'spd.taps'");
  for (const json& t : sp["taps"]) {
    if (!t.is_number_integer()) Fail(jpath, "field 'spd.taps' holds a non-integer");
    s->spd_taps.push_back(t.get<int>());
  }
  return HeadLayers{0, s->spd_layers};
}

void SpdTensors(const HeadConfig& s, const ModelConfig& c, TensorList* out) {
  auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  if (s.spd_stages < 2 || s.spd_stages > c.n_layers) {
    bad("spd.n_stages " + std::to_string(s.spd_stages) + " is not in [2, " +
        std::to_string(c.n_layers) + "]");
  }
  if (s.spd_layers < 1) bad("spd.n_layers must be at least 1");
  if (s.spd_taps.empty()) bad("spd.taps is empty");
  for (size_t i = 0; i < s.spd_taps.size(); ++i) {
    if (s.spd_taps[i] < 0 || s.spd_taps[i] > c.n_layers ||
        (i > 0 && s.spd_taps[i] <= s.spd_taps[i - 1])) {
      bad("spd.taps must be strictly increasing indices in [0, " + std::to_string(c.n_layers) +
          "]");
    }
  }
  if (s.spd_taps[0] != 0) bad("spd.taps must start with 0 (the embedding)");
  const int64_t dim = c.dim;
  const std::vector<int> widths = SpdFcWidths(s);
  for (size_t i = 0; i < widths.size(); ++i) {
    out->push_back({"fc." + std::to_string(i) + ".weight", {dim, widths[i] * dim}});
  }
  for (int j = 0; j < s.spd_layers; ++j) {
    AddLayerTensors(c, "layers." + std::to_string(j) + ".", out);
  }
  out->push_back({"lm_head.weight", {c.vocab_size, dim}});
}

void WriteSpd(const HeadConfig& s, const ModelConfig& base, json* j) {
  (*j)["spd"] = {{"n_stages", s.spd_stages},
                 {"taps", s.spd_taps},
                 {"n_layers", s.spd_layers},
                 {"feature_layout", SpdFeatureLayoutName(s.spd_layout)}};
}

}  // namespace head_format
}  // namespace specline
