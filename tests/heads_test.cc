// Draft-head files and the PPSD heads: the head format round-trips, every
// validation error names the file and the field or tensor at fault, the norm
// head with the base's weights is the base's output head bit for bit, the
// one-layer head matches a float64 NumPy golden
// (scripts/reference/heads_golden.py), and its KV rollback equals a fresh run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>

#include "model/drafters/draft_head_ppsd.h"
#include "model/formats/head_file.h"
#include "model/formats/random_model.h"
#include "model/formats/safetensors.h"
#include "model/runtime/output_head.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"

namespace specline {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;

ModelConfig Base() { return LlamaShape(32, 64, 4, 4, 2, 40, 128); }

HeadConfig NormSpec() {
  HeadConfig s;
  s.method = DraftMethod::kPpsdNorm;
  s.exit_layer = 2;
  return s;
}
HeadConfig LayerSpec() {
  HeadConfig s;
  s.method = DraftMethod::kPpsdLayer;
  s.exit_layer = 1;
  s.metadata_json = R"({"recipe":"test","data":"none","steps":0,"created":"2026-11-22"})";
  return s;
}
HeadConfig SpdSpec(SpdFeatureLayout layout) {
  HeadConfig s;
  s.method = DraftMethod::kSpd;
  s.spd_stages = 2;
  s.spd_layers = 2;
  s.spd_layout = layout;
  s.spd_taps = layout == SpdFeatureLayout::kV11 ? SpdDefaultTaps(4, 2) : std::vector<int>{0, 1, 2, 4};
  return s;
}

HeadConfig PtpSpec() {
  HeadConfig s;
  s.method = DraftMethod::kPtp;
  s.ptp_n_aux = 4;
  s.ptp_lora_rank = 2;
  s.ptp_lora_alpha = 4.0;
  return s;
}

std::string NewDir(const std::string& name) {
  static int counter = 0;
  return testing::TempDir() + "/" + name + std::to_string(counter++);
}

std::vector<float> Values(const TensorInfo& t) {
  std::vector<float> v(t.numel());
  std::memcpy(v.data(), t.data, v.size() * 4);
  return v;
}

std::string LoadError(const std::string& dir, const ModelConfig& base) {
  try {
    LoadDraftHead(dir, base);
  } catch (const ModelFormatError& e) {
    // Kept in the XML report (--gtest_output=xml) to read the messages.
    static int n = 0;
    ::testing::Test::RecordProperty("error_" + std::to_string(n++), e.what());
    return e.what();
  }
  return "(no error)";
}

json ReadJson(const std::string& dir) {
  return json::parse(testing::ReadFile(dir + "/head.json"));
}
void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// Each edit of the head's good head.json must make the load fail with a
// message naming the file and `field`.
void ExpectEachEditFails(const std::string& dir, const ModelConfig& base,
                         const std::vector<std::pair<std::function<void(json&)>, std::string>>& cases) {
  const std::string path = dir + "/head.json";
  const std::string good = testing::ReadFile(path);
  for (const auto& [edit, field] : cases) {
    SCOPED_TRACE(field);
    json j = json::parse(good);
    edit(j);
    WriteText(path, j.dump());
    const std::string e = LoadError(dir, base);
    EXPECT_THAT(e, HasSubstr(dir + "/"));
    EXPECT_THAT(e, HasSubstr(field));
  }
  WriteText(path, good);
}

TEST(HeadFile, RoundTripEveryMethod) {
  const ModelConfig base = Base();
  for (const HeadConfig& spec : {NormSpec(), LayerSpec(), SpdSpec(SpdFeatureLayout::kV10),
                                    SpdSpec(SpdFeatureLayout::kV11), PtpSpec()}) {
    SCOPED_TRACE(DraftMethodName(spec.method));
    const auto expected = ExpectedDraftHeadTensors(spec, base);
    std::vector<std::pair<std::string, std::vector<float>>> tensors;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    for (const auto& [name, shape] : expected) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<float> v(n);
      for (float& x : v) x = u(rng);
      tensors.push_back({name, v});
    }
    const std::string dir = NewDir("rt");
    WriteDraftHead(dir, spec, base, tensors);
    auto head = LoadDraftHead(dir, base);
    EXPECT_EQ(head->config().method, spec.method);
    EXPECT_EQ(head->config().exit_layer, spec.exit_layer);
    EXPECT_EQ(head->config().spd_stages, spec.spd_stages);
    EXPECT_EQ(head->config().spd_taps, spec.spd_taps);
    EXPECT_EQ(head->config().spd_layers, spec.spd_layers);
    EXPECT_EQ(head->config().spd_layout, spec.spd_layout);
    EXPECT_EQ(head->config().ptp_n_aux, spec.ptp_n_aux);
    EXPECT_EQ(head->config().ptp_lora_rank, spec.ptp_lora_rank);
    EXPECT_EQ(head->config().ptp_lora_alpha, spec.ptp_lora_alpha);
    EXPECT_EQ(json::parse(head->config().metadata_json), json::parse(spec.metadata_json));
    for (const auto& [name, values] : tensors) {
      const TensorInfo* t = head->FileTensor(name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(Values(*t), values) << name;
    }
  }
  EXPECT_EQ(SpdDefaultTaps(4, 2), (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(SpdDefaultTaps(32, 8), (std::vector<int>{0, 4, 12, 24, 31}));
}

TEST(HeadFile, RandomHeadsAreDeterministicAndCanonicallyNamed) {
  ModelConfig base = Base();
  base.qkv_bias = true;
  base.qk_norm = true;
  const std::string a = NewDir("ra"), b = NewDir("rb");
  WriteRandomDraftHead(a, LayerSpec(), base, 5);
  WriteRandomDraftHead(b, LayerSpec(), base, 5);
  EXPECT_EQ(testing::ReadFile(a + "/head.safetensors"), testing::ReadFile(b + "/head.safetensors"));
  auto head = LoadDraftHead(a, base);
  // The layer shows as global layer E, the norm under its model name.
  EXPECT_NE(head->source().Find("model.layers.1.self_attn.q_proj.bias"), nullptr);
  EXPECT_NE(head->source().Find("model.layers.1.self_attn.k_norm.weight"), nullptr);
  EXPECT_NE(head->source().Find("model.norm.weight"), nullptr);
  EXPECT_EQ(head->source().config().n_layers, 2);
  // F16 and BF16 heads load too.
  WriteRandomDraftHead(NewDir("f16"), NormSpec(), base, 5, nullptr, DType::kF16);
  const std::string bf = NewDir("bf16");
  WriteRandomDraftHead(bf, SpdSpec(SpdFeatureLayout::kV11), base, 5, nullptr, DType::kBF16);
  EXPECT_EQ(LoadDraftHead(bf, base)->FileTensor("fc.2.weight")->shape,
            (std::vector<int64_t>{32, 96}));
}

class HeadValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = NewDir("bad");
    WriteRandomDraftHead(dir_, LayerSpec(), Base(), 1);
    json_ = dir_ + "/head.json";
    st_ = dir_ + "/head.safetensors";
  }
  // Rewrites head.safetensors with `edit` applied to its tensor list.
  void EditTensors(const std::function<void(std::vector<TensorInfo>&)>& edit) {
    std::vector<TensorInfo> ts;
    std::vector<std::vector<char>> keep;
    {
      auto f = SafetensorsFile::Open(st_);
      for (const auto& [_, t] : f->tensors()) {
        keep.emplace_back(static_cast<const char*>(t.data),
                          static_cast<const char*>(t.data) + t.nbytes);
        TensorInfo c = t;
        c.data = keep.back().data();
        ts.push_back(c);
      }
      // keep owns copies; the map closes here.
    }
    for (size_t i = 0; i < ts.size(); ++i) ts[i].data = keep[i].data();
    edit(ts);
    WriteSafetensors(st_, ts);
  }
  void EditJson(const std::function<void(json&)>& edit) {
    json j = ReadJson(dir_);
    edit(j);
    WriteText(json_, j.dump());
  }
  std::string dir_, json_, st_;
};

TEST_F(HeadValidation, GoodHeadLoads) { EXPECT_NO_THROW(LoadDraftHead(dir_, Base())); }

TEST_F(HeadValidation, WrongBaseFingerprint) {
  ModelConfig other = Base();
  other.vocab_size = 41;
  std::string e = LoadError(dir_, other);
  EXPECT_THAT(e, HasSubstr(json_));
  EXPECT_THAT(e, HasSubstr("base.vocab_size"));
  other = Base();
  other.n_layers = 6;
  EXPECT_THAT(LoadError(dir_, other), HasSubstr("base.n_layers"));
  other = Base();
  other.rope_theta = 500000.0f;
  EXPECT_THAT(LoadError(dir_, other), HasSubstr("base.rope_theta"));
}

TEST_F(HeadValidation, MissingTensor) {
  EditTensors([](std::vector<TensorInfo>& ts) {
    std::erase_if(ts, [](const TensorInfo& t) { return t.name == "layers.0.mlp.up_proj.weight"; });
  });
  const std::string e = LoadError(dir_, Base());
  EXPECT_THAT(e, HasSubstr(st_));
  EXPECT_THAT(e, HasSubstr("missing tensor 'layers.0.mlp.up_proj.weight'"));
}

TEST_F(HeadValidation, ExtraTensor) {
  EditTensors([](std::vector<TensorInfo>& ts) {
    TensorInfo t = ts[0];
    t.name = t.file_name = "stray.weight";
    ts.push_back(t);
  });
  const std::string e = LoadError(dir_, Base());
  EXPECT_THAT(e, HasSubstr(st_));
  EXPECT_THAT(e, HasSubstr("stray.weight"));
}

TEST_F(HeadValidation, WrongTensorShapeInFile) {
  EditTensors([](std::vector<TensorInfo>& ts) {
    for (TensorInfo& t : ts) {
      if (t.name == "layers.0.self_attn.k_proj.weight") t.shape = {32, 16};
    }
  });
  const std::string e = LoadError(dir_, Base());
  EXPECT_THAT(e, HasSubstr(st_));
  EXPECT_THAT(e, HasSubstr("layers.0.self_attn.k_proj.weight"));
  EXPECT_THAT(e, HasSubstr("[16, 32]"));
}

TEST_F(HeadValidation, WrongDeclaredShape) {
  EditJson([](json& j) { j["tensors"]["lm_head.weight"] = {40, 33}; });
  const std::string e = LoadError(dir_, Base());
  EXPECT_THAT(e, HasSubstr(json_));
  EXPECT_THAT(e, HasSubstr("tensors.lm_head.weight"));
}

TEST_F(HeadValidation, BadJson) {
  const std::string text = testing::ReadFile(json_);
  WriteText(json_, text.substr(0, text.size() / 2));
  std::string e = LoadError(dir_, Base());
  EXPECT_THAT(e, HasSubstr(json_));
  EXPECT_THAT(e, HasSubstr("malformed JSON"));
  WriteText(json_, "[1, 2]");
  EXPECT_THAT(LoadError(dir_, Base()), HasSubstr(json_));
}

TEST_F(HeadValidation, BadFields) {
  struct Case {
    std::function<void(json&)> edit;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["format"] = "specline.head.v0"; }, "'format'"},
      {[](json& j) { j["method"] = "medusa"; }, "'method'"},
      {[](json& j) { j.erase("method"); }, "'method'"},
      {[](json& j) { j["exit_layer"] = 4; }, "exit_layer"},
      {[](json& j) { j["exit_layer"] = "one"; }, "'exit_layer'"},
      {[](json& j) { j["base"].erase("head_dim"); }, "base.head_dim"},
      {[](json& j) { j.erase("tensors"); }, "'tensors'"},
      {[](json& j) { j["metadata"] = 3; }, "'metadata'"},
      {[](json& j) { j["tensors"]["extra.weight"] = {1}; }, "extra.weight"},
      {[](json& j) { j["method"] = "spd"; }, "'spd'"},
  };
  const std::string good = testing::ReadFile(json_);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    WriteText(json_, good);
    EditJson(c.edit);
    const std::string e = LoadError(dir_, Base());
    EXPECT_THAT(e, HasSubstr(json_));
    EXPECT_THAT(e, HasSubstr(c.field));
  }
}

