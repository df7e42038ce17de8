// The PPSD head reader (method "ppsd-norm" or "ppsd-layer"): an early exit
// after `exit_layer` base layers, with the final norm and LM head of its own
// (and, for ppsd-layer, one decoder layer before them).
#include <stdexcept>
#include <string>

#include "model/formats/head_format.h"

namespace specline::head_format {

HeadLayers ReadPpsd(const json& j, const ReadContext& ctx, HeadConfig* s) {
  s->exit_layer = Field<int>(j, "exit_layer", ctx.jpath, "");
  // The head's layer runs at the exit layer's index, after the base's first E.
  return HeadLayers{s->exit_layer, s->method == DraftMethod::kPpsdLayer ? 1 : 0};
}

void PpsdTensors(const HeadConfig& s, const ModelConfig& c, TensorList* out) {
  if (s.exit_layer < 1 || s.exit_layer >= c.n_layers) {
    throw std::invalid_argument("exit_layer " + std::to_string(s.exit_layer) + " is not in [1, " +
                                std::to_string(c.n_layers) + ")");
  }
  if (s.method == DraftMethod::kPpsdLayer) AddLayerTensors(c, "layers.0.", out);
  out->push_back({"norm.weight", {c.dim}});
  out->push_back({"lm_head.weight", {c.vocab_size, c.dim}});
}

void WritePpsd(const HeadConfig& s, const ModelConfig& base, json* j) {
  (*j)["exit_layer"] = s.exit_layer;
}

}  // namespace specline::head_format
