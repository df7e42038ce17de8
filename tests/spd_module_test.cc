// The SPD speculation module: last-row logits of SPD-style call sequences
// (mixed depths, in-flight recompute, rollback) match an independent float64
// PyTorch/NumPy golden (scripts/reference/spd_module_golden.py, v10 and v11
// layouts, L divisible and not divisible by n); recomputing trailing rows
// equals a fresh run; tap plans per depth; errors leave the cache unchanged.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "model/drafters/spd_module.h"
#include "model/formats/head_file.h"
#include "model/formats/random_model.h"
#include "model/runtime/stage_slice.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"

namespace specline {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

const std::string kData = "tests/data/spd_module/";

const json& Golden() {
  static const json g = json::parse(testing::ReadFile(testing::SourcePath(kData + "golden.json")));
  return g;
}

std::shared_ptr<kernels::ThreadPool> Pool() {
  static auto pool = std::make_shared<kernels::ThreadPool>(2);
  return pool;
}

// A golden head with its base; `hidden[j][pos]` are the base's true H^j.
struct Case {
  std::shared_ptr<const ModelSource> base;
  std::shared_ptr<const DraftHead> head;
  const json* g = nullptr;       // golden["heads"][name]
  const json* hidden = nullptr;  // golden["bases"][base]["hidden"]
  std::vector<int32_t> tokens;
};

Case LoadCase(const std::string& name) {
  Case c;
  c.g = &Golden()["heads"][name];
  const json& b = Golden()["bases"][(*c.g)["base"].get<std::string>()];
  c.hidden = &b["hidden"];
  c.tokens = b["tokens"].get<std::vector<int32_t>>();
  c.base = OpenModel(testing::SourcePath(kData + b["dir"].get<std::string>()));
  c.head = LoadDraftHead(testing::SourcePath(kData + (*c.g)["dir"].get<std::string>()),
                         c.base->config());
  return c;
}

// Taps of the row at `pos` for `taps` (a TapsForDepth list): H^j, j != 0.
std::vector<float> TapValues(const Case& c, const std::vector<int>& taps, int pos) {
  std::vector<float> v;
  for (size_t k = 1; k < taps.size(); ++k) {
    for (const json& x : (*c.hidden)[taps[k]][pos]) v.push_back(x.get<float>());
  }
  return v;
}

// Rows for positions [first, first + depths.size()) of the golden sequence;
// `store` keeps the tap values the spans point into.
std::vector<SpdRow> Rows(const Case& c, const SpdModule& m, int first,
                         const std::vector<int>& depths, std::vector<std::vector<float>>* store) {
  store->clear();
  store->reserve(depths.size());
  std::vector<SpdRow> rows;
  for (size_t k = 0; k < depths.size(); ++k) {
    const int pos = first + static_cast<int>(k);
    store->push_back(TapValues(c, m.TapsForDepth(depths[k]), pos));
    rows.push_back({pos, c.tokens[pos], depths[k], store->back()});
  }
  return rows;
}

const char* kCases[] = {"a_v11", "a_v10", "b_v11", "b_v10"};

TEST(SpdModule, MatchesTorchGolden) {
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    Case c = LoadCase(name);
    SpdModule m(c.head, c.base, Pool());
    const json& g = *c.g;
    ASSERT_EQ(m.n_stages(), g["n_stages"].get<int>());
    ASSERT_EQ(m.n_layers(), g["n_layers"].get<int>());
    // The tap plan, against the reference's own (independent) derivation.
    for (int d = 0; d <= m.n_stages(); ++d) {
      EXPECT_EQ(m.TapsForDepth(d), g["taps_for_depth"][d].get<std::vector<int>>()) << "depth " << d;
    }
    EXPECT_EQ(m.AllTaps(), g["all_taps"].get<std::vector<int>>());
    std::vector<float> logits(m.vocab_size());
    int call = 0;
    for (const json& cj : g["calls"]) {
      std::vector<std::vector<float>> store;
      std::vector<SpdRow> rows;
      for (const json& r : cj["rows"]) {
        const int pos = r["pos"], depth = r["depth"];
        // Taps chosen from the golden's list, not from the module under test.
        store.push_back(TapValues(c, g["taps_for_depth"][depth].get<std::vector<int>>(), pos));
        ASSERT_EQ(r["token"].get<int>(), c.tokens[pos]);
      }
      for (size_t k = 0; k < cj["rows"].size(); ++k) {
        const json& r = cj["rows"][k];
        rows.push_back({r["pos"].get<int32_t>(), r["token"].get<int32_t>(), r["depth"].get<int>(),
                        store[k]});
      }
      ASSERT_TRUE(m.Forward(7, rows, logits.data()).ok()) << "call " << call;
      EXPECT_EQ(m.Length(7), rows.back().pos + 1);
      const json& want = cj["last_logits"];
      for (int v = 0; v < m.vocab_size(); ++v) {
        const double w = want[v].get<double>();
        ASSERT_NEAR(logits[v], w, 1e-4 * std::max(1.0, std::fabs(w)))
            << "call " << call << " vocab " << v;
      }
      ++call;
    }
  }
}

