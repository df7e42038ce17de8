// deploy/: the Prometheus rules pass `promtool check rules` and their unit
// tests (`promtool test rules`), the Grafana dashboard is well-formed JSON
// whose queries parse, and every specline_ metric the rules and the
// dashboard refer to is really exposed by `specline serve`'s processes
// (gateway, scheduler, stage workers) after plain and speculative requests.
// The Helm chart (rendered with helm-render): every built-in object passes
// the Kubernetes API types, the cluster secret reaches every workload, and
// the NetworkPolicies admit only the release's pods to the internal ports
// (deploy/rehearsal/check_chart.py checks far more against the binaries).
#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/formats/head_file.h"
#include "model/runtime/local_pipeline.h"
#include "tests/serving_stack.h"

namespace specline::testing {
namespace {

const char kRules[] = "deploy/prometheus/specline-rules.yaml";
const char kRulesTest[] = "deploy/prometheus/specline-rules.test.yaml";
const char kDashboard[] = "deploy/grafana/specline-dashboard.json";

std::string Promtool() {
  if (std::system("command -v promtool > /dev/null 2>&1") == 0) return "promtool";
  if (std::filesystem::exists("/usr/bin/promtool")) return "/usr/bin/promtool";
  return "";
}

// Runs `cmd` in `dir`; the exit status and the combined output.
std::pair<int, std::string> RunIn(const std::string& dir, const std::string& cmd) {
  const std::string out = TempDir() + "/cmd.out";
  const std::string full = "cd '" + dir + "' && " + cmd + " > '" + out + "' 2>&1";
  const int rc = std::system(full.c_str());
  return {rc, ReadFile(out)};
}

// Identifiers of the form specline_... in PromQL (or any) text, outside
// double-quoted strings; recording-rule names (with ':') are left out.
std::set<std::string> MetricRefs(const std::string& text) {
  std::string unquoted;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"' && (i == 0 || text[i - 1] != '\\')) {
      quoted = !quoted;
      unquoted += ' ';
    } else {
      unquoted += quoted ? ' ' : c;
    }
  }
  std::set<std::string> refs;
  static const std::regex ident("[a-zA-Z_:][a-zA-Z0-9_:]*");
  for (auto it = std::sregex_iterator(unquoted.begin(), unquoted.end(), ident);
       it != std::sregex_iterator(); ++it) {
    const std::string id = it->str();
    if (id.rfind("specline_", 0) == 0 && id.find(':') == std::string::npos) refs.insert(id);
  }
  return refs;
}

// The rules file without its comment lines: the exprs plus names quoted in
// annotations (those must exist too).
std::string RulesText() {
  std::istringstream in(ReadFile(SourcePath(kRules)));
  std::string line, out;
  while (std::getline(in, line)) {
    const size_t first = line.find_first_not_of(' ');
    if (first != std::string::npos && line[first] == '#') continue;
    out += line + "\n";
  }
  return out;
}

nlohmann::json Dashboard() { return nlohmann::json::parse(ReadFile(SourcePath(kDashboard))); }

// Every non-row panel (rows may nest collapsed panels).
std::vector<nlohmann::json> Panels(const nlohmann::json& dash) {
  std::vector<nlohmann::json> out;
  for (const auto& p : dash.at("panels")) {
    if (p.value("type", "") == "row") {
      for (const auto& inner : p.value("panels", nlohmann::json::array())) out.push_back(inner);
    } else {
      out.push_back(p);
    }
  }
  return out;
}

std::vector<std::string> DashboardExprs(const nlohmann::json& dash) {
  std::vector<std::string> exprs;
  for (const auto& p : Panels(dash)) {
    for (const auto& t : p.value("targets", nlohmann::json::array())) {
      exprs.push_back(t.at("expr").get<std::string>());
    }
  }
  return exprs;
}

// Metric names in Prometheus text: sample names and # TYPE names (a
// histogram x also stands for x_bucket, x_sum, x_count).
std::set<std::string> ExposedNames(const std::string& text) {
  std::set<std::string> names;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream f(line.substr(7));
      std::string name, type;
      f >> name >> type;
      names.insert(name);
      if (type == "histogram" || type == "summary") {
        for (const char* s : {"_bucket", "_sum", "_count"}) names.insert(name + s);
      }
      continue;
    }
    if (line[0] == '#') continue;
    names.insert(line.substr(0, line.find_first_of("{ ")));
  }
  return names;
}

