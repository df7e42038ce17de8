// The OpenAI request fields that change how tokens are chosen beyond
// temperature and top-p, and what is reported about them:
// presence_penalty, frequency_penalty, logit_bias, and logprobs /
// top_logprobs (chat: `logprobs: true, top_logprobs: k`; completions:
// `logprobs: k`). Their ranges are OpenAI's; vocabulary bounds are the
// shared validation's (services/request_builder.cc), as for gRPC.
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "services/openai/openai_request.h"
#include "specline/v1/generation.pb.h"

namespace specline::openai {

std::optional<ApiError> ReadPenaltiesAndLogprobs(Endpoint endpoint, const nlohmann::json& body,
                                                 v1::GenerateRequest* r);

}  // namespace specline::openai
