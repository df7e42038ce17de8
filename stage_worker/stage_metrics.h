// Prometheus metrics of the stages one process hosts, labelled stage="I".
#pragma once

#include <memory>
#include <utility>
#include <vector>
#include <string>

#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "common/metrics_server.h"
#include "stage_worker/stage_runner.h"

namespace specline {

class StageMetrics {
 public:
  StageMetrics();
  // Hooks the runner's observer to this stage's series (call before Start).
  void Attach(StageRunner& runner);
  // Serves /metrics on host:port (port 0 picks one); returns the port.
  int Serve(const std::string& host, int port);
  prometheus::Registry& registry() { return *registry_; }

 private:
  // Refreshes the KV gauges from the runners on every scrape, so they are
  // right after a Reset or while idle (not only after the next batch).
  class FreshGauges;
  void Refresh();

  std::shared_ptr<prometheus::Registry> registry_;
  // The KV gauges of each runner, refreshed at every scrape.
  struct KvGauges {
    StageRunner* runner;
    prometheus::Gauge* free;
    prometheus::Gauge* cached;
    void Set() const;
  };
  std::vector<KvGauges> kv_gauges_;
  prometheus::Family<prometheus::Histogram>* step_;
  prometheus::Family<prometheus::Counter>* batches_;
  prometheus::Family<prometheus::Counter>* slots_;
  prometheus::Family<prometheus::Gauge>* queue_depth_;
  prometheus::Family<prometheus::Gauge>* kv_free_;
  prometheus::Family<prometheus::Gauge>* kv_cached_;
  std::shared_ptr<prometheus::Collectable> fresh_;
  std::unique_ptr<MetricsServer> server_;  // last: it calls fresh_
};

}  // namespace specline