TEST(Deploy, RulesPassPromtoolCheckAndUnitTests) {
  const std::string promtool = Promtool();
  if (promtool.empty()) GTEST_SKIP() << "promtool absent (Debian package prometheus; scripts/setup.sh)";
  const std::string dir = SourcePath("deploy/prometheus");
  auto [rc, out] = RunIn(dir, promtool + " check rules specline-rules.yaml");
  EXPECT_EQ(rc, 0) << out;
  std::tie(rc, out) = RunIn(dir, promtool + " test rules specline-rules.test.yaml");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("SUCCESS"), std::string::npos) << out;
  // The unit tests cover the stage-down and queue-growth alerts.
  const std::string tests = ReadFile(SourcePath(kRulesTest));
  for (const char* alert : {"SpeclinePipelineDown", "SpeclineStageTargetDown", "SpeclineQueueGrowing",
                            "SpeclineQueueBacklog", "SpeclineTTFTBudgetBurnFast"}) {
    EXPECT_NE(tests.find(std::string("alertname: ") + alert), std::string::npos) << alert;
  }
}

TEST(Deploy, DashboardIsWellFormed) {
  const nlohmann::json dash = Dashboard();
  EXPECT_GE(dash.at("schemaVersion").get<int>(), 36);
  bool has_datasource_var = false;
  for (const auto& v : dash.at("templating").at("list")) {
    if (v.at("name") == "datasource" && v.at("type") == "datasource" && v.at("query") == "prometheus") {
      has_datasource_var = true;
    }
  }
  EXPECT_TRUE(has_datasource_var) << "a ${datasource} Prometheus template variable";
  const auto panels = Panels(dash);
  EXPECT_GE(panels.size(), 20u);
  std::set<int> ids;
  for (const auto& p : dash.at("panels")) EXPECT_TRUE(ids.insert(p.at("id").get<int>()).second);
  for (const auto& p : panels) {
    const std::string title = p.value("title", "?");
    ASSERT_TRUE(p.contains("datasource")) << title;
    EXPECT_EQ(p.at("datasource").at("uid"), "${datasource}") << title;
    ASSERT_TRUE(p.contains("targets")) << title;
    EXPECT_GE(p.at("targets").size(), 1u) << title;
    for (const auto& t : p.at("targets")) {
      EXPECT_FALSE(t.value("expr", "").empty()) << title;
      EXPECT_FALSE(t.value("refId", "").empty()) << title;
    }
    EXPECT_TRUE(p.contains("gridPos")) << title;
  }

  // Every query parses: wrapped as recording rules (template variables
  // replaced by their defaults) for `promtool check rules`.
  const std::string promtool = Promtool();
  if (promtool.empty()) GTEST_SKIP() << "promtool absent; dashboard PromQL not parsed";
  const std::string dir = TempDir();
  {
    std::ofstream out(dir + "/dashboard-rules.yaml");
    out << "groups:\n  - name: dashboard\n    rules:\n";
    int i = 0;
    for (std::string e : DashboardExprs(dash)) {
      for (const auto& [var, value] :
           std::vector<std::pair<std::string, std::string>>{{"$__rate_interval", "5m"},
                                                            {"$gateway_job", "specline-gateway"},
                                                            {"$scheduler_job", "specline-scheduler"},
                                                            {"$stage_job", "specline-stage"}}) {
        for (size_t pos; (pos = e.find(var)) != std::string::npos;) e.replace(pos, var.size(), value);
      }
      EXPECT_EQ(e.find('$'), std::string::npos) << "unknown variable in " << e;
      out << "      - record: dashboard:expr:" << i++ << "\n        expr: |\n          " << e << "\n";
    }
  }
  auto [rc, out] = RunIn(dir, promtool + " check rules dashboard-rules.yaml");
  EXPECT_EQ(rc, 0) << out << ReadFile(dir + "/dashboard-rules.yaml");
}

// --- The Helm chart -----------------------------------------------------

// helm-render (Go; the helm_render target), or "" when it is not built.
std::string HelmRender() {
  const std::string path = BinaryPath("deploy/helm-render");
  return std::filesystem::exists(path) ? path : "";
}