// The golden's H^j are what the stages' taps give: a whole-model StageSlice
// over the same tokens reproduces them (so the numbering convention agrees).
TEST(SpdModule, GoldenHiddenStatesAreStageTaps) {
  for (const char* name : {"a_v11", "b_v11"}) {
    Case c = LoadCase(name);
    const int L = c.base->config().n_layers, dim = c.base->config().dim;
    StageSlice slice(*c.base, 0, L, SliceOptions{}, Pool());
    std::vector<SlotRef> slots;
    for (size_t p = 0; p < c.tokens.size(); ++p) slots.push_back({1, static_cast<int32_t>(p)});
    std::vector<int> taps;
    for (int j = 0; j <= L; ++j) taps.push_back(j);
    SliceInput in;
    in.slots = slots;
    in.tokens = c.tokens;
    SliceOutput out;
    ASSERT_TRUE(slice.Forward(in, taps, &out).ok());
    for (int j = 0; j <= L; ++j) {
      for (size_t p = 0; p < c.tokens.size(); ++p) {
        for (int i = 0; i < dim; ++i) {
          const double w = (*c.hidden)[j][p][i].get<double>();
          ASSERT_NEAR(out.taps[j].hidden[p * dim + i], w, 1e-4 * std::max(1.0, std::fabs(w)))
              << name << " H^" << j << " pos " << p;
        }
      }
    }
  }
}

// SPD cycles (crop to the first non-final row, rerun in-flight rows one stage
// deeper, append a new row), a rejection back to an earlier position, and an
// explicit Truncate all end with the logits of a fresh module fed the final
// rows in one call.
TEST(SpdModule, RecomputeEqualsFreshRun) {
  for (const char* name : {"a_v11", "b_v10"}) {
    SCOPED_TRACE(name);
    Case c = LoadCase(name);
    SpdModuleOptions opt;
    opt.kv_block_size = 4;  // several blocks per sequence
    opt.kv_capacity_tokens = 64;
    SpdModule m(c.head, c.base, Pool(), opt);
    const int n = m.n_stages();
    std::vector<float> got(m.vocab_size()), want(m.vocab_size());
    std::vector<std::vector<float>> store;

    std::vector<int> cur = {n, n, 1, 0};
    ASSERT_TRUE(m.Forward(1, Rows(c, m, 0, cur, &store), got.data()).ok());
    auto cycle = [&] {
      int f = 0;
      while (f < static_cast<int>(cur.size()) && cur[f] == n) ++f;
      for (size_t p = f; p < cur.size(); ++p) cur[p] = std::min(cur[p] + 1, n);
      cur.push_back(0);
      std::vector<int> tail(cur.begin() + f, cur.end());
      ASSERT_TRUE(m.Forward(1, Rows(c, m, f, tail, &store), got.data()).ok());
      EXPECT_EQ(m.Length(1), static_cast<int>(cur.size()));
    };
    for (int i = 0; i < 4; ++i) cycle();
    // Rejection at position 2: rerun it at full depth, cache cropped there.
    cur.resize(2);
    cur.push_back(n);
    ASSERT_TRUE(m.Forward(1, Rows(c, m, 2, {n}, &store), got.data()).ok());
    EXPECT_EQ(m.Length(1), 3);
    for (int i = 0; i < 5; ++i) cycle();
    ASSERT_LE(cur.size(), c.tokens.size());

    SpdModule fresh(c.head, c.base, Pool(), opt);
    ASSERT_TRUE(fresh.Forward(1, Rows(c, fresh, 0, cur, &store), want.data()).ok());
    for (int v = 0; v < m.vocab_size(); ++v) {
      ASSERT_NEAR(got[v], want[v], 1e-6 * std::max(1.0f, std::fabs(want[v]))) << "vocab " << v;
    }

    // Explicit Truncate: stale shallow rows from position 5 on, dropped, rerun.
    std::vector<int> stale = cur;
    for (size_t p = 5; p < stale.size(); ++p) stale[p] = 0;
    ASSERT_TRUE(m.Forward(2, Rows(c, m, 0, stale, &store), got.data()).ok());
    m.Truncate(2, 5);
    EXPECT_EQ(m.Length(2), 5);
    std::vector<int> tail(cur.begin() + 5, cur.end());
    ASSERT_TRUE(m.Forward(2, Rows(c, m, 5, tail, &store), got.data()).ok());
    for (int v = 0; v < m.vocab_size(); ++v) {
      ASSERT_NEAR(got[v], want[v], 1e-6 * std::max(1.0f, std::fabs(want[v]))) << "vocab " << v;
    }
    // Depth matters: the same rows with one earlier row shallower differ.
    std::vector<int> other = cur;
    other[3] = other[3] == 0 ? n : 0;
    SpdModule fresh2(c.head, c.base, Pool(), opt);
    ASSERT_TRUE(fresh2.Forward(1, Rows(c, fresh2, 0, other, &store), got.data()).ok());
    EXPECT_NE(got, want);

    const int free0 = fresh.kv_cache().free_blocks();
    fresh.Release(1);
    EXPECT_GT(fresh.kv_cache().free_blocks(), free0);
    m.Release(1);
    m.Release(2);
    EXPECT_EQ(m.kv_cache().free_blocks(), 16);
  }
}