TEST_F(HeadValidation, BadSpdFields) {
  const std::string dir = NewDir("spd");
  WriteRandomDraftHead(dir, SpdSpec(SpdFeatureLayout::kV11), Base(), 1);
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& j) { j["spd"]["feature_layout"] = "v12"; }, "spd.feature_layout"},
      {[](json& j) { j["spd"]["taps"] = {0, 3, 2}; }, "spd.taps"},
      {[](json& j) { j["spd"]["taps"] = {0, 9}; }, "spd.taps"},
      {[](json& j) { j["spd"]["n_stages"] = 9; }, "spd.n_stages"},
      {[](json& j) { j["spd"].erase("n_layers"); }, "spd.n_layers"},
      // Consistent JSON but one FC fewer than the file has.
      {[](json& j) {
         j["spd"]["taps"] = {0, 2};
         j["tensors"].erase("fc.2.weight");
       },
       "fc.2.weight"},
  };
  ExpectEachEditFails(dir, Base(), cases);
}

TEST_F(HeadValidation, BadPtpFields) {
  const std::string dir = NewDir("ptp");
  WriteRandomDraftHead(dir, PtpSpec(), Base(), 1);
  ASSERT_NO_THROW(LoadDraftHead(dir, Base()));
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& j) { j["ptp"]["u_embed"] = "sinusoidal"; }, "ptp.u_embed"},
      {[](json& j) { j["ptp"]["variant"] = "categorical"; }, "ptp.variant"},
      {[](json& j) { j["ptp"]["lora_scale"] = 3.0; }, "ptp.lora_scale"},
      {[](json& j) { j["ptp"]["lora_targets"] = {"self_attn.q_proj"}; }, "ptp.lora_targets"},
      {[](json& j) { j["ptp"]["lora_layers"] = {0, 1}; }, "ptp.lora_layers"},
      {[](json& j) { j["ptp"]["n_aux"] = 0; }, "ptp.n_aux"},
      {[](json& j) { j.erase("ptp"); }, "'ptp'"},
      // Consistent JSON, but the file holds rank-2 LoRA.
      {[](json& j) {
         j["ptp"]["lora_rank"] = 4;
         j["ptp"]["lora_scale"] = 1.0;
       },
       "lora_A"},
  };
  ExpectEachEditFails(dir, Base(), cases);
}