// Renders deploy/helm/specline as release "prod" in namespace "llm" with
// `args` (--set ...) to `out` (JSON); the manifests, or a failed assertion.
nlohmann::json RenderChart(const std::string& helm_render, const std::string& args, const std::string& out) {
  auto [rc, text] = RunIn(SourcePath(""), "'" + helm_render + "' --chart deploy/helm/specline --release prod "
                                              "--namespace llm --output json " + args);
  EXPECT_EQ(rc, 0) << text;
  if (rc != 0) return nlohmann::json::array();
  {
    std::ofstream f(out);
    f << text;
  }
  nlohmann::json docs = nlohmann::json::array();
  for (const auto& d : nlohmann::json::parse(text)) docs.push_back(d.at("manifest"));
  return docs;
}

std::vector<nlohmann::json> OfKind(const nlohmann::json& docs, const std::string& kind) {
  std::vector<nlohmann::json> out;
  for (const auto& d : docs) {
    if (d.value("kind", "") == kind) out.push_back(d);
  }
  return out;
}

std::string Base64Decode(const std::string& in) {
  static const std::string chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int bits = 0, value = 0;
  for (char c : in) {
    const size_t v = chars.find(c);
    if (v == std::string::npos) break;  // '=' padding
    value = (value << 6) | static_cast<int>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((value >> bits) & 0xff);
    }
  }
  return out;
}

// Whether `selector`'s matchLabels all hold in `labels` (and it has some).
bool Selects(const nlohmann::json& selector, const nlohmann::json& labels) {
  const nlohmann::json& ml = selector.value("matchLabels", nlohmann::json::object());
  if (ml.empty()) return false;
  for (const auto& [k, v] : ml.items()) {
    if (!labels.contains(k) || labels.at(k) != v) return false;
  }
  return true;
}

TEST(Deploy, ChartObjectsPassKubernetesSchema) {
  const std::string helm_render = HelmRender();
  if (helm_render.empty()) GTEST_SKIP() << "helm-render not built (needs go: the helm_render target)";
  const std::string dir = TempDir();
  std::string files;
  int n = 0;
  for (const std::string args :
       {"",
        "--values deploy/helm/specline/values-gpu.yaml "
        "--api-versions monitoring.coreos.com/v1/ServiceMonitor",
        "--set internalAuth.existingSecret=mine "
        "--set 'networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.a=b'",
        "--set internalAuth.enabled=false --set networkPolicy.enabled=false"}) {
    const std::string out = dir + "/chart" + std::to_string(n++) + ".json";
    ASSERT_FALSE(RenderChart(helm_render, args, out).empty()) << args;
    files += " '" + out + "'";
  }
  // 77: the Kubernetes types are not fetched. That is a skip, never a pass.
  auto [rc, out] = RunIn(SourcePath(""), "python3 deploy/rehearsal/k8s_schema.py" + files);
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) GTEST_SKIP() << out;
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find(" 0 errors"), std::string::npos) << out;
}

TEST(Deploy, ChartMountsTheClusterSecretOnEveryWorkload) {
  const std::string helm_render = HelmRender();
  if (helm_render.empty()) GTEST_SKIP() << "helm-render not built (needs go: the helm_render target)";
  const nlohmann::json docs = RenderChart(helm_render, "", TempDir() + "/defaults.json");
  const auto secrets = OfKind(docs, "Secret");
  ASSERT_EQ(secrets.size(), 1u);
  const std::string name = secrets[0].at("metadata").at("name");
  EXPECT_EQ(name, "prod-specline-cluster-secret");
  const std::string secret = Base64Decode(secrets[0].at("data").at("secret").get<std::string>());
  EXPECT_EQ(secret.size(), 48u);  // the binaries refuse fewer than 32
  EXPECT_TRUE(std::all_of(secret.begin(), secret.end(), [](char c) { return std::isalnum(c); })) << secret;

  int workloads = 0;
  for (const char* kind : {"Deployment", "StatefulSet"}) {
    for (const auto& w : OfKind(docs, kind)) {
      ++workloads;
      const std::string wname = w.at("metadata").at("name");
      const nlohmann::json& pod = w.at("spec").at("template").at("spec");
      std::string volume;
      for (const auto& v : pod.at("volumes")) {
        if (v.contains("secret") && v.at("secret").at("secretName") == name) {
          volume = v.at("name");
          EXPECT_EQ(v.at("secret").at("items"),
                    nlohmann::json::parse(R"([{"key": "secret", "path": "secret"}])"))
              << wname;
        }
      }
      ASSERT_FALSE(volume.empty()) << wname << " mounts no volume of " << name;
      const nlohmann::json& c = pod.at("containers").at(0);
      std::string mount_path;
      for (const auto& vm : c.at("volumeMounts")) {
        if (vm.at("name") == volume) {
          mount_path = vm.at("mountPath");
          EXPECT_TRUE(vm.value("readOnly", false)) << wname;
        }
      }
      ASSERT_FALSE(mount_path.empty()) << wname;
      int flags = 0;
      for (const auto& a : c.at("args")) {
        if (a.get<std::string>().rfind("--cluster-secret-file=", 0) == 0) {
          ++flags;
          EXPECT_EQ(a, "--cluster-secret-file=" + mount_path + "/secret") << wname;
        }
      }
      EXPECT_EQ(flags, 1) << wname << ": --cluster-secret-file";
    }
  }
  EXPECT_EQ(workloads, 3) << "gateway, scheduler, stage";

  // Turned off: no Secret, no flag.
  const nlohmann::json off =
      RenderChart(helm_render, "--set internalAuth.enabled=false", TempDir() + "/off.json");
  EXPECT_TRUE(OfKind(off, "Secret").empty());
  EXPECT_EQ(off.dump().find("cluster-secret"), std::string::npos);
}