// Tap plans of an 8-layer base with 4 stages (d*L/n = 2d).
TEST(SpdModule, TapsForDepth) {
  const ModelConfig base = LlamaShape(32, 48, 8, 4, 2, 40, 64);
  const std::string model_dir = testing::TempDir() + "/spd_taps_base";
  WriteRandomModel(base, ModelFormat::kHuggingFace, model_dir, 3);
  std::shared_ptr<const ModelSource> src = OpenModel(model_dir);
  auto make = [&](SpdFeatureLayout layout, std::vector<int> taps, const std::string& dir) {
    HeadConfig s;
    s.method = DraftMethod::kSpd;
    s.spd_stages = 4;
    s.spd_layers = 1;
    s.spd_layout = layout;
    s.spd_taps = std::move(taps);
    const std::string path = testing::TempDir() + "/" + dir;  // TempDir is fresh per call
    WriteRandomDraftHead(path, s, base, 5);
    return std::make_unique<SpdModule>(LoadDraftHead(path, base), src, Pool());
  };
  using V = std::vector<int>;
  // v11, default bounds [0, 2, 6, 7]: the largest bound <= 2d.
  EXPECT_EQ(SpdDefaultTaps(8, 4), (V{0, 2, 6, 7}));
  auto v11 = make(SpdFeatureLayout::kV11, SpdDefaultTaps(8, 4), "spd_taps_v11");
  EXPECT_EQ(v11->TapsForDepth(0), (V{0}));
  EXPECT_EQ(v11->TapsForDepth(1), (V{0, 2}));
  EXPECT_EQ(v11->TapsForDepth(2), (V{0, 2}));
  EXPECT_EQ(v11->TapsForDepth(3), (V{0, 2, 6}));
  EXPECT_EQ(v11->TapsForDepth(4), (V{0, 2, 6, 7}));
  EXPECT_EQ(v11->AllTaps(), (V{0, 2, 6, 7}));
  EXPECT_EQ(v11->TapsForDepth(5), V{});
  EXPECT_EQ(v11->TapsForDepth(-1), V{});
  // v10: {0} at depth 0, else {0, l/2, l} with l = 2d.
  auto v10 = make(SpdFeatureLayout::kV10, {0, 1, 2, 3, 4, 6, 8}, "spd_taps_v10");
  EXPECT_EQ(v10->TapsForDepth(0), (V{0}));
  EXPECT_EQ(v10->TapsForDepth(1), (V{0, 1, 2}));
  EXPECT_EQ(v10->TapsForDepth(2), (V{0, 2, 4}));
  EXPECT_EQ(v10->TapsForDepth(3), (V{0, 3, 6}));
  EXPECT_EQ(v10->TapsForDepth(4), (V{0, 4, 8}));
  EXPECT_EQ(v10->AllTaps(), (V{0, 1, 2, 3, 4, 6, 8}));
  // Deduplicated when l/2 == 0 (5 layers, 3 stages: depth 1 reaches layer 1),
  // from the golden head: the FC still sees H^0 twice.
  Case b = LoadCase("b_v10");
  SpdModule m(b.head, b.base, Pool());
  EXPECT_EQ(m.TapsForDepth(1), (V{0, 1}));
  EXPECT_EQ(m.AllTaps(), (V{0, 1, 2, 3, 5}));
}

