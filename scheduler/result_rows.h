// The receiver's middle steps (Engine::HandleResult): which hidden rows of
// a returned micro-batch go back to each run's policy, and how (as logits,
// as the argmax alone, or raw); the head's outputs for them; and each
// run's RunOutput. Functions of the batch and the sequences only, so the
// engine keeps nothing but the locking and the order of the steps.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "model/runtime/output_head.h"
#include "scheduler/decoding_policy.h"
#include "scheduler/slot_run.h"
#include "specline/internal/stage.pb.h"

namespace specline::scheduler {

// The rows the head turns into outputs, gathered from one batch.
struct ResultRows {
  // Where one run's rows went: decision rows into `logit_rows` or
  // `greedy_rows` (argmax only: a greedy request without penalty needs no
  // more), auxiliary rows into `greedy_rows`, raw rows into `hidden_rows`
  // for a policy that reads them itself (DecodingPolicy::Wanted). -1: none.
  struct Run {
    int64_t logits = -1;  // first row in `logit_rows`
    int64_t greedy = -1;  // first row in `greedy_rows`
    int64_t aux = -1;     // first auxiliary row in `greedy_rows`
    int64_t hidden = -1;  // first row in `hidden_rows`
    int32_t decide = 0, n_aux = 0, n_hidden = 0;
  };
  std::vector<float> logit_rows, greedy_rows, hidden_rows;  // dim floats a row
  std::vector<Run> runs;  // one per run sent, in order
};

// Gathers the rows each run's policy wants back from `batch`, which came
// back for `runs` (the rows a stage dropped as stale are gone from it).
// Skips the rows that yield no token, and sequences that ended or were
// flushed while the batch was out. Reads the sequences: engine lock held.
ResultRows RouteResultRows(const internal::MicroBatch& batch, std::span<const SlotRun> runs,
                           int dim);

// What the head made of the rows: vocab logits per logit row, the argmax
// per greedy row. Without the engine lock (the receiver's heavy step).
struct HeadOutputs {
  int vocab = 0;
  std::vector<float> logits;
  std::vector<int32_t> greedy;
};
HeadOutputs RunHead(LogitsHead& head, const ResultRows& rows, int dim);

// Run `i`'s output for its policy, or nullopt when it has none to decide
// now (nothing came back for it, or it was flushed while the head ran).
// Spans into `rows` and `head`. Engine lock held.
std::optional<RunOutput> RunOutputOf(const ResultRows& rows, const HeadOutputs& head, size_t i,
                                     const SlotRun& run, int dim);

}  // namespace specline::scheduler