TEST(Deploy, ChartNetworkPolicyAdmitsOnlyTheReleaseToInternalPorts) {
  const std::string helm_render = HelmRender();
  if (helm_render.empty()) GTEST_SKIP() << "helm-render not built (needs go: the helm_render target)";
  const nlohmann::json docs = RenderChart(helm_render, "", TempDir() + "/defaults.json");
  const auto policies = OfKind(docs, "NetworkPolicy");
  ASSERT_EQ(policies.size(), 3u);
  const nlohmann::json release = {{"app.kubernetes.io/name", "specline"},
                                  {"app.kubernetes.io/instance", "prod"}};
  for (const char* kind : {"Deployment", "StatefulSet"}) {
    for (const auto& w : OfKind(docs, kind)) {
      const std::string wname = w.at("metadata").at("name");
      const nlohmann::json& labels = w.at("spec").at("template").at("metadata").at("labels");
      const std::string component = labels.at("app.kubernetes.io/component");
      std::vector<nlohmann::json> mine;
      for (const auto& p : policies) {
        if (Selects(p.at("spec").at("podSelector"), labels)) mine.push_back(p);
      }
      ASSERT_EQ(mine.size(), 1u) << wname << " is selected by one NetworkPolicy";
      EXPECT_EQ(mine[0].at("spec").at("policyTypes"), nlohmann::json::parse(R"(["Ingress"])"));
      std::set<std::string> open;  // ports admitted from every source
      for (const auto& rule : mine[0].at("spec").at("ingress")) {
        std::set<std::string> ports;
        for (const auto& p : rule.value("ports", nlohmann::json::array())) ports.insert(p.at("port"));
        EXPECT_FALSE(ports.empty()) << wname << ": a rule without ports admits every port";
        if (!rule.contains("from")) {
          open.insert(ports.begin(), ports.end());
          continue;
        }
        // Every peer is a component of this release in the release's
        // namespace: a podSelector alone (no namespaceSelector, no ipBlock).
        for (const auto& peer : rule.at("from")) {
          ASSERT_TRUE(peer.size() == 1 && peer.contains("podSelector")) << wname << ": " << peer.dump();
          const nlohmann::json& ml = peer.at("podSelector").value("matchLabels", nlohmann::json::object());
          for (const auto& [k, v] : release.items()) {
            EXPECT_EQ(ml.value(k, ""), v) << wname << ": " << peer.dump();
          }
          EXPECT_TRUE(std::set<std::string>({"gateway", "scheduler", "stage"})
                          .count(ml.value("app.kubernetes.io/component", "")))
              << wname << ": " << peer.dump();
        }
      }
      // The gateway's APIs (gRPC, HTTP) and every metrics port stay reachable; the
      // scheduler's and stages' gRPC and data ports do not.
      const std::set<std::string> want_open = component == "gateway"
                                                  ? std::set<std::string>{"grpc", "http", "metrics"}
                                                  : std::set<std::string>{"metrics"};
      EXPECT_EQ(open, want_open) << wname;
    }
  }
  EXPECT_TRUE(OfKind(RenderChart(helm_render, "--set networkPolicy.enabled=false", TempDir() + "/np.json"),
                     "NetworkPolicy")
                  .empty());
}

