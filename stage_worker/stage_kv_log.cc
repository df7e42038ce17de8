// StageRunner: the KV log (MicroBatch.kv_ops, docs/prefix_caching.md). The
// scheduler decided every entry against its view of the caches, in order;
// replaying them in the same order keeps this stage's caches equal to that
// view. Should they still disagree on a sequence's blocks (a bug), that
// sequence alone is refused: its KV is freed here, its slots are dropped
// from this and later batches, and MicroBatch.seq_faults tells later
// stages and the scheduler, which fails that request and no other.
#include <string>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "stage_worker/stage_runner.h"

namespace specline {
namespace {

std::span<const uint64_t> Keys(const google::protobuf::RepeatedField<uint64_t>& keys) {
  return {keys.data(), static_cast<size_t>(keys.size())};
}

}  // namespace

void StageRunner::ReleaseSequenceLocked(uint64_t seq) {
  slice_.Release(seq);
  for (const WeightSet& w : weight_sets_) w.slice->Release(seq);
  sequences_.erase(seq);
  epochs_.erase(seq);
}

void StageRunner::RefuseSequenceLocked(internal::MicroBatch& batch, uint64_t seq,
                                       const std::string& why,
                                       const google::protobuf::RepeatedField<uint64_t>& keys) {
  ReleaseSequenceLocked(seq);
  refused_[seq] = why;
  ++kv_refusals_;
  internal::SequenceFault* f = batch.add_seq_faults();
  f->set_seq_id(seq);
  f->set_stage(stage_);
  f->set_error(why);
  *f->mutable_keys() = keys;
  spdlog::warn("stage {}: batch {}: refused sequence {}: {}", stage_, batch.batch_id(), seq, why);
}

void StageRunner::ApplyKvLogLocked(internal::MicroBatch& batch) {
  std::unordered_set<uint64_t> refused;  // in this batch, by any stage so far
  for (const internal::SequenceFault& f : batch.seq_faults()) refused.insert(f.seq_id());
  // A sequence refused in an earlier batch may still have entries or slots
  // in this one (sent before the scheduler heard): refuse it again, so the
  // stages after this one skip them too.
  auto refused_before = [&](uint64_t seq) {
    auto it = refused_.find(seq);
    if (it == refused_.end() || refused.count(seq)) return;
    internal::SequenceFault* f = batch.add_seq_faults();
    f->set_seq_id(seq);
    f->set_stage(stage_);
    f->set_error(it->second);
    refused.insert(seq);
  };
  for (uint64_t seq : batch.seq_ids()) refused_before(seq);
  auto apply = [&](uint64_t seq, uint32_t weight_set,
                   const google::protobuf::RepeatedField<uint64_t>& keys, auto&& op) {
    refused_before(seq);
    if (refused.count(seq)) return;
    absl::StatusOr<PagedKvCache*> kv = CacheOf(weight_set);
    absl::Status st = kv.ok() ? op(**kv) : kv.status();
    if (st.ok()) return;
    RefuseSequenceLocked(batch, seq, absl::StrCat("prefix cache: ", st.message()), keys);
    refused.insert(seq);
  };
  for (const internal::KvOp& op : batch.kv_ops()) {
    switch (op.op_case()) {
      case internal::KvOp::kRelease:
        ReleaseSequenceLocked(op.release());
        refused_.erase(op.release());
        break;
      case internal::KvOp::kPublish: {
        const internal::KvPublish& p = op.publish();
        apply(p.seq_id(), p.weight_set(), p.keys(), [&](PagedKvCache& kv) {
          return kv.Publish(p.seq_id(), p.first_block(), Keys(p.keys()));
        });
        break;
      }
      case internal::KvOp::kAttach: {
        const internal::KvAttach& a = op.attach();
        apply(a.seq_id(), a.weight_set(), a.keys(), [&](PagedKvCache& kv) {
          absl::Status st = kv.Attach(a.seq_id(), Keys(a.keys()));
          if (st.ok()) sequences_.insert(a.seq_id());
          return st;
        });
        break;
      }
      case internal::KvOp::kAdopt: {
        const internal::KvAdopt& a = op.adopt();
        google::protobuf::RepeatedField<uint64_t> key;
        key.Add(a.key());
        apply(a.seq_id(), a.weight_set(), key,
              [&](PagedKvCache& kv) { return kv.Adopt(a.seq_id(), a.block(), a.key()); });
        break;
      }
      case internal::KvOp::kEvict: {
        const internal::KvEvict& e = op.evict();
        absl::StatusOr<PagedKvCache*> kv = CacheOf(e.weight_set());
        const int unexpected = kv.ok() ? (*kv)->Evict(Keys(e.keys())) : e.keys_size();
        if (unexpected > 0) {
          // Only after a refusal (the scheduler then evicts the refused
          // sequence's keys everywhere, including where they never were).
          kv_evict_mismatches_ += unexpected;
          spdlog::debug("stage {}: batch {}: {} of {} evicted keys of weight set {} were not "
                        "cached here or still held",
                        stage_, batch.batch_id(), unexpected, e.keys_size(), e.weight_set());
        }
        break;
      }
      case internal::KvOp::OP_NOT_SET:
        break;
    }
  }
}

}  // namespace specline
