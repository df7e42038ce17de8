// The HTML report: one file, inline CSS and SVG drawn here (no scripts, no
// external resources), so it opens offline and in headless browsers.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "loadtest/report.h"

namespace specline::loadtest {
namespace {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;
  bool markers = false;
};

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Num(double v) {
  char buf[32];
  if (v != 0 && (std::fabs(v) >= 1e5 || std::fabs(v) < 1e-2)) {
    std::snprintf(buf, sizeof buf, "%.2g", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.4g", v);
  }
  return buf;
}

// "Nice" tick step for a range: 1, 2 or 5 times a power of ten.
double TickStep(double range) {
  if (range <= 0) return 1;
  const double raw = range / 5;
  const double p = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

// A line chart with axes, ticks, labels and a legend.
std::string Chart(const std::string& title, const std::string& xlabel, const std::string& ylabel,
                  const std::vector<Series>& series) {
  const double W = 560, H = 320, L = 64, R = 16, T = 30, B = 46;
  double x0 = 0, x1 = 0, y0 = 0, y1 = 0;
  bool any = false;
  for (const Series& s : series)
    for (const auto& [x, y] : s.points) {
      if (!any) { x0 = x1 = x; y1 = y; }
      any = true;
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y1 = std::max(y1, y);
    }
  x0 = std::min(x0, 0.0);
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) y1 = y0 + 1;
  const double xs = TickStep(x1 - x0), ys = TickStep(y1 - y0);
  x1 = std::ceil(x1 / xs) * xs;
  y1 = std::ceil(y1 / ys) * ys;
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B); };
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" viewBox=\"0 0 " << W << " " << H << "\" class=\"chart\">\n";
  o << "<text x=\"" << W / 2 << "\" y=\"18\" text-anchor=\"middle\" class=\"title\">" << Escape(title)
    << "</text>\n";
  for (double x = x0; x <= x1 + xs / 2; x += xs) {
    o << "<line x1=\"" << px(x) << "\" x2=\"" << px(x) << "\" y1=\"" << T << "\" y2=\"" << H - B
      << "\" class=\"grid\"/><text x=\"" << px(x) << "\" y=\"" << H - B + 16
      << "\" text-anchor=\"middle\">" << Num(x) << "</text>\n";
  }
  for (double y = y0; y <= y1 + ys / 2; y += ys) {
    o << "<line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << py(y) << "\" y2=\"" << py(y)
      << "\" class=\"grid\"/><text x=\"" << L - 6 << "\" y=\"" << py(y) + 4
      << "\" text-anchor=\"end\">" << Num(y) << "</text>\n";
  }
  o << "<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << W - L - R << "\" height=\""
    << H - T - B << "\" class=\"frame\"/>\n";
  o << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - 8 << "\" text-anchor=\"middle\">"
    << Escape(xlabel) << "</text>\n";
  o << "<text transform=\"translate(14 " << (T + H - B) / 2
    << ") rotate(-90)\" text-anchor=\"middle\">" << Escape(ylabel) << "</text>\n";
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& s = series[i];
    const char* color = kColors[i % (sizeof kColors / sizeof kColors[0])];
    if (!s.points.empty()) {
      o << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" points=\"";
      for (const auto& [x, y] : s.points) o << px(x) << "," << py(y) << " ";
      o << "\"/>\n";
      if (s.markers)
        for (const auto& [x, y] : s.points)
          o << "<circle cx=\"" << px(x) << "\" cy=\"" << py(y) << "\" r=\"3\" fill=\"" << color
            << "\"/>\n";
    }
    const double ly = T + 14 + 16 * static_cast<double>(i);
    o << "<rect x=\"" << L + 10 << "\" y=\"" << ly - 9 << "\" width=\"12\" height=\"10\" fill=\""
      << color << "\"/><text x=\"" << L + 28 << "\" y=\"" << ly << "\">" << Escape(s.name)
      << "</text>\n";
  }
  if (!any)
    o << "<text x=\"" << W / 2 << "\" y=\"" << H / 2 << "\" text-anchor=\"middle\">no data</text>\n";
  o << "</svg>\n";
  return o.str();
}

// Empirical CDF in milliseconds, thinned to at most ~400 points.
Series Cdf(const std::string& name, std::vector<double> v) {
  Series s{name, {}, false};
  std::sort(v.begin(), v.end());
  const size_t step = std::max<size_t>(1, v.size() / 400);
  for (size_t i = 0; i < v.size(); i += step)
    s.points.push_back({v[i] * 1e3, static_cast<double>(i + 1) / static_cast<double>(v.size())});
  if (!v.empty()) s.points.push_back({v.back() * 1e3, 1.0});
  return s;
}

std::string CdfCharts(const RunReport& run) {
  std::vector<double> ttft, tpot, itl, e2e;
  for (const RequestRecord& r : run.records) {
    if (!r.ok) continue;
    if (r.output_tokens > 0) ttft.push_back(r.ttft);
    if (r.output_tokens > 1) tpot.push_back(r.tpot);
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
    e2e.push_back(r.e2e);
  }
  return Chart("TTFT CDF", "ms", "fraction of requests", {Cdf("TTFT", ttft)}) +
         Chart("TPOT CDF", "ms", "fraction of requests", {Cdf("TPOT", tpot)}) +
         Chart("ITL CDF", "ms", "fraction of gaps", {Cdf("ITL", itl)}) +
         Chart("e2e latency CDF", "ms", "fraction of requests", {Cdf("e2e", e2e)});
}

