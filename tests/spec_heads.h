// Randomly initialised draft heads (PPSD early-exit heads, SPD modules) for
// the scheduler test model, shared by the speculation tests.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "model/formats/head_file.h"
#include "tests/inproc_pipeline.h"

namespace specline::testing {

// Random heads for the scheduler test model, one directory per kind
// ("ppsd-norm", "ppsd-layer", "spd-v10", "spd-v11", "ptp": a PTP adapter
// with 4 auxiliary rows) and pipeline depth.
inline std::string HeadDir(const std::string& kind, int n_stages) {
  const std::string dir = TempDir() + "/spec_heads/" + kind + "-" + std::to_string(n_stages);
  if (std::filesystem::exists(dir + "/head.json")) return dir;
  const ModelConfig base = SchedulerTestConfig();
  auto model = OpenModel(SchedulerTestModel());
  HeadConfig s;
  if (kind == "ppsd-norm" || kind == "ppsd-layer") {
    s.method = kind == "ppsd-norm" ? DraftMethod::kPpsdNorm : DraftMethod::kPpsdLayer;
    s.exit_layer = EvenSplit(base.n_layers, n_stages)[1];  // where the first stage ends
  } else if (kind == "ptp") {
    s.method = DraftMethod::kPtp;
    s.ptp_n_aux = 4;
    s.ptp_lora_rank = 4;
    s.ptp_lora_alpha = 8.0;
  } else {
    s.method = DraftMethod::kSpd;
    s.spd_stages = n_stages;
    s.spd_layers = 1;
    if (kind == "spd-v10") {
      s.spd_layout = SpdFeatureLayout::kV10;
      s.spd_taps = SpdV10Taps(base.n_layers, n_stages);
    } else {
      s.spd_layout = SpdFeatureLayout::kV11;
      s.spd_taps = SpdDefaultTaps(base.n_layers, n_stages);
    }
  }
  WriteRandomDraftHead(dir, s, base, /*seed=*/17, model.get());
  return dir;
}

}  // namespace specline::testing
