// Internal to the head file format (head_file.h): what the shared part
// (head_file.cc) and the per-method readers (head_ppsd.cc, head_spd.cc,
// head_ptp.cc, head_pipo.cc) share. A method's reader parses its own
// parameters from head.json, lists the tensors a head of it holds, and
// writes its parameters back; everything common to every method (the
// format string, the base fingerprint, the declared and stored tensors,
// metadata) stays in head_file.cc.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "model/formats/head_file.h"
#include "model/formats/model_source.h"
#include "model/model_config.h"
#include "nlohmann/json.hpp"

namespace specline::head_format {

using json = nlohmann::json;
using TensorList = std::vector<std::pair<std::string, std::vector<int64_t>>>;

inline constexpr const char* kFormat = "specline.head.v1";

// Throws ModelFormatError "file: what".
[[noreturn]] void Fail(const std::string& file, const std::string& what);

// Reads a required field of a JSON object with the type T, naming the
// field (`where` + key) on error.
template <typename T>
T Field(const json& obj, const std::string& key, const std::string& file,
        const std::string& where) {
  if (!obj.is_object() || !obj.contains(key)) Fail(file, "missing field '" + where + key + "'");
  const json& v = obj.at(key);
  bool ok;
  if constexpr (std::is_same_v<T, bool>) ok = v.is_boolean();
  else if constexpr (std::is_integral_v<T>) ok = v.is_number_integer();
  else if constexpr (std::is_floating_point_v<T>) ok = v.is_number();
  else ok = v.is_string();
  if (!ok) Fail(file, "field '" + where + key + "' has the wrong type (" + v.dump() + ")");
  return v.get<T>();
}

// The numbers of a model a head must match ("base" in head.json).
json BaseFingerprint(const ModelConfig& c);

// Hugging Face suffixes of one decoder layer with their shapes.
void AddLayerTensors(const ModelConfig& c, const std::string& prefix, TensorList* out);

// Where a reader's input comes from: head.json's path (for messages), the
// head directory (files it names) and the base model.
struct ReadContext {
  const std::string& jpath;
  const std::string& dir;
  const ModelConfig& base;
};

// The decoder layers a head holds, in DraftHead::source()'s canonical view:
// file layer j is model layer first + j.
struct HeadLayers {
  int first = 0;
  int count = 0;
};

// One reader per method. Read*: the method's parameters from head.json
// into `s` (ModelFormatError naming the field). *Tensors: appends the
// tensors a head of `s` holds (std::invalid_argument on inconsistent
// parameters). Write*: the method's parameters into head.json.
HeadLayers ReadPpsd(const json& j, const ReadContext& ctx, HeadConfig* s);
void PpsdTensors(const HeadConfig& s, const ModelConfig& c, TensorList* out);
void WritePpsd(const HeadConfig& s, const ModelConfig& base, json* j);

HeadLayers ReadSpd(const json& j, const ReadContext& ctx, HeadConfig* s);
void SpdTensors(const HeadConfig& s, const ModelConfig& c, TensorList* out);
void WriteSpd(const HeadConfig& s, const ModelConfig& base, json* j);

HeadLayers ReadPtp(const json& j, const ReadContext& ctx, HeadConfig* s);
void PtpTensors(const HeadConfig& s, const ModelConfig& c, TensorList* out);
void WritePtp(const HeadConfig& s, const ModelConfig& base, json* j);

HeadLayers ReadPipo(const json& j, const ReadContext& ctx, HeadConfig* s);
void PipoTensors(const HeadConfig& s, const ModelConfig& c, TensorList* out);
// Throws std::invalid_argument: PIPO heads are written by training/train_pipo.py.
void WritePipo(const HeadConfig& s, const ModelConfig& base, json* j);

}  // namespace specline::head_format
