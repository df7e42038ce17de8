// jinja_conformance: renders chat templates for the randomized conformance
// check (scripts/reference/jinja_fuzz.py). Reads JSON lines
//   {"template_path": "...", "context": {...}}  or  {"source": "...", ...}
// and writes one JSON line per input: {"output": "..."} or
// {"error": "...", "code": "INVALID_ARGUMENT"}. Parsed templates are cached
// by path, so one process renders every case.
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "model/jinja/jinja.h"

int main() {
  std::ios::sync_with_stdio(false);
  std::map<std::string, absl::StatusOr<specline::jinja::Template>> cache;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    nlohmann::ordered_json result;
    try {
      auto req = nlohmann::ordered_json::parse(line);
      std::string key, source;
      if (req.contains("template_path")) {
        key = "path:" + req["template_path"].get<std::string>();
        if (!cache.count(key)) {
          std::ifstream in(req["template_path"].get<std::string>(), std::ios::binary);
          if (!in) throw std::runtime_error("cannot open " + req["template_path"].get<std::string>());
          std::stringstream ss;
          ss << in.rdbuf();
          source = ss.str();
        }
      } else {
        source = req.at("source").get<std::string>();
        key = "src:" + source;
      }
      auto it = cache.find(key);
      if (it == cache.end()) it = cache.emplace(key, specline::jinja::Template::Parse(source)).first;
      if (!it->second.ok()) {
        result["error"] = std::string(it->second.status().message());
        result["code"] = absl::StatusCodeToString(it->second.status().code());
      } else {
        auto out = it->second->Render(req.value("context", nlohmann::ordered_json::object()));
        if (out.ok()) {
          result["output"] = *out;
        } else {
          result["error"] = std::string(out.status().message());
          result["code"] = absl::StatusCodeToString(out.status().code());
        }
      }
    } catch (const std::exception& e) {
      result["error"] = std::string("bad request: ") + e.what();
      result["code"] = "BAD_REQUEST";
    }
    std::cout << result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    std::cout.flush();
  }
  return 0;
}
