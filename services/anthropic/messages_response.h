// Anthropic's Messages answers: the whole message (not streamed) and the
// server-sent events of a streamed one, in the order Anthropic sends them:
// message_start (with the prompt's usage) and a ping, then per content
// block content_block_start, its deltas (text_delta, or input_json_delta
// for a tool_use block's input) and content_block_stop, then message_delta
// (stop_reason, stop_sequence, usage) and message_stop. Usage counts as
// Anthropic does: input_tokens are the prompt tokens not read from the
// prefix cache, cache_read_input_tokens the ones that were.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "services/openai/openai_request.h"
#include "services/tool_calls/tool_call_parser.h"
#include "specline/v1/generation.pb.h"

namespace specline::anthropic {

// How an output ended, in Anthropic's words.
struct StopReason {
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  std::string stop_string;  // the stop sequence that ended it, if one did
  bool made_calls = false;
  // end_turn, max_tokens, stop_sequence or tool_use.
  const char* Name() const;
};

nlohmann::json UsageJson(const v1::Usage& usage);

// The whole message of a non-streamed answer: its text block (when not
// empty), then one tool_use block per call.
std::string WholeMessage(const std::string& id, const std::string& model,
                         const tool_calls::ParsedText& answer, const StopReason& stop,
                         const v1::Usage& usage);

// The events of one streamed message, each "event: NAME\ndata: JSON\n\n";
// blocks are opened and closed as the content changes kind.
class MessageEvents {
 public:
  MessageEvents(std::string id, std::string model) : id_(std::move(id)), model_(std::move(model)) {}

  // message_start and a ping.
  std::string Start(const v1::Usage& prompt_usage) const;
  std::string Text(std::string_view text);
  // A tool_use block opens; its input follows as InputJson pieces.
  std::string ToolUse(const std::string& id, const std::string& name);
  std::string InputJson(std::string_view partial_json);
  // The open block's stop, message_delta and message_stop.
  std::string Finish(const StopReason& stop, const v1::Usage& usage);
  // Anthropic's error event (after the stream began).
  static std::string Error(const openai::ApiError& e);

 private:
  enum class Block { kNone, kText, kToolUse };
  std::string OpenBlock(Block kind, nlohmann::json content_block);
  std::string CloseBlock();

  std::string id_;
  std::string model_;
  Block open_ = Block::kNone;
  int index_ = -1;  // the open (or last) block's index
};

}  // namespace specline::anthropic
