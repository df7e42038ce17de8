// Drafters of pipeline speculation: what proposes the next token of a
// sequence while its predecessors are still in the pipeline.
//
// The engine gathers a DraftJob under its lock (the chain, the taps the
// drafter still needs), runs Drafter::Propose on the driver thread without
// the lock, and keeps the draft only if the sequence did not move meanwhile
// (same epoch, same chain end). Drafters keep per-sequence state (KV caches
// of the PPSD layer head and of the SPD module) that only the driver thread
// touches; it is rolled back implicitly, like the stages' caches, because
// every call starts at the sequence's `fed` position.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cpu/thread_pool.h"
#include "model/drafters/oracle_drafter.h"
#include "model/formats/head_file.h"
#include "model/formats/model_source.h"
#include "scheduler/sequence.h"
#include "scheduler/spec_state.h"

namespace specline {
class PpsdHead;
class TrainingFreeDrafter;
class SpdModule;
}  // namespace specline

namespace specline::scheduler {

struct DraftJob {
  uint64_t seq_id = 0;
  uint32_t epoch = 0;
  int32_t end = 0;    // chain length when gathered; the draft is for position `end`
  int32_t verified = 0;  // verified tokens then; positions < verified - 1 have left the pipeline
  int32_t first = 0;  // rows [first, end) carry taps (first = the sequence's fed)
  int prompt_len = 0;
  int32_t vocab_size = 0;
  std::vector<int32_t> chain;  // tokens of positions [0, end)
  // The sequence's cache scope: a drafter that learns across requests
  // drafts only from what requests of this scope taught it.
  std::string cache_scope;
  SamplingParams sampling;
  // The grammar's mask at position `end` (structured output; empty = every
  // token allowed): a sampled draft is drawn from q restricted to it.
  std::vector<uint32_t> allowed;
  std::vector<std::map<int, std::vector<float>>> taps;  // rows [first, end)
  Rng rng{0};                   // the sequence's draft rng; written back
  OracleDrafter* oracle = nullptr;  // set for oracle sequences
  const std::vector<int32_t>* reference = nullptr;
  // Results.
  bool none = false;  // the drafter has no guess this time (no draft is sent)
  DraftToken draft;
  const char* source = nullptr;  // where the draft came from, when the drafter says
  int32_t fed = 0;  // the new `fed`
  absl::Status status;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  // Tap indices to request on every micro-batch that carries the sequence.
  virtual std::vector<int> TapLayers() const = 0;
  // Under the engine lock: are the features of the newest chain token
  // there? `verified` tokens precede the chain's drafts.
  virtual bool Ready(const SpecState& sp, int32_t verified) const = 0;
  // Driver thread, no lock. Sets job.draft and job.fed, or job.status.
  virtual void Propose(DraftJob& job) = 0;
  // Driver thread: the sequence ended.
  virtual void Release(uint64_t /*seq_id*/) {}
  // A drafter that learns from the target's outputs (Token Recycling) asks
  // for the logits of every verified row; Observe gets them under the
  // engine lock, with the sequence (its cache scope) and the row's input
  // token.
  virtual bool WantsLogits() const { return false; }
  virtual void Observe(const Sequence& /*s*/, int32_t /*input_token*/,
                       std::span<const float> /*logits*/) {}
};

// The draft a drafter's logits give: greedy requests take the argmax (a
// point mass); sampled ones draw from q = Warp(logits) and keep q for the
// verifier.
DraftToken DraftFromLogits(std::span<const float> logits, const SamplingParams& sampling,
                           const SamplingContext& ctx, Rng& rng);

// The oracle under a mode's timing: PPSD waits for tap E of the newest
// token (exit_layer > 0); SPD (exit_layer 0) drafts at once.
std::unique_ptr<Drafter> MakeOracleDrafter(int exit_layer);
// PPSD early-exit head (norm or one-layer).
std::unique_ptr<Drafter> MakePpsdDrafter(std::shared_ptr<const DraftHead> head,
                                         std::shared_ptr<kernels::ThreadPool> pool,
                                         int kv_block_size, int kv_capacity_tokens);
// The training-free drafter (prompt lookup, then Token Recycling) under
// SPD's timing: it drafts at once and needs no taps. Shared by every
// sequence, as its matrix is.
std::unique_ptr<Drafter> MakeTrainingFreePipelineDrafter(
    std::shared_ptr<TrainingFreeDrafter> drafter);
// SPD speculation module.
std::unique_ptr<Drafter> MakeSpdDrafter(std::shared_ptr<const DraftHead> head,
                                        std::shared_ptr<const ModelSource> base,
                                        std::shared_ptr<kernels::ThreadPool> pool,
                                        int kv_block_size, int kv_capacity_tokens);

}  // namespace specline::scheduler
