// The PIPO head reader (method "pipo"): the compressor, the MTP layer and
// the confidence head, plus a fine-tuned backbone file beside them. The
// backbone must exist and have the base's shape (its sha256 is checked by
// the Python loader; this runtime has no hash yet).
#include <filesystem>
#include <stdexcept>
#include <string>

#include "model/formats/head_format.h"

namespace specline::head_format {

HeadLayers ReadPipo(const json& j, const ReadContext& ctx, HeadConfig* s) {
  const std::string& jpath = ctx.jpath;
  if (!j.contains("pipo") || !j["pipo"].is_object()) Fail(jpath, "missing object 'pipo'");
  const json& p = j["pipo"];
  s->pipo_pad_id = Field<int>(p, "pad_id", jpath, "pipo.");
  s->pipo_tau_default = Field<double>(p, "tau_default", jpath, "pipo.");
  if (!(s->pipo_tau_default >= 0.0)) Fail(jpath, "field 'pipo.tau_default' must be >= 0");
  if (Field<int>(p, "pair_size", jpath, "pipo.") != 2) Fail(jpath, "field 'pipo.pair_size' must be 2");
  if (!p.contains("backbone") || !p["backbone"].is_object()) Fail(jpath, "missing object 'pipo.backbone'");
  s->pipo_backbone_file = Field<std::string>(p["backbone"], "file", jpath, "pipo.backbone.");
  const std::string path = (std::filesystem::path(ctx.dir) / s->pipo_backbone_file).string();
  if (!std::filesystem::exists(path)) {
    Fail(jpath, "field 'pipo.backbone.file': " + path + " does not exist");
  }
  const ModelConfig bc = OpenModel(path)->config();  // throws ModelFormatError naming the file
  if (BaseFingerprint(bc) != BaseFingerprint(ctx.base)) {
    Fail(path, "the backbone's shape " + BaseFingerprint(bc).dump() + " differs from the base's");
  }
  // The MTP layer is read by PipoModel under its own names, not as a layer
  // of the canonical view.
  return HeadLayers{0, 0};
}

void PipoTensors(const HeadConfig& s, const ModelConfig& c, TensorList* out) {
  if (s.pipo_pad_id < 0 || s.pipo_pad_id >= c.vocab_size) {
    throw std::invalid_argument("pipo.pad_id " + std::to_string(s.pipo_pad_id) +
                                " is not a token id");
  }
  const int64_t dim = c.dim;
  out->push_back({"compressor.fc1.weight", {2 * dim, 2 * dim}});
  out->push_back({"compressor.fc1.bias", {2 * dim}});
  out->push_back({"compressor.fc2.weight", {dim, 2 * dim}});
  out->push_back({"compressor.fc2.bias", {dim}});
  out->push_back({"mtp.norm_e.weight", {dim}});
  out->push_back({"mtp.norm_h.weight", {dim}});
  out->push_back({"mtp.fc.weight", {dim, 2 * dim}});
  AddLayerTensors(c, "mtp.layers.0.", out);
  out->push_back({"mtp.norm.weight", {dim}});
  out->push_back({"confidence.norm.weight", {2 * dim}});
  out->push_back({"confidence.fc1.weight", {dim, 2 * dim}});
  out->push_back({"confidence.fc2.weight", {1, dim}});
}

void WritePipo(const HeadConfig& s, const ModelConfig& base, json* j) {
  throw std::invalid_argument("WriteDraftHead: pipo heads are written by training/train_pipo.py");
}

}  // namespace specline::head_format
