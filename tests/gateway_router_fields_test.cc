// The request fields vLLM's and SGLang's routers add to every body they
// forward (vllm-router 0.1.17: docs/routers.md), honoured or refused by
// name: skip_special_tokens, include_stop_str_in_output / no_stop_trim,
// continue_final_message, min_tokens, return_hidden_states, the reasoning
// fields; the Responses API's defaults the router writes; the render
// endpoints' JSON. The prompts and the detokenized text are checked
// against SmolLM2's own chat template and vocabulary.
#include <algorithm>
#include <chrono>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/formats/model_source.h"
#include "model/tokenizer/model_tokenizer.h"
#include "services/gateway_metrics.h"
#include "services/generation_stream.h"
#include "services/openai/openai_request.h"
#include "services/openai/render_response.h"
#include "services/openai/responses_api.h"
#include "services/request_builder.h"
#include "services/stop_matcher.h"
#include "tests/router_bodies.h"
#include "tests/test_util.h"

namespace specline::openai {
namespace {

using nlohmann::json;
using specline::testing::SmolLm2Path;
using specline::testing::UserChat;

ParsedRequest ParseOk(Endpoint e, const json& body) {
  ParsedRequest out;
  const auto error = ParseRequest(e, body.dump(), &out);
  EXPECT_FALSE(error) << body.dump() << ": " << (error ? error->message : "");
  return out;
}

// The 400's param ("" when the body was accepted).
std::string RefusedParam(Endpoint e, const json& body) {
  ParsedRequest out;
  const auto error = ParseRequest(e, body.dump(), &out);
  EXPECT_TRUE(error) << body.dump();
  if (error) {
    EXPECT_EQ(error->http_status, 400);
    EXPECT_EQ(error->message.rfind(error->param + ": ", 0), 0u) << error->message;
  }
  return error ? error->param : "";
}

// The router's bodies for `{"messages": [user "Hi"], "max_tokens": 8}` and
// `{"prompt": "Hi", "max_tokens": 8}`.
json RouterChatBody() { return specline::testing::RouterChatBody(UserChat("Hi"), 8); }
json RouterCompletionBody() { return specline::testing::RouterCompletionBody("Hi", 8); }

TEST(RouterFields, TheRoutersDefaultBodiesAreAccepted) {
  const ParsedRequest chat = ParseOk(Endpoint::kChatCompletions, RouterChatBody());
  EXPECT_FALSE(chat.request.keep_special_tokens());
  EXPECT_FALSE(chat.request.include_stop_str_in_output());
  EXPECT_FALSE(chat.request.chat().continue_final_message());
  EXPECT_FALSE(chat.request.chat().no_generation_prompt());
  EXPECT_FALSE(chat.request.logprobs().enabled());
  const ParsedRequest completion = ParseOk(Endpoint::kCompletions, RouterCompletionBody());
  EXPECT_EQ(completion.request.text(), "Hi");
  EXPECT_FALSE(completion.request.keep_special_tokens());
  // The same with the reasoning fields off: accepted, no effect.
  json body = RouterChatBody();
  body["separate_reasoning"] = false;
  body["stream_reasoning"] = false;
  body["include_reasoning"] = false;
  const ParsedRequest off = ParseOk(Endpoint::kChatCompletions, body);
  EXPECT_EQ(off.request.SerializeAsString(), chat.request.SerializeAsString());
}

TEST(RouterFields, SkipSpecialTokensAndStopStringsMap) {
  json body = RouterChatBody();
  body["skip_special_tokens"] = false;
  EXPECT_TRUE(ParseOk(Endpoint::kChatCompletions, body).request.keep_special_tokens());
  body = RouterCompletionBody();
  body["no_stop_trim"] = true;
  EXPECT_TRUE(ParseOk(Endpoint::kCompletions, body).request.include_stop_str_in_output());
  body = RouterCompletionBody();
  body["include_stop_str_in_output"] = true;
  EXPECT_TRUE(ParseOk(Endpoint::kCompletions, body).request.include_stop_str_in_output());
  body["min_tokens"] = 0;
  EXPECT_EQ(ParseOk(Endpoint::kCompletions, body).request.text(), "Hi");
}

TEST(RouterFields, WhatCannotBeHonouredIsRefusedByName) {
  auto with = [](json body, const char* name, json value) {
    body[name] = std::move(value);
    return body;
  };
  for (Endpoint e : {Endpoint::kChatCompletions, Endpoint::kCompletions}) {
    const json base = e == Endpoint::kChatCompletions ? RouterChatBody() : RouterCompletionBody();
    EXPECT_EQ(RefusedParam(e, with(base, "min_tokens", 4)), "min_tokens");
    EXPECT_EQ(RefusedParam(e, with(base, "min_tokens", -1)), "min_tokens");
    EXPECT_EQ(RefusedParam(e, with(base, "return_hidden_states", true)), "return_hidden_states");
    // Wrong types name the field too.
    for (const char* name : {"skip_special_tokens", "no_stop_trim", "include_stop_str_in_output",
                             "separate_reasoning", "stream_reasoning", "include_reasoning",
                             "return_hidden_states"}) {
      EXPECT_EQ(RefusedParam(e, with(base, name, "yes")), name);
    }
  }
  // continue_final_message is chat's: completions do not know it.
  EXPECT_EQ(RefusedParam(Endpoint::kCompletions,
                         with(RouterCompletionBody(), "continue_final_message", false)),
            "continue_final_message");
}

json ContinueBody(const std::string& partial) {
  json body = RouterChatBody();
  body["messages"] = json::array({{{"role", "user"}, {"content", "Tell me a story."}},
                                  {{"role", "assistant"}, {"content", partial}}});
  body["continue_final_message"] = true;
  return body;
}

TEST(RouterFields, ContinueFinalMessageIsCheckedAsVllmChecksIt) {
  const ParsedRequest p = ParseOk(Endpoint::kChatCompletions, ContinueBody("Once upon"));
  EXPECT_TRUE(p.request.chat().continue_final_message());
  EXPECT_TRUE(p.request.chat().no_generation_prompt());
  // add_generation_prompt: false with it is what vLLM's clients send.
  json body = ContinueBody("Once upon");
  body["add_generation_prompt"] = false;
  EXPECT_TRUE(ParseOk(Endpoint::kChatCompletions, body).request.chat().continue_final_message());
  // Both true: vLLM's 400.
  body["add_generation_prompt"] = true;
  EXPECT_EQ(RefusedParam(Endpoint::kChatCompletions, body), "continue_final_message");
  // The last message must be the assistant's, with content.
  body = RouterChatBody();
  body["continue_final_message"] = true;
  EXPECT_EQ(RefusedParam(Endpoint::kChatCompletions, body), "continue_final_message");
  body = ContinueBody("x");
  body["messages"][1]["content"] = nullptr;
  EXPECT_EQ(RefusedParam(Endpoint::kChatCompletions, body), "continue_final_message");
  body = ContinueBody("x");
  body["continue_final_message"] = 1;
  EXPECT_EQ(RefusedParam(Endpoint::kChatCompletions, body), "continue_final_message");
}

TEST(RouterFields, TheResponsesDefaultsOfTheRouterAreAccepted) {
  // vllm-router's ResponsesRequest, serialized with its defaults.
  json body = {{"input", "Hi"},
               {"background", false},
               {"parallel_tool_calls", true},
               {"service_tier", "auto"},
               {"store", true},
               {"stream", false},
               {"tool_choice", "auto"},
               {"tools", json::array()},
               {"top_logprobs", 0},
               {"truncation", "disabled"},
               {"request_id", "resp_0123456789abcdef"},
               {"priority", 0},
               {"frequency_penalty", 0.0},
               {"presence_penalty", 0.0},
               {"top_k", -1},
               {"min_p", 0.0},
               {"repetition_penalty", 1.0},
               {"max_output_tokens", 8}};
  ParsedRequest p;
  auto e = ParseResponsesRequest(body.dump(), &p);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(p.request.max_tokens(), 8);
  EXPECT_EQ(p.request.sampling().top_k(), 0);
  EXPECT_FLOAT_EQ(p.request.sampling().repetition_penalty(), 1.0f);
  body["top_k"] = 5;
  ASSERT_FALSE(ParseResponsesRequest(body.dump(), &p));
  EXPECT_EQ(p.request.sampling().top_k(), 5);
  for (const auto& [name, value] : {std::pair<const char*, json>{"priority", 1}, {"top_logprobs", 3}}) {
    json bad = body;
    bad[name] = value;
    ParsedRequest q;
    auto err = ParseResponsesRequest(bad.dump(), &q);
    ASSERT_TRUE(err) << name;
    EXPECT_EQ(err->param, name);
  }
}

// transformers' cut, on texts: after the content's last occurrence, its
// trailing whitespace kept where the template kept it.
TEST(ContinueFinalMessage, CutAfterTheContentAsTransformersDoes) {
  EXPECT_EQ(*CutAfterFinalMessage("U: hi\nA: Once upon<end>\n", "Once upon"), "U: hi\nA: Once upon");
  // Kept trailing space: kept.
  EXPECT_EQ(*CutAfterFinalMessage("A: Once upon <end>", "Once upon "), "A: Once upon ");
  // A template that trims: cut after the stripped content.
  EXPECT_EQ(*CutAfterFinalMessage("A: Once upon<end>", "  Once upon \n"), "A: Once upon");
  // The last occurrence wins (an earlier turn with the same text).
  EXPECT_EQ(*CutAfterFinalMessage("A: ok<e>U: x<e>A: ok<e>", "ok"), "A: ok<e>U: x<e>A: ok");
  // Empty content: the whole rendering, as transformers leaves it.
  EXPECT_EQ(*CutAfterFinalMessage("A: <e>", ""), "A: <e>");
  // A template that drops the content: refused, naming the field.
  absl::StatusOr<std::string> dropped = CutAfterFinalMessage("A: <e>", "Once");
  ASSERT_FALSE(dropped.ok());
  EXPECT_EQ(dropped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(dropped.status().message()).rfind("prompt.chat.continue_final_message: ", 0), 0u);
}

class SmolLm2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (SmolLm2Path().empty()) return;
    model_ = OpenModel(SmolLm2Path()).release();
    tokenizer_ = OpenTokenizerFor(*model_).release();
    served_ = new ServedModel;
    served_->tokenizer = tokenizer_;
    absl::StatusOr<std::optional<ChatTemplate>> t = ChatTemplateFor(*model_, tokenizer_);
    ASSERT_TRUE(t.ok() && t->has_value()) << "SmolLM2's GGUF carries its chat template";
    served_->chat_template = **std::move(t);
    served_->vocab_size = tokenizer_->vocab_size();
    served_->context_length = 2048;
  }
  static void TearDownTestSuite() {
    delete served_;
    delete tokenizer_;
    delete model_;
    served_ = nullptr;
  }
  void SetUp() override {
    ASSERT_FALSE(SmolLm2Path().empty()) << "SmolLM2 is fetched by scripts/setup.sh";
  }
  static PreparedRequest Prepare(const v1::GenerateRequest& r) {
    RequestRules rules;
    rules.openai = true;
    absl::StatusOr<PreparedRequest> p = PrepareRequest(r, *served_, rules);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : PreparedRequest{};
  }
  static std::vector<int32_t> PromptIds(const PreparedRequest& p) {
    return {p.submit.prompt().begin(), p.submit.prompt().end()};
  }
  static int32_t Id(const std::string& special) {
    std::vector<int32_t> ids = tokenizer_->Encode(special, false, true);
    EXPECT_EQ(ids.size(), 1u) << special;
    return ids.empty() ? -1 : ids[0];
  }
  static ModelSource* model_;
  static Tokenizer* tokenizer_;
  static ServedModel* served_;
};
ModelSource* SmolLm2::model_ = nullptr;
Tokenizer* SmolLm2::tokenizer_ = nullptr;
ServedModel* SmolLm2::served_ = nullptr;

