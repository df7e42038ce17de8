#include "scheduler/kv_event_wire.h"

#include <msgpack.hpp>

namespace specline::scheduler {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void PackKey(Packer& pk, std::string_view key) { pk.pack_str(key.size()).pack_str_body(key.data(), key.size()); }

// A map of `fields` entries (counting "type"), its "type" first.
void BeginEvent(Packer& pk, uint32_t fields, std::string_view type) {
  pk.pack_map(fields);
  PackKey(pk, "type");
  PackKey(pk, type);
}

void PackHashes(Packer& pk, std::span<const uint64_t> hashes) {
  pk.pack_array(hashes.size());
  for (uint64_t h : hashes) pk.pack_uint64(h);
}

void Pack(Packer& pk, const KvBlocksStored& e) {
  BeginEvent(pk, 8, "BlockStored");
  PackKey(pk, "block_hashes");
  PackHashes(pk, e.hashes);
  PackKey(pk, "parent_block_hash");
  if (e.parent) pk.pack_uint64(*e.parent); else pk.pack_nil();
  PackKey(pk, "token_ids");
  pk.pack_array(e.tokens.size());
  for (int32_t t : e.tokens) pk.pack_uint32(static_cast<uint32_t>(t));
  PackKey(pk, "block_size");
  pk.pack_uint32(static_cast<uint32_t>(e.block_size));
  PackKey(pk, "lora_id");
  pk.pack_nil();
  PackKey(pk, "medium");
  pk.pack_nil();
  PackKey(pk, "lora_name");
  pk.pack_nil();
}

void Pack(Packer& pk, const KvBlocksRemoved& e) {
  BeginEvent(pk, 3, "BlockRemoved");
  PackKey(pk, "block_hashes");
  PackHashes(pk, e.hashes);
  PackKey(pk, "medium");
  pk.pack_nil();
}

void Pack(Packer& pk, const KvAllBlocksCleared&) {
  BeginEvent(pk, 1, "AllBlocksCleared");
}

}  // namespace

std::string EncodeKvEventBatch(double ts, std::span<const KvEvent> events, int data_parallel_rank) {
  msgpack::sbuffer buffer;
  Packer pk(buffer);
  pk.pack_array(3);
  pk.pack_double(ts);
  pk.pack_array(events.size());
  for (const KvEvent& e : events) std::visit([&](const auto& v) { Pack(pk, v); }, e);
  pk.pack_uint32(static_cast<uint32_t>(data_parallel_rank));
  return std::string(buffer.data(), buffer.size());
}

}  // namespace specline::scheduler
