// Engine: automatic prefix caching (docs/prefix_caching.md). The engine
// decides every match, publication and eviction and sends them to all the
// stages in the next micro-batch, so the stages' caches always equal
// `prefix_`. The rule that spares copy-on-write: only final blocks (the
// prompt's, and verified tokens' but the newest) are shared, and a match
// stops short of the prompt's last token, so every position a sequence
// writes (its prompt's rest, its tokens, drafts, and rollbacks to them)
// lies in blocks of its own.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "scheduler/engine.h"
#include "spdlog/spdlog.h"

namespace specline::scheduler {

bool Engine::ReserveKvLocked(Sequence& s) {
  Sequence::Prefix& p = s.prefix;
  const int bs = budget_.block_size();
  const std::span<const int32_t> prompt = std::span(s.tokens).first(s.prompt_len);
  if (!p.keyed) {
    p.keyed = true;
    p.keys.clear();
    const std::optional<RowModel> rows = s.policy->PromptKvModel(s);
    p.cacheable = options_.prefix_caching && rows.has_value();
    if (p.cacheable) {
      p.salt = PrefixCache::Salt(model_path(), rows->weight_set, rows->adapter, s.cache_scope);
      p.weight_set = rows->weight_set;
      p.keys = prefix_.BlockKeys(prompt, s.prompt_len / bs, p.salt);
    }
  }
  // The last prompt token is always computed: its output gives the first
  // token's logits.
  const int matched = p.cacheable ? prefix_.Match(p.keys, prompt, p.salt, (s.prompt_len - 1) / bs)
                                  : 0;
  const std::span<const uint64_t> shared = std::span(p.keys).first(matched);
  prefix_.Ref(shared);
  const int64_t need = s.kv_blocks - matched;
  const int64_t missing = need - budget_.free_blocks();
  if (missing > prefix_.evictable_blocks()) {
    EvictLocked(prefix_.Unref(shared));  // nothing: the keys matched, so none is forgotten
    return false;
  }
  if (missing > 0) EvictLocked(prefix_.EvictLru(missing));
  budget_.TryReserve(need);  // fits: checked above
  s.kv_reserved = need;
  p.held = matched;
  if (p.cacheable) {
    prefix_queries_ += s.prompt_len;
    prefix_hits_ += static_cast<uint64_t>(matched) * bs;
    metrics_->prefix_cache_queries->Increment(s.prompt_len);
    metrics_->prefix_cache_hits->Increment(static_cast<double>(matched) * bs);
  }
  if (matched > 0) {
    internal::KvAttach& a = *kv_log_.emplace_back().mutable_attach();
    a.set_seq_id(s.id);
    a.set_weight_set(p.weight_set);
    a.mutable_keys()->Add(shared.begin(), shared.end());
    p.attached = true;
    p.cached_tokens = matched * bs;
    p.computed = matched * bs;
    s.cached = matched * bs;
  }
  return true;
}

// A block is final, and can be shared, once every stage computed it and no
// rollback can reach it: prompt positions, and the positions of verified
// tokens but the newest (whose KV the next input writes; a flush rewinds to
// it at most). So with `computed_end` positions back from the stages, the
// final ones are [0, min(computed_end, max(prompt, verified - 1))). A block
// whose content another sequence cached first (sequences admitted together
// that share their first blocks) is swapped for that cached block and its
// own copy freed (KvAdopt), so the chain of keys stays whole and the
// sequence's later blocks are published too: the next turn of each such
// conversation finds its whole history. Multi-turn chats resend the
// replies, so verified tokens are worth caching too.
void Engine::PublishFinalBlocksLocked(Sequence& s, int32_t computed_end) {
  Sequence::Prefix& p = s.prefix;
  p.computed = std::max(p.computed, computed_end);
  if (s.finished() || !p.cacheable || !p.publishing) return;
  const int bs = budget_.block_size();
  const auto verified = static_cast<int32_t>(s.tokens.size());
  const int32_t final_end = std::min(p.computed, std::max(s.prompt_len, verified - 1));
  const int32_t blocks = final_end / bs;
  if (p.held >= blocks) return;
  while (static_cast<int32_t>(p.keys.size()) < blocks) {  // verified tokens' blocks
    const auto i = static_cast<int32_t>(p.keys.size());
    p.keys.push_back(PrefixCache::BlockKey(i == 0 ? p.salt : p.keys.back(),
                                           std::span(s.tokens).subspan(int64_t{i} * bs, bs)));
  }
  int32_t run = p.held;  // first block of the publication being gathered
  const auto end_run = [&] {
    if (p.held == run) return;
    internal::KvPublish& m = *kv_log_.emplace_back().mutable_publish();
    m.set_seq_id(s.id);
    m.set_weight_set(p.weight_set);
    m.set_first_block(run);
    m.mutable_keys()->Add(p.keys.begin() + run, p.keys.begin() + p.held);
  };
  while (p.held < blocks) {
    const uint64_t key = p.keys[p.held];
    if (prefix_.Contains(key)) {
      end_run();
      prefix_.Ref(std::span(p.keys).subspan(p.held, 1));
      budget_.Return(1);  // the sequence's own copy, freed on the stages
      internal::KvAdopt& a = *kv_log_.emplace_back().mutable_adopt();
      a.set_seq_id(s.id);
      a.set_weight_set(p.weight_set);
      a.set_block(p.held);
      a.set_key(key);
      run = p.held + 1;
    } else {
      // Only the shared scope's blocks are announced to routers.
      prefix_.Insert(p.keys, p.held, s.tokens, p.salt, p.weight_set, s.cache_scope.empty());
    }
    --s.kv_reserved;  // the block now counts as cached, not as this sequence's own
    ++p.held;
  }
  end_run();
}

void Engine::ReleasePrefixLocked(Sequence& s) {
  EvictLocked(prefix_.Unref(std::span(s.prefix.keys).first(s.prefix.held)));
  s.prefix.held = 0;
}

void Engine::LogReleaseLocked(uint64_t seq_id) {
  if (!kv_log_.empty() && kv_log_.back().op_case() == internal::KvOp::kRelease &&
      kv_log_.back().release() == seq_id) {
    return;
  }
  kv_log_.emplace_back().set_release(seq_id);
}

void Engine::EvictLocked(const std::vector<PrefixCache::Evicted>& evicted) {
  budget_.Return(static_cast<int64_t>(evicted.size()));
  for (const PrefixCache::Evicted& e : evicted) {
    // Consecutive evictions of one weight set share a log entry.
    internal::KvOp* last = kv_log_.empty() ? nullptr : &kv_log_.back();
    if (!last || last->op_case() != internal::KvOp::kEvict ||
        last->evict().weight_set() != e.weight_set) {
      last = &kv_log_.emplace_back();
      last->mutable_evict()->set_weight_set(e.weight_set);
    }
    last->mutable_evict()->add_keys(e.key);
  }
}

// A stage refused a sequence: its cache and our view disagree on that
// sequence's blocks. Fail it alone, and take every key of its chain, and
// the keys the refused entry named (the sequence may have ended meanwhile),
// out of use on every stage: evicted now, or when their other holders let
// go, so no later request attaches to a block some stage lacks.
void Engine::RefuseSequenceLocked(const internal::SequenceFault& fault) {
  std::vector<uint64_t> keys(fault.keys().begin(), fault.keys().end());
  auto it = std::find_if(running_.begin(), running_.end(),
                         [&](const auto& s) { return s->id == fault.seq_id(); });
  // Not running: ended meanwhile, or failed on an earlier stage's report.
  const std::shared_ptr<Sequence> s = it == running_.end() ? nullptr : *it;
  if (s) {
    keys.insert(keys.end(), s->prefix.keys.begin(), s->prefix.keys.end());
    s->prefix.publishing = false;
    metrics_->kv_refusals->Increment();
    ++kv_refusals_;
    spdlog::error("request {} (seq {}): {} refused it: {}", s->request_id, s->id,
                  StageName(fault.stage()), fault.error());
    FinishLocked(*s, FinishReason::kError,
                 absl::InternalError(absl::StrCat(StageName(fault.stage()),
                                                  " could not apply the KV cache decision for "
                                                  "this request (",
                                                  fault.error(), "); other requests are unaffected")),
                 StreamEvent{});
  }
  EvictLocked(prefix_.Forget(keys));
}

void Engine::WriteKvLogLocked(internal::MicroBatch& batch) {
  for (internal::KvOp& op : kv_log_) *batch.add_kv_ops() = std::move(op);
  kv_log_.clear();
}

void Engine::ClearPrefixCacheLocked(int block_size) {
  prefix_.Clear();  // tells the routers (AllBlocksCleared)
  prefix_ = PrefixCache(block_size, options_.kv_events);
  kv_log_.clear();
  // Waiting sequences (restarts) make their keys again when admitted, in
  // the new pipeline's block size.
  for (const std::shared_ptr<Sequence>& s : waiting_.All()) s->prefix = Sequence::Prefix{};
}

}  // namespace specline::scheduler