// The prompt of continue_final_message, token for token: SmolLM2's own
// template rendered without the generation prompt, cut right after the
// assistant's partial message (no <|im_end|> after it), then encoded as
// every chat prompt is.
TEST_F(SmolLm2, ContinueFinalMessageRendersThePartialTurnOpen) {
  for (const std::string partial : {"Once upon", "Once upon a time, "}) {
    const ParsedRequest p = ParseOk(Endpoint::kChatCompletions, ContinueBody(partial));
    // The template's own rendering of the same conversation, closed turn
    // and no generation prompt.
    v1::ChatMessages closed = p.request.chat();
    closed.set_continue_final_message(false);
    closed.set_no_generation_prompt(true);
    absl::StatusOr<std::string> whole = RenderChat(closed, *served_);
    ASSERT_TRUE(whole.ok()) << whole.status();
    const size_t at = whole->rfind(partial);
    ASSERT_NE(at, std::string::npos) << *whole;
    const std::string expected = whole->substr(0, at + partial.size());
    EXPECT_EQ(expected.substr(expected.size() - partial.size()), partial);
    EXPECT_NE(whole->find("<|im_end|>", at), std::string::npos) << "the closed turn ends with <|im_end|>";
    EXPECT_EQ(expected.find("<|im_end|>", at), std::string::npos);
    EXPECT_NE(expected.find("<|im_start|>assistant\n" + partial), std::string::npos) << expected;

    absl::StatusOr<std::string> rendered = RenderChat(p.request.chat(), *served_);
    ASSERT_TRUE(rendered.ok()) << rendered.status();
    EXPECT_EQ(*rendered, expected);
    const PreparedRequest prepared = Prepare(p.request);
    EXPECT_EQ(PromptIds(prepared), tokenizer_->Encode(expected, false, true));
    // And not what a new assistant turn would be.
    ParsedRequest fresh = ParseOk(Endpoint::kChatCompletions, ContinueBody(partial));
    fresh.request.mutable_chat()->set_continue_final_message(false);
    fresh.request.mutable_chat()->set_no_generation_prompt(false);
    EXPECT_NE(PromptIds(Prepare(fresh.request)), PromptIds(prepared));
  }
  // Through the gRPC API's fields: a generation prompt with it is refused.
  v1::GenerateRequest r = ParseOk(Endpoint::kChatCompletions, ContinueBody("Once")).request;
  r.mutable_chat()->set_no_generation_prompt(false);
  RequestRules rules;
  absl::StatusOr<PreparedRequest> refused = PrepareRequest(r, *served_, rules);
  ASSERT_FALSE(refused.ok());
  std::string param;
  ToOpenAiMessage(Endpoint::kChatCompletions, std::string(refused.status().message()), &param);
  EXPECT_EQ(param, "continue_final_message");
}