TEST(SpdModule, ErrorsLeaveCacheUnchanged) {
  Case c = LoadCase("a_v11");
  SpdModuleOptions opt;
  opt.kv_block_size = 4;
  opt.kv_capacity_tokens = 8;
  SpdModule m(c.head, c.base, Pool(), opt);
  const int n = m.n_stages();
  std::vector<float> logits(m.vocab_size());
  std::vector<std::vector<float>> store;
  ASSERT_TRUE(m.Forward(1, Rows(c, m, 0, {n, n, 1, 0}, &store), logits.data()).ok());
  ASSERT_EQ(m.Length(1), 4);
  const int free0 = m.kv_cache().free_blocks();

  auto expect_error = [&](std::vector<SpdRow> rows, absl::StatusCode code, const std::string& msg) {
    const absl::Status st = m.Forward(1, rows, logits.data());
    EXPECT_EQ(st.code(), code) << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr(msg));
    EXPECT_EQ(m.Length(1), 4);
    EXPECT_EQ(m.kv_cache().free_blocks(), free0);
  };
  // Each case starts at position 2 (which would truncate) and breaks row 1.
  auto rows = Rows(c, m, 2, {n, 1}, &store);
  auto bad = rows;
  bad[1].depth = n + 1;
  expect_error(bad, absl::StatusCode::kInvalidArgument, "depth 3 outside [0, 2]");
  bad = rows;
  bad[1].depth = -1;
  expect_error(bad, absl::StatusCode::kInvalidArgument, "depth -1");
  bad = rows;
  bad[1].depth = 0;  // depth 0 needs no taps; row has H^2's values
  expect_error(bad, absl::StatusCode::kInvalidArgument, "32 tap values, expected 0");
  bad = rows;
  bad[1].taps = bad[1].taps.subspan(1);
  expect_error(bad, absl::StatusCode::kInvalidArgument, "31 tap values, expected 32");
  bad = rows;
  bad[1].token = m.vocab_size();
  expect_error(bad, absl::StatusCode::kInvalidArgument, "outside vocabulary");
  bad = rows;
  bad[1].pos = 4;  // not consecutive
  expect_error(bad, absl::StatusCode::kInvalidArgument, "does not follow");
  expect_error(Rows(c, m, 5, {0}, &store), absl::StatusCode::kInvalidArgument, "gap");
  expect_error({}, absl::StatusCode::kInvalidArgument, "at least one row");
  // 9 positions do not fit in 8 tokens of cache.
  std::vector<int> nine(9, 0);
  expect_error(Rows(c, m, 0, nine, &store), absl::StatusCode::kResourceExhausted, "full");
  // Still usable after the errors.
  EXPECT_TRUE(m.Forward(1, rows, logits.data()).ok());
  EXPECT_EQ(m.Length(1), 4);
}

TEST(SpdModule, RejectsWrongHeadOrBase) {
  Case a = LoadCase("a_v11");
  Case b = LoadCase("b_v11");
  EXPECT_THROW(SpdModule(a.head, b.base, Pool()), std::invalid_argument);
  EXPECT_THROW(SpdModule(a.head, nullptr, Pool()), std::invalid_argument);
  HeadConfig s;
  s.method = DraftMethod::kPpsdNorm;
  s.exit_layer = 1;
  const std::string dir = testing::TempDir() + "/spd_not_spd";
  WriteRandomDraftHead(dir, s, a.base->config(), 1);
  EXPECT_THROW(SpdModule(LoadDraftHead(dir, a.base->config()), a.base, Pool()),
               std::invalid_argument);
}

}  // namespace
}  // namespace specline
