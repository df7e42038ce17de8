// Parses the public API's request messages from their raw bytes, so that a
// malformed request gets INVALID_ARGUMENT naming what is wrong instead of
// gRPC's INTERNAL with an empty message (what a generated handler returns
// when deserialization fails), and so that invalid UTF-8 is reported to the
// client rather than logged by protobuf on every request.
#pragma once

#include <string_view>

#include <google/protobuf/message.h>
#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"

namespace specline {

// INVALID_ARGUMENT naming the field ("messages[1].content: not valid
// UTF-8") or the message type when the bytes are not a valid message.
absl::Status ParseRequestBytes(std::string_view bytes, google::protobuf::Message* out);
absl::Status ParseRequestBuffer(const grpc::ByteBuffer& buffer, google::protobuf::Message* out);

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code
// points past U+10FFFF): proto3's rule for string fields.
bool IsValidUtf8(std::string_view s);

}  // namespace specline