// Streams `tokens` (finish STOP after the last) through the gateway's
// detokenizer as the scheduler's events would bring them, a token a time.
std::string StreamText(const ServedModel& m, const PreparedRequest& prepared,
                       const std::vector<int32_t>& tokens, v1::FinishReason finish) {
  GatewayMetrics metrics;
  GenerationStream stream(m, metrics.For(Api::kOpenAi), "req-1", prepared,
                          GenerationStream::Clock::now());
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) {
    internal::SubmitEvent event;
    event.add_tokens(tokens[i]);
    if (i + 1 == tokens.size()) event.set_finish_reason(finish);
    GenerationStream::Step step = stream.OnEvent(event);
    if (step.message) text += step.message->text();
    if (step.last) break;
  }
  return text;
}

TEST_F(SmolLm2, SpecialTokensAreKeptOnlyWhenAsked) {
  const int32_t im_start = Id("<|im_start|>");
  const int32_t im_end = Id("<|im_end|>");
  ASSERT_TRUE(tokenizer_->IsControl(im_start));
  ASSERT_NE(std::find(tokenizer_->stop_ids().begin(), tokenizer_->stop_ids().end(), im_end),
            tokenizer_->stop_ids().end());
  std::vector<int32_t> out = tokenizer_->Encode("Hello there", false, false);
  out.push_back(im_start);
  for (int32_t t : tokenizer_->Encode("user", false, false)) out.push_back(t);
  out.push_back(im_end);  // the stop token that ends the output

  json body = RouterCompletionBody();
  const PreparedRequest skip = Prepare(ParseOk(Endpoint::kCompletions, body).request);
  EXPECT_EQ(StreamText(*served_, skip, out, v1::FINISH_REASON_STOP), "Hello thereuser");

  body["skip_special_tokens"] = false;
  const PreparedRequest keep = Prepare(ParseOk(Endpoint::kCompletions, body).request);
  EXPECT_TRUE(keep.keep_special_tokens);
  // The stop token stays out, as vLLM leaves it out.
  EXPECT_EQ(StreamText(*served_, keep, out, v1::FINISH_REASON_STOP), "Hello there<|im_start|>user");
  // Unless the stop is asked for too; and a length-ended output keeps it.
  body["include_stop_str_in_output"] = true;
  const PreparedRequest keep_stop = Prepare(ParseOk(Endpoint::kCompletions, body).request);
  EXPECT_EQ(StreamText(*served_, keep_stop, out, v1::FINISH_REASON_STOP),
            "Hello there<|im_start|>user<|im_end|>");
  EXPECT_EQ(StreamText(*served_, keep, out, v1::FINISH_REASON_LENGTH),
            "Hello there<|im_start|>user<|im_end|>");
}