// The adapter the Python recipe trained (training/heads/stories260K/ptp)
// loads against stories260K with the parameters it was trained with.
TEST(PtpHead, TrainedAdapterLoads) {
  const std::string model = testing::SharedModelPath("stories260K/stories260K.bin");
  if (model.empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  const ModelConfig base = OpenModel(model)->config();
  auto head = LoadDraftHead(testing::SourcePath("training/heads/stories260K/ptp"), base);
  EXPECT_EQ(head->config().method, DraftMethod::kPtp);
  EXPECT_EQ(head->config().ptp_n_aux, 8);
  EXPECT_EQ(head->config().ptp_lora_rank, 16);
  EXPECT_EQ(head->source().Tensors().size(), 1u + 7u * 2u * base.n_layers);
  EXPECT_NE(head->source().Find("model.layers.4.mlp.down_proj.lora_B"), nullptr);
}

// The PIPO head the Python recipe trained (training/heads/stories260K/pipo):
// loads with its parameters and backbone; broken fields, a missing or
// mis-shaped backbone are refused with the file and field named.
TEST(PipoHead, TrainedHeadLoadsAndBadFieldsFail) {
  const std::string model = testing::SharedModelPath("stories260K/stories260K.bin");
  if (model.empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  const ModelConfig base = OpenModel(model)->config();
  const std::string trained = testing::SourcePath("training/heads/stories260K/pipo");
  auto head = LoadDraftHead(trained, base);
  EXPECT_EQ(head->config().method, DraftMethod::kPipo);
  EXPECT_EQ(head->config().pipo_pad_id, 0);
  EXPECT_DOUBLE_EQ(head->config().pipo_tau_default, 0.95);
  EXPECT_EQ(head->config().pipo_backbone_file, "backbone.bin");
  EXPECT_NE(head->FileTensor("mtp.layers.0.self_attn.q_proj.weight"), nullptr);

  const std::string dir = NewDir("pipo");
  fs::create_directories(dir);
  for (const char* f : {"head.json", "head.safetensors", "backbone.bin"}) {
    fs::copy_file(trained + "/" + f, dir + "/" + f);
  }
  ExpectEachEditFails(dir, base, {
      {[](json& j) { j["pipo"]["pad_id"] = 512; }, "pipo.pad_id"},
      {[](json& j) { j["pipo"]["pair_size"] = 3; }, "pipo.pair_size"},
      {[](json& j) { j["pipo"]["tau_default"] = -1; }, "pipo.tau_default"},
      {[](json& j) { j["pipo"]["backbone"]["file"] = "absent.bin"; }, "pipo.backbone.file"},
      {[](json& j) { j["tensors"].erase("mtp.fc.weight"); }, "mtp.fc.weight"},
  });
  // A backbone of another shape.
  WriteRandomModel(LlamaShape(32, 64, 2, 4, 2, 512, 64), ModelFormat::kLlama2c, dir + "/backbone.bin", 1);
  EXPECT_THAT(LoadError(dir, base), HasSubstr("backbone.bin"));
}

TEST_F(HeadValidation, MissingFiles) {
  fs::remove(st_);
  EXPECT_THAT(LoadError(dir_, Base()), HasSubstr(st_));
  fs::remove(json_);
  EXPECT_THAT(LoadError(dir_, Base()), HasSubstr(json_));
}

// The norm head initialised from the base's final norm and LM head is the
// base's OutputHead, bit for bit (untied and tied bases).
TEST(PpsdHead, NormHeadEqualsOutputHead) {
  auto pool = std::make_shared<kernels::ThreadPool>(2);
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    ModelConfig c = Base();
    c.tied_embeddings = tied;
    const std::string model_dir = NewDir("base");
    WriteRandomModel(c, ModelFormat::kHuggingFace, model_dir, 11);
    auto src = OpenModel(model_dir);
    const std::string dir = NewDir("norm");
    WriteRandomDraftHead(dir, NormSpec(), c, 3, src.get());
    PpsdHead head(LoadDraftHead(dir, c), pool);
    OutputHead base_head(*src, pool);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    std::vector<float> hidden(5 * c.dim);
    for (float& x : hidden) x = nd(rng);
    const std::vector<float> want = base_head.Logits(hidden.data(), 5);
    for (int i = 0; i < 5; ++i) {
      const std::vector<float> got = head.Logits(9, i, hidden.data() + i * c.dim);
      EXPECT_EQ(got, std::vector<float>(want.begin() + i * c.vocab_size,
                                        want.begin() + (i + 1) * c.vocab_size));
    }
    EXPECT_EQ(head.kv_cache(), nullptr);
  }
}

TEST(PpsdHead, RejectsSpdHead) {
  const std::string dir = NewDir("spdh");
  WriteRandomDraftHead(dir, SpdSpec(SpdFeatureLayout::kV10), Base(), 1);
  EXPECT_THROW(PpsdHead(LoadDraftHead(dir, Base()), std::make_shared<kernels::ThreadPool>(1)),
               std::invalid_argument);
}

// The one-layer head against the float64 NumPy golden, token by token and as
// one prefill batch.
TEST(PpsdHead, LayerHeadMatchesNumpyGolden) {
  const json g = json::parse(testing::ReadFile(testing::SourcePath("tests/data/heads/ppsd_layer_golden.json")));
  const json& b = g["base"];
  ModelConfig c = LlamaShape(b["dim"], b["hidden_dim"], b["n_layers"], b["n_heads"],
                             b["n_kv_heads"], b["vocab_size"], 64);
  c.head_dim = b["head_dim"];
  auto loaded = LoadDraftHead(testing::SourcePath("tests/data/heads/tiny_ppsd_layer"), c);
  EXPECT_EQ(loaded->config().exit_layer, g["exit_layer"].get<int>());
  std::shared_ptr<const DraftHead> shared = std::move(loaded);
  auto pool = std::make_shared<kernels::ThreadPool>(2);
  PpsdHead head(shared, pool);
  const int T = static_cast<int>(g["hidden"].size());
  std::vector<float> hidden;
  for (const json& row : g["hidden"]) {
    for (const json& x : row) hidden.push_back(x.get<float>());
  }
  auto check = [&](int pos, const float* got) {
    for (int v = 0; v < c.vocab_size; ++v) {
      const double want = g["logits"][pos][v].get<double>();
      ASSERT_NEAR(got[v], want, 1e-4 * std::max(1.0, std::fabs(want))) << "pos " << pos << " v " << v;
    }
  };
  for (int p = 0; p < T; ++p) check(p, head.Logits(1, p, hidden.data() + p * c.dim).data());
  EXPECT_EQ(head.Length(1), T);
  // Same positions as one batch, in a second sequence.
  std::vector<SlotRef> slots;
  for (int p = 0; p < T; ++p) slots.push_back({2, p});
  std::vector<float> logits(T * c.vocab_size);
  ASSERT_TRUE(head.Forward(slots, hidden.data(), logits.data()).ok());
  for (int p = 0; p < T; ++p) check(p, logits.data() + p * c.vocab_size);
}

// Rollback of the layer head's cache (explicit Truncate and implicit
// rewrite) gives exactly a fresh run's logits; Release frees every block.
TEST(PpsdHead, LayerHeadRollbackEqualsFreshRun) {
  const ModelConfig c = Base();
  const std::string dir = NewDir("layer");
  WriteRandomDraftHead(dir, LayerSpec(), c, 21);
  auto pool = std::make_shared<kernels::ThreadPool>(2);
  PpsdHeadOptions opt;
  opt.kv_block_size = 4;
  opt.kv_capacity_tokens = 64;
  PpsdHead head(LoadDraftHead(dir, c), pool, opt);
  const int free0 = head.kv_cache()->free_blocks();
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  auto rows = [&](int n) {
    std::vector<float> v(n * c.dim);
    for (float& x : v) x = nd(rng);
    return v;
  };
  const std::vector<float> a = rows(12), b = rows(7);  // b replaces positions 5..11
  auto run = [&](uint64_t seq, int from, int to, const std::vector<float>& h, int h0) {
    std::vector<std::vector<float>> out;
    for (int p = from; p < to; ++p) out.push_back(head.Logits(seq, p, h.data() + (p - h0) * c.dim));
    return out;
  };
  // Fresh: a[0..5) then b.
  auto fresh_head = run(1, 0, 5, a, 0);
  auto fresh_tail = run(1, 5, 12, b, 5);
  // Explicit: a[0..12), Truncate(5), b.
  run(2, 0, 12, a, 0);
  head.Truncate(2, 5);
  EXPECT_EQ(head.Length(2), 5);
  EXPECT_EQ(run(2, 5, 12, b, 5), fresh_tail);
  // Implicit: a[0..12), then write b at position 5.
  auto first = run(3, 0, 12, a, 0);
  EXPECT_EQ(std::vector(first.begin(), first.begin() + 5), fresh_head);
  EXPECT_EQ(run(3, 5, 12, b, 5), fresh_tail);
  // A gap is refused and changes nothing.
  std::vector<float> logits(c.vocab_size);
  const SlotRef gap{3, 14};
  EXPECT_FALSE(head.Forward(std::span(&gap, 1), b.data(), logits.data()).ok());
  EXPECT_EQ(head.Length(3), 12);
  EXPECT_THROW(head.Logits(3, 14, b.data()), std::runtime_error);
  for (uint64_t s : {1, 2, 3}) head.Release(s);
  EXPECT_EQ(head.kv_cache()->free_blocks(), free0);
}

}  // namespace
}  // namespace specline
