// `specline make-random-head`: a randomly initialised draft head of the
// right shapes for a model (PPSD early-exit head or SPD module), in the
// head file format (docs/heads.md). Losslessness does not depend on head
// quality, so these run every speculative path end to end before trained
// heads exist (training/ makes those).
#include <iostream>

#include "cli/args.h"
#include "cli/commands.h"
#include "model/formats/head_file.h"
#include "model/formats/model_source.h"
#include "model/runtime/local_pipeline.h"

namespace specline::cli {
namespace {

const char kHeadUsage[] = R"(usage: specline make-random-head --model PATH --out DIR [options]
  --method ppsd-norm|ppsd-layer|spd   (default spd)
  --stages N        pipeline stages the head is for (default 2): PPSD exits
                    where the first of N even stages ends, SPD is made for N
  --exit-layer E    PPSD: override the exit layer
  --spd-layers N    SPD: decoder layers of the module (default 1)
  --layout v11|v10  SPD feature layout (default v11, the default taps)
  --seed N
The LM head (and the PPSD norm) start as copies of the model's, as the
papers initialise them.
)";

}  // namespace

int RandomHeadCommand(int argc, char** argv) {
  Args args(argc, argv, 2,
            {"model", "out", "method", "stages", "exit-layer", "spd-layers", "layout", "seed"},
            {"help"});
  if (args.Has("help") || !args.Has("model") || !args.Has("out")) {
    std::cout << kHeadUsage;
    return args.Has("help") ? 0 : 2;
  }
  std::unique_ptr<ModelSource> model = OpenModel(args.Str("model"));
  const ModelConfig& c = model->config();
  const int stages = args.Int("stages", 2);
  const std::string method = args.Str("method", "spd");
  HeadConfig s;
  if (method == "ppsd-norm" || method == "ppsd-layer") {
    s.method = method == "ppsd-norm" ? DraftMethod::kPpsdNorm : DraftMethod::kPpsdLayer;
    s.exit_layer = args.Int("exit-layer", EvenSplit(c.n_layers, stages)[1]);
  } else if (method == "spd") {
    s.method = DraftMethod::kSpd;
    s.spd_stages = stages;
    s.spd_layers = args.Int("spd-layers", 1);
    const std::string layout = args.Str("layout", "v11");
    if (layout == "v11") {
      s.spd_layout = SpdFeatureLayout::kV11;
      s.spd_taps = SpdDefaultTaps(c.n_layers, stages);
    } else if (layout == "v10") {
      s.spd_layout = SpdFeatureLayout::kV10;
      s.spd_taps = SpdV10Taps(c.n_layers, stages);
    } else {
      throw std::invalid_argument("--layout: expected v11 or v10, got " + layout);
    }
  } else {
    throw std::invalid_argument("--method: expected ppsd-norm, ppsd-layer or spd, got " + method);
  }
  s.metadata_json = R"json({"recipe": "random (specline make-random-head)"})json";
  WriteRandomDraftHead(args.Str("out"), s, c, args.U64("seed", 1), model.get());
  std::cout << "wrote a random " << DraftMethodName(s.method) << " head for " << args.Str("model")
            << " to " << args.Str("out") << "\n";
  return 0;
}

}  // namespace specline::cli
