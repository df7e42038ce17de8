#include "stage_worker/stage_metrics.h"

#include <stdexcept>

namespace specline {

StageMetrics::StageMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  step_ = &prometheus::BuildHistogram()
               .Name("specline_stage_step_seconds")
               .Help("Wall time a stage spends running one micro-batch")
               .Register(*registry_);
  batches_ = &prometheus::BuildCounter()
                  .Name("specline_stage_batches_total")
                  .Help("Micro-batches a stage processed")
                  .Register(*registry_);
  slots_ = &prometheus::BuildCounter()
                .Name("specline_stage_slots_total")
                .Help("Slots (token positions) a stage processed")
                .Register(*registry_);
  queue_depth_ = &prometheus::BuildGauge()
                      .Name("specline_stage_queue_depth")
                      .Help("Micro-batches waiting in the stage's inbox")
                      .Register(*registry_);
  kv_free_ = &prometheus::BuildGauge()
                  .Name("specline_stage_kv_free_tokens")
                  .Help("Free KV cache positions of the stage")
                  .Register(*registry_);
  kv_cached_ = &prometheus::BuildGauge()
                    .Name("specline_stage_kv_cached_tokens")
                    .Help("KV positions of the stage in blocks cached under a prefix key")
                    .Register(*registry_);
}

void StageMetrics::KvGauges::Set() const {
  const StageStats s = runner->Stats();
  free->Set(static_cast<double>(s.kv_free_tokens));
  cached->Set(static_cast<double>(s.kv_cached_tokens));
}

void StageMetrics::Attach(StageRunner& runner) {
  // Finer than Prometheus' defaults at the low end: a decode step of a
  // small model on one stage takes well under a millisecond.
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1};
  const prometheus::Labels labels = {{"stage", std::to_string(runner.stage())}};
  auto& step = step_->Add(labels, kBuckets);
  auto& batches = batches_->Add(labels);
  auto& slots = slots_->Add(labels);
  auto& depth = queue_depth_->Add(labels);
  const KvGauges kv{&runner, &kv_free_->Add(labels), &kv_cached_->Add(labels)};
  kv.Set();
  kv_gauges_.push_back(kv);

  runner.set_observer([&, kv, r = &runner](const internal::MicroBatch& batch, double seconds) {
    step.Observe(seconds);
    batches.Increment();
    slots.Increment(batch.seq_ids_size());
    depth.Set(static_cast<double>(r->queue_depth()));
    kv.Set();
  });
}

class StageMetrics::FreshGauges : public prometheus::Collectable {
 public:
  explicit FreshGauges(StageMetrics& m) : m_(m) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    m_.Refresh();
    return m_.registry_->Collect();
  }

 private:
  StageMetrics& m_;
};

void StageMetrics::Refresh() {
  for (const KvGauges& kv : kv_gauges_) kv.Set();
}

int StageMetrics::Serve(const std::string& host, int port) {
  server_ = std::make_unique<MetricsServer>(host, port);
  fresh_ = std::make_shared<FreshGauges>(*this);
  server_->Register(fresh_);
  return server_->port();
}

}  // namespace specline
