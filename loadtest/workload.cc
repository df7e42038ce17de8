#include "loadtest/workload.h"

#include <algorithm>
#include <fstream>
#include <random>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "proto/policy_names.h"

namespace specline::loadtest {

std::vector<WorkItem> LoadPrompts(const std::string& path, int default_max_tokens) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read prompts file " + path);
  std::vector<WorkItem> items;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    WorkItem item;
    item.max_tokens = default_max_tokens;
    if (line[line.find_first_not_of(" \t")] == '{') {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const std::exception& e) {
        throw std::runtime_error(path + ":" + std::to_string(lineno) + ": " + e.what());
      }
      if (!j.contains("prompt") || !j["prompt"].is_string())
        throw std::runtime_error(path + ":" + std::to_string(lineno) + ": no \"prompt\" string");
      item.text = j["prompt"].get<std::string>();
      if (j.contains("max_tokens")) item.max_tokens = j["max_tokens"].get<int>();
      if (j.contains("ignore_eos")) item.ignore_eos = j["ignore_eos"].get<bool>();
    } else {
      item.text = line;
    }
    items.push_back(std::move(item));
  }
  if (items.empty()) throw std::runtime_error("no prompts in " + path);
  return items;
}

std::vector<WorkItem> SyntheticPrompts(int count, const SyntheticOptions& o) {
  if (o.dist != "fixed" && o.dist != "uniform")
    throw std::invalid_argument("--len-dist must be fixed or uniform");
  if (o.vocab_size <= 3) throw std::invalid_argument("vocabulary too small for synthetic prompts");
  std::mt19937_64 rng(o.seed);
  auto length = [&](int len) {
    if (o.dist == "fixed") return std::max(1, len);
    const int lo = std::max(1, static_cast<int>(len * (1 - o.range_ratio)));
    const int hi = std::max(lo, static_cast<int>(len * (1 + o.range_ratio)));
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  std::uniform_int_distribution<int32_t> token(3, o.vocab_size - 1);
  std::vector<WorkItem> items(std::max(count, 1));
  for (WorkItem& item : items) {
    item.ids.resize(length(o.input_len));
    for (int32_t& id : item.ids) id = token(rng);
    item.max_tokens = length(o.output_len);
    item.ignore_eos = true;
  }
  return items;
}

v1::DecodingPolicy ParsePolicy(const std::string& name) {
  const absl::StatusOr<v1::DecodingPolicy> policy = PolicyFromName(name);
  if (!policy.ok()) throw std::invalid_argument(std::string(policy.status().message()));
  return *policy;
}

v1::GenerateRequest BuildRequest(const WorkItem& item, const RequestOptions& o,
                                 const std::string& request_id) {
  v1::GenerateRequest req;
  req.set_request_id(request_id);
  if (item.ids.empty()) {
    req.set_text(item.text);
  } else {
    for (int32_t id : item.ids) req.mutable_token_ids()->add_ids(id);
  }
  if (item.max_tokens > 0) req.set_max_tokens(item.max_tokens);
  req.set_ignore_eos(item.ignore_eos);
  v1::SamplingParams* s = req.mutable_sampling();
  if (o.temperature) s->set_temperature(*o.temperature);
  if (o.top_p) s->set_top_p(*o.top_p);
  if (o.top_k) s->set_top_k(*o.top_k);
  if (o.seed) s->set_seed(*o.seed);
  req.set_policy(o.policy);
  return req;
}

}  // namespace specline::loadtest
