// Anthropic's Messages API on the HTTP port: POST /v1/messages (streamed or
// not) and POST /v1/messages/count_tokens. A request is translated into the
// OpenAI chat body (messages_request.h) and then runs the same pipeline as
// the OpenAI API (request_pipeline.h: authentication, with x-api-key;
// parsing and validation; the model's template and tools), with its errors
// in Anthropic's shape (anthropic_errors.h; the route table sets it). The anthropic-version header
// is accepted whatever its value: the API has had one version, 2023-06-01.
#pragma once

#include "services/anthropic/messages_request.h"
#include "services/openai/http_exchange.h"
#include "services/openai/request_pipeline.h"

namespace specline::anthropic {

class MessagesEndpoints {
 public:
  explicit MessagesEndpoints(const openai::RequestPipeline& pipeline) : pipeline_(pipeline) {}

  void Messages(openai::HttpExchange& x) const;
  void CountTokens(openai::HttpExchange& x) const;

 private:
  // The body read, translated, parsed, its model checked and its tools
  // applied; false after answering an error.
  bool Read(openai::HttpExchange& x, bool count_only, MessagesRequest* request,
            openai::ParsedRequest* parsed, std::string* principal, tool_calls::Syntax* parse_with) const;

  const openai::RequestPipeline& pipeline_;
};

}  // namespace specline::anthropic