TEST_F(SmolLm2, StopStringsAreKeptWithNoStopTrim) {
  const std::vector<int32_t> out = tokenizer_->Encode("Hello there, world. More", false, false);
  json body = RouterCompletionBody();
  body["stop"] = {"world", "zzz"};
  const PreparedRequest trim = Prepare(ParseOk(Endpoint::kCompletions, body).request);
  EXPECT_EQ(StreamText(*served_, trim, out, v1::FINISH_REASON_LENGTH), "Hello there, ");
  body["no_stop_trim"] = true;
  const PreparedRequest keep = Prepare(ParseOk(Endpoint::kCompletions, body).request);
  EXPECT_EQ(StreamText(*served_, keep, out, v1::FINISH_REASON_LENGTH), "Hello there, world");
}

TEST(StopMatcher, IncludeStopEndsWithTheEarliestStopString) {
  bool stopped = false;
  StopMatcher keep({"cd", "bcd"}, /*include_stop=*/true);
  EXPECT_EQ(keep.Push("ab", &stopped), "a");  // "b" may start "bcd"
  EXPECT_FALSE(stopped);
  EXPECT_EQ(keep.Push("cdef", &stopped), "bcd");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(keep.matched(), "bcd");  // Anthropic's stop_sequence, vLLM's stop_reason
  StopMatcher trim({"cd", "bcd"});
  EXPECT_EQ(trim.Push("abcdef", &stopped), "a");
  EXPECT_TRUE(stopped);
  // Two at the same place: the first listed.
  StopMatcher first({"b", "bc"}, true);
  EXPECT_EQ(first.Push("abc", &stopped), "ab");
  EXPECT_EQ(first.matched(), "b");
}

