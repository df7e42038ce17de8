// The three outputs of a load test: a console table, a JSON file with every
// number and per-request record, and a self-contained HTML report (inline
// SVG charts, no external resources).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadtest/search.h"
#include "loadtest/stats.h"

namespace specline::loadtest {

// One run at one load point (a single run, or one rate of a sweep).
struct RunReport {
  std::string label;        // e.g. "rate 4 req/s" or "concurrency 8"
  double offered_rate = 0;  // open loop; 0 for closed loop
  int concurrency = 0;      // closed loop
  Summary summary;
  TimeSeries series;
  std::vector<RequestRecord> records;
};

struct Report {
  nlohmann::json config;  // the command-line settings, echoed
  Slo slo;
  std::vector<RunReport> runs;
  bool searched = false;  // --find-max ran
  SearchResult search;
};

void PrintTable(std::ostream& out, const Report& report);
nlohmann::json ToJson(const Report& report);
void WriteJson(const std::string& path, const Report& report);
std::string RenderHtml(const Report& report);
void WriteHtml(const std::string& path, const Report& report);

}  // namespace specline::loadtest
