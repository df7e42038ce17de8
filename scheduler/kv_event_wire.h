// vLLM's KV event wire format (what vllm-router's kv_aware decodes): one
// MessagePack array per batch, [ts, [event, ...], data_parallel_rank],
// each event a map tagged by "type":
//   BlockStored     block_hashes, parent_block_hash, token_ids, block_size,
//                   lora_id, medium, lora_name
//   BlockRemoved    block_hashes, medium
//   AllBlocksCleared
// Hashes are unsigned integers (the prefix cache's 64-bit chained keys):
// opaque to a subscriber, which keys blocks by its own hash of token_ids
// and uses ours only to chain parents and to name removals. medium and
// lora_name are nil: the stages' KV cache is the only tier, and adapters
// are a decoding policy's, never a request's.
#pragma once

#include <span>
#include <string>

#include "scheduler/kv_events.h"

namespace specline::scheduler {

// `ts`: seconds since the Unix epoch.
std::string EncodeKvEventBatch(double ts, std::span<const KvEvent> events, int data_parallel_rank);

}  // namespace specline::scheduler