std::string SeriesCharts(const RunReport& run) {
  Series in_flight{"requests in flight", {}, true}, tokens{"tokens/s", {}, true};
  for (size_t i = 0; i < run.series.in_flight.size(); ++i) {
    in_flight.points.push_back({static_cast<double>(i), run.series.in_flight[i]});
    tokens.points.push_back({static_cast<double>(i), run.series.tokens_per_second[i]});
  }
  return Chart("Requests in flight (per-second mean)", "seconds since start", "requests", {in_flight}) +
         Chart("Output tokens per second", "seconds since start", "tokens/s", {tokens});
}

std::string SummaryTable(const RunReport& run) {
  const Summary& s = run.summary;
  std::ostringstream o;
  o << "<p>" << s.sent << " requests sent, " << s.completed << " ok, " << s.failed
    << " failed in " << Num(s.duration) << " s; throughput " << Num(s.request_throughput)
    << " req/s, " << Num(s.output_token_throughput) << " output tok/s; goodput "
    << Num(s.goodput) << " req/s (" << Num(100 * s.goodput_fraction)
    << "% met the SLOs); max in flight " << s.max_in_flight << ".</p>\n";
  o << "<table><tr><th>ms</th><th>mean</th><th>p50</th><th>p90</th><th>p95</th><th>p99</th>"
       "<th>max</th><th>count</th></tr>\n";
  const std::pair<const char*, const Distribution*> rows[] = {
      {"TTFT", &s.ttft}, {"TPOT", &s.tpot}, {"ITL", &s.itl}, {"e2e", &s.e2e}};
  for (const auto& [name, d] : rows)
    o << "<tr><td>" << name << "</td><td>" << Num(d->mean * 1e3) << "</td><td>" << Num(d->p50 * 1e3)
      << "</td><td>" << Num(d->p90 * 1e3) << "</td><td>" << Num(d->p95 * 1e3) << "</td><td>"
      << Num(d->p99 * 1e3) << "</td><td>" << Num(d->max * 1e3) << "</td><td>" << d->count
      << "</td></tr>\n";
  o << "</table>\n";
  for (const auto& [code, n] : s.errors)
    o << "<p>error " << Escape(code) << ": " << n << " (e.g. &quot;"
      << Escape(s.error_examples.at(code)) << "&quot;)</p>\n";
  if (s.spec.num_draft_tokens > 0)
    o << "<p>speculation: " << s.spec.num_drafts << " drafts, " << s.spec.num_draft_tokens
      << " draft tokens, " << s.spec.num_accepted_tokens << " accepted, " << s.spec.num_flushes
      << " flushes; acceptance rate " << Num(s.spec.acceptance_rate) << ", mean accepted length "
      << Num(s.spec.mean_accepted_length) << "</p>\n";
  return o.str();
}

std::string SweepChart(const Report& report) {
  Series ttft50{"TTFT p50", {}, true}, ttft99{"TTFT p99", {}, true}, tpot50{"TPOT p50", {}, true},
      tpot99{"TPOT p99", {}, true};
  std::vector<const RunReport*> runs;
  for (const RunReport& r : report.runs) runs.push_back(&r);
  std::sort(runs.begin(), runs.end(), [](const RunReport* a, const RunReport* b) {
    return a->summary.request_throughput < b->summary.request_throughput;
  });
  for (const RunReport* r : runs) {
    const double x = r->summary.request_throughput;
    ttft50.points.push_back({x, r->summary.ttft.p50 * 1e3});
    ttft99.points.push_back({x, r->summary.ttft.p99 * 1e3});
    tpot50.points.push_back({x, r->summary.tpot.p50 * 1e3});
    tpot99.points.push_back({x, r->summary.tpot.p99 * 1e3});
  }
  return Chart("Latency vs throughput", "achieved throughput (req/s)", "ms",
               {ttft50, ttft99, tpot50, tpot99});
}

}  // namespace

std::string RenderHtml(const Report& report) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>specline load test</title>\n"
       "<style>body{font-family:sans-serif;margin:24px;color:#222}"
       "svg.chart{margin:6px;background:#fff;border:1px solid #ddd}"
       "svg text{font-size:11px;fill:#333}svg text.title{font-size:13px;font-weight:bold}"
       ".grid{stroke:#eee}.frame{fill:none;stroke:#888}"
       "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
       "pre{background:#f6f6f6;padding:8px}</style></head><body>\n";
  o << "<h1>specline load test</h1>\n<pre>" << Escape(report.config.dump(1)) << "</pre>\n";
  if (report.slo.ttft > 0 || report.slo.tpot > 0)
    o << "<p>SLOs: TTFT &le; " << Num(report.slo.ttft * 1e3) << " ms, TPOT &le; "
      << Num(report.slo.tpot * 1e3) << " ms (0 = none)</p>\n";
  if (report.runs.size() > 1) o << "<h2>Sweep</h2>\n" << SweepChart(report);
  if (report.searched)
    o << "<p>Highest rate meeting the SLOs: <b>" << Num(report.search.max_rate) << " req/s</b></p>\n";
  for (const RunReport& run : report.runs) {
    o << "<h2>" << Escape(run.label) << "</h2>\n" << SummaryTable(run) << "<div>\n"
      << CdfCharts(run) << SeriesCharts(run) << "</div>\n";
  }
  o << "</body></html>\n";
  return o.str();
}

void WriteHtml(const std::string& path, const Report& report) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("cannot write " + path);
  f << RenderHtml(report);
}

}  // namespace specline::loadtest
