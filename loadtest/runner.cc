#include "loadtest/runner.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "loadtest/arrivals.h"

namespace specline::loadtest {
namespace {

Clock::time_point At(Clock::time_point start, double seconds) {
  return start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<RequestRecord> RunOpen(const RunConfig& c, const std::vector<WorkItem>& items,
                                   const SendFn& send) {
  ArrivalOptions ao;
  ao.rate = c.rate;
  ao.burstiness = c.burstiness;
  ao.ramp_up = c.ramp_up;
  ao.seed = c.seed;
  const std::vector<double> times = ArrivalTimes(ao, c.requests, c.duration);
  struct Shared {
    std::mutex mu;
    std::condition_variable done;
    int in_flight = 0;
  };
  auto shared = std::make_shared<Shared>();
  std::vector<RequestRecord> records(times.size());
  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < times.size(); ++i) {
    // Absolute deadlines: a late wake-up delays this request only.
    std::this_thread::sleep_until(At(start, times[i]));
    {
      std::lock_guard<std::mutex> lock(shared->mu);
      ++shared->in_flight;
    }
    const int index = static_cast<int>(i);
    std::thread([&, shared, index] {
      RequestRecord r = send(index, items[index % items.size()], start);
      r.index = index;
      r.scheduled = times[index];
      std::lock_guard<std::mutex> lock(shared->mu);
      records[index] = std::move(r);
      if (--shared->in_flight == 0) shared->done.notify_all();
    }).detach();
  }
  std::unique_lock<std::mutex> lock(shared->mu);
  shared->done.wait(lock, [&] { return shared->in_flight == 0; });
  return records;
}

std::vector<RequestRecord> RunClosed(const RunConfig& c, const std::vector<WorkItem>& items,
                                     const SendFn& send) {
  if (c.concurrency <= 0) throw std::invalid_argument("give --rate (open loop) or --concurrency");
  if (c.requests <= 0 && c.duration <= 0)
    throw std::invalid_argument("a run needs --requests or --duration");
  std::atomic<int> next{0};
  std::mutex mu;
  std::vector<RequestRecord> records;
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < c.concurrency; ++w) {
    workers.emplace_back([&, w] {
      if (c.ramp_up > 0) std::this_thread::sleep_until(At(start, c.ramp_up * w / c.concurrency));
      for (;;) {
        if (c.duration > 0 && Since(start) >= c.duration) return;
        const int index = next.fetch_add(1);
        if (c.requests > 0 && index >= c.requests) return;
        RequestRecord r = send(index, items[index % items.size()], start);
        r.index = index;
        r.scheduled = r.start;
        std::lock_guard<std::mutex> lock(mu);
        records.push_back(std::move(r));
      }
    });
  }
  for (std::thread& t : workers) t.join();
  std::sort(records.begin(), records.end(),
            [](const RequestRecord& a, const RequestRecord& b) { return a.index < b.index; });
  return records;
}

}  // namespace

std::vector<RequestRecord> Run(const RunConfig& config, const std::vector<WorkItem>& items,
                               const SendFn& send) {
  if (items.empty()) throw std::invalid_argument("no prompts");
  return config.rate > 0 ? RunOpen(config, items, send) : RunClosed(config, items, send);
}

void RecordMessage(RequestRecord& r, Clock::time_point t0, Clock::time_point run_start,
                   Clock::time_point now, int tokens, Clock::time_point* last) {
  if (r.output_tokens == 0) {
    r.ttft = Seconds(t0, now);
  } else {
    r.itl.push_back(Seconds(*last, now));
  }
  *last = now;
  r.output_tokens += tokens;
  r.message_times.push_back(Seconds(run_start, now));
  r.message_tokens.push_back(tokens);
}

void FinishRecord(RequestRecord& r, Clock::time_point t0, Clock::time_point run_start,
                  Clock::time_point end) {
  r.end = Seconds(run_start, end);
  r.e2e = Seconds(t0, end);
  if (r.output_tokens > 1) r.tpot = (r.e2e - r.ttft) / static_cast<double>(r.output_tokens - 1);
}

}  // namespace specline::loadtest
