#include "stage_worker/hosted_models.h"

#include "model/drafters/stage_addons.h"

namespace specline {

absl::StatusOr<LoadedAddOns> LoadAddOns(const std::vector<std::string>& adapter_dirs,
                                        const std::vector<std::string>& weight_set_dirs,
                                        const ModelConfig& base) {
  LoadedAddOns out;
  for (const std::string& dir : adapter_dirs) {
    absl::StatusOr<StageAdapter> a = LoadStageAdapter(dir, base);
    if (!a.ok()) return a.status();
    internal::AdapterInfo& info = out.info.adapters.emplace_back();
    info.set_id(static_cast<uint32_t>(out.info.adapters.size()));
    info.set_kind(a->kind);
    info.set_fingerprint(a->adapter->fingerprint());
    out.adapters.push_back(std::move(a->adapter));
  }
  for (const std::string& dir : weight_set_dirs) {
    absl::StatusOr<StageWeightSet> w = LoadStageWeightSet(dir, base);
    if (!w.ok()) return w.status();
    internal::WeightSetInfo& info = out.info.weight_sets.emplace_back();
    info.set_id(static_cast<uint32_t>(out.info.weight_sets.size()));
    info.set_kind(w->kind);
    info.set_fingerprint(w->fingerprint);
    info.set_hidden_input(w->hidden_input);
    out.weight_sets.push_back(std::move(w->weights));
  }
  return out;
}

}  // namespace specline
