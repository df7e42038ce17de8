#include "model/drafters/stage_addons.h"

#include <exception>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "model/formats/head_file.h"
#include "model/drafters/ptp_adapter.h"

namespace specline {
namespace {

// Which heads bring what. A new method that runs on the stages adds its
// line here and nowhere in stage_worker/.
bool BringsAdapter(DraftMethod m) { return m == DraftMethod::kPtp; }
bool BringsWeightSet(DraftMethod m) { return m == DraftMethod::kPipo; }

absl::StatusOr<std::shared_ptr<const DraftHead>> Load(const std::string& dir,
                                                      const ModelConfig& base) {
  try {
    return std::shared_ptr<const DraftHead>(LoadDraftHead(dir, base));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
}

}  // namespace

absl::StatusOr<StageAdapter> LoadStageAdapter(const std::string& dir, const ModelConfig& base) {
  auto head = Load(dir, base);
  if (!head.ok()) return head.status();
  const DraftMethod method = (*head)->config().method;
  if (!BringsAdapter(method)) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": a ", DraftMethodName(method), " head brings no adapter",
        BringsWeightSet(method) ? " (it brings a weight set: pass it with --weight-set)" : ""));
  }
  try {
    return StageAdapter{DraftMethodName(method), std::make_shared<const PtpAdapter>(*head)};
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": ", e.what()));
  }
}

absl::StatusOr<StageWeightSet> LoadStageWeightSet(const std::string& dir,
                                                  const ModelConfig& base) {
  auto head = Load(dir, base);
  if (!head.ok()) return head.status();
  const HeadConfig& config = (*head)->config();
  if (!BringsWeightSet(config.method)) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": a ", DraftMethodName(config.method), " head brings no weight set",
        BringsAdapter(config.method) ? " (it brings an adapter: pass it with --adapter)" : ""));
  }
  StageWeightSet set;
  set.kind = DraftMethodName(config.method);
  set.fingerprint = (*head)->Fingerprint();
  try {
    set.weights = OpenModel((std::filesystem::path(dir) / config.pipo_backbone_file).string());
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": its backbone: ", e.what()));
  }
  // PIPO's backbone is fed the scheduler's compressor rows on stage 0
  // (docs/pipo.md, "Who computes what").
  set.hidden_input = true;
  return set;
}

}  // namespace specline