// A randomly initialised PPSD head for stories260K split in `n` stages.
std::string PpsdHead(const std::string& model_path, int n) {
  const std::string dir = TempDir() + "/deploy_ppsd" + std::to_string(n);
  auto model = OpenModel(model_path);
  HeadConfig s;
  s.method = DraftMethod::kPpsdLayer;
  s.exit_layer = EvenSplit(model->config().n_layers, n)[1];
  WriteRandomDraftHead(dir, s, model->config(), /*seed=*/3, model.get());
  return dir;
}

TEST(Deploy, EveryReferencedMetricIsExposed) {
  const std::string model = SharedModelPath("stories260K/stories260K.bin");
  if (model.empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  auto stack = StartStack(model, 2,
                          {"--ppsd-head", PpsdHead(model, 2), "--spec-policy", "always",
                           "--allow-oracle", "true"});
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};

  // Plain and speculative requests through the gateway, so every histogram
  // has samples.
  std::vector<int32_t> reference;
  for (v1::DecodingPolicy policy : {v1::DECODING_POLICY_AUTOREGRESSIVE, v1::DECODING_POLICY_PPSD}) {
    v1::GenerateRequest req;
    for (int32_t id : prompt) req.mutable_token_ids()->add_ids(id);
    req.set_max_tokens(24);
    req.set_ignore_eos(true);
    req.set_policy(policy);
    const Streamed got = StreamOnce(stack->channel(), req, 60s);
    ASSERT_TRUE(got.status.ok()) << v1::DecodingPolicy_Name(policy) << ": " << got.status.error_message();
    if (reference.empty()) reference = got.tokens;
  }
  // One rejected request: the failure counter gets its first series.
  {
    v1::GenerateRequest bad;
    bad.mutable_token_ids()->add_ids(1 << 20);
    bad.set_max_tokens(4);
    ASSERT_EQ(StreamOnce(stack->channel(), bad, 30s).status.error_code(), grpc::INVALID_ARGUMENT);
  }
  // The oracle at full acceptance (scheduler's internal API), so accepted
  // drafts by position are exposed too.
  {
    auto stub = internal::Scheduler::NewStub(stack->scheduler_channel());
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 60s);
    internal::SubmitRequest req;
    req.mutable_prompt()->Add(prompt.begin(), prompt.end());
    req.set_max_tokens(static_cast<int>(reference.size()));
    req.set_policy(v1::DECODING_POLICY_PPSD);
    req.mutable_oracle()->set_alpha(1.0);
    req.mutable_oracle()->mutable_reference()->Add(reference.begin(), reference.end());
    auto reader = stub->Submit(&ctx, req);
    internal::SubmitEvent e;
    while (reader->Read(&e)) {
    }
    const grpc::Status st = reader->Finish();
    ASSERT_TRUE(st.ok()) << st.error_message();
  }

  // Scrape every process: gateway, scheduler, stages.
  std::vector<std::pair<std::string, int>> targets = {
      {"gateway", stack->ports["gateway"]["metrics"].get<int>()},
      {"scheduler", stack->ports["scheduler"]["metrics"].get<int>()}};
  for (const auto& stage : stack->ports["stages"]) {
    targets.push_back({"stage", stage["metrics"].get<int>()});
  }
  std::set<std::string> exposed;
  for (const auto& [what, port] : targets) {
    const std::string text = ScrapeMetrics(port);
    ASSERT_FALSE(text.empty()) << what << " /metrics on port " << port;
    const auto names = ExposedNames(text);
    exposed.insert(names.begin(), names.end());
  }
  ASSERT_GT(exposed.count("specline_stage_step_seconds_bucket"), 0u);
  ASSERT_GT(exposed.count("specline_spec_decode_num_accepted_tokens_per_pos_total"), 0u);

  const std::set<std::string> rule_refs = MetricRefs(RulesText());
  std::set<std::string> dash_refs;
  for (const std::string& e : DashboardExprs(Dashboard())) {
    const auto refs = MetricRefs(e);
    dash_refs.insert(refs.begin(), refs.end());
  }
  EXPECT_GE(rule_refs.size(), 10u);
  EXPECT_GE(dash_refs.size(), 25u);
  for (const std::string& name : rule_refs) {
    EXPECT_TRUE(exposed.count(name)) << "rules refer to " << name << ", which no process exposes";
  }
  for (const std::string& name : dash_refs) {
    EXPECT_TRUE(exposed.count(name)) << "dashboard refers to " << name << ", which no process exposes";
  }
}

}  // namespace
}  // namespace specline::testing