// The render endpoints' body: vLLM's GenerateRequest, token_ids those the
// generation would get.
TEST_F(SmolLm2, RenderedPromptIsVllmsGenerateRequest) {
  json body = RouterChatBody();
  body["model"] = "m";
  body["temperature"] = 0;
  body["stop"] = "\n\n";
  body["cache_salt"] = "salt";
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  const ParsedRequest p = ParseOk(Endpoint::kChatCompletions, body);
  const PreparedRequest prepared = Prepare(p.request);
  const json r = RenderedPromptJson("chatcmpl-1", p.model, p, p.request, prepared);
  EXPECT_EQ(r["request_id"], "chatcmpl-1");
  EXPECT_EQ(r["token_ids"].get<std::vector<int32_t>>(), PromptIds(prepared));
  EXPECT_EQ(r["token_ids"].get<std::vector<int32_t>>(),
            tokenizer_->Encode(*RenderChat(p.request.chat(), *served_), false, true));
  EXPECT_TRUE(r["features"].is_null());
  EXPECT_EQ(r["model"], "m");
  EXPECT_EQ(r["stream"], true);
  EXPECT_EQ(r["stream_options"], json({{"include_usage", true}}));
  EXPECT_EQ(r["cache_salt"], "salt");
  EXPECT_EQ(r["priority"], 0);
  EXPECT_TRUE(r["kv_transfer_params"].is_null());
  const json& s = r["sampling_params"];
  EXPECT_EQ(s["max_tokens"], 8);
  EXPECT_EQ(s["temperature"], 0.0);
  EXPECT_EQ(s["stop"], json::array({"\n\n"}));
  EXPECT_EQ(s["skip_special_tokens"], true);
  EXPECT_EQ(s["include_stop_str_in_output"], false);
  EXPECT_EQ(s["n"], 1);
  EXPECT_TRUE(s["logprobs"].is_null());
}

}  // namespace
}  // namespace specline::openai
