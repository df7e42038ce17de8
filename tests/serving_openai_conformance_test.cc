// Conformance with what OpenAI clients send and expect (issue 28), on a real
// `specline serve` stack on loopback: each request is the one a client
// sends, and each check is on the status, the JSON shape and the SSE
// framing. stories260K with a small chat template, and a KV capacity (256
// positions a stage) below the model's context (512): the KV is the
// context a request can use, as on a deployment sized for its memory.
#include <fstream>
#include <set>

#include "tests/http_test_client.h"
#include "tests/serving_stack.h"

namespace specline::testing {
namespace {

using nlohmann::json;

constexpr int kKvCapacity = 256;

std::string Stories260K() { return SharedModelPath("stories260K/stories260K.bin"); }

std::string TemplateFile() { return RoleColonChatTemplate(); }

// An SSE body: each event's name ("" for a bare data: event) and payload.
struct Events {
  std::vector<std::string> names;
  std::vector<std::string> data;
  std::string error;
};

Events ParseEvents(const std::string& body) {
  Events out;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      out.error = "unterminated event at byte " + std::to_string(pos);
      return out;
    }
    std::string event = body.substr(pos, end - pos), name;
    if (event.rfind("event: ", 0) == 0) {
      const size_t nl = event.find('\n');
      name = event.substr(7, nl - 7);
      event = nl == std::string::npos ? "" : event.substr(nl + 1);
    }
    if (event.rfind("data: ", 0) != 0 || event.find('\n') != std::string::npos) {
      out.error = "not one data line: '" + event + "'";
      return out;
    }
    out.names.push_back(name);
    out.data.push_back(event.substr(6));
    pos = end + 2;
  }
  return out;
}

// A streamed chat or completion, checked against OpenAI's framing as it
// goes: per choice, (chat) a role-only first chunk, text only in chunks
// whose finish_reason is null, then one empty-delta chunk with the
// finish_reason; then the usage chunk when asked for; then [DONE].
struct Framed {
  std::map<int, std::string> text;
  std::map<int, std::string> finish;
  std::set<std::string> fingerprints;
  json usage;
  int chunks = 0;
};

Framed StreamFramed(int port, const std::string& target, const json& body) {
  Framed out;
  const HttpResult r = PostJson(port, target, body);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "text/event-stream");
  const Events ev = ParseEvents(r.body);
  EXPECT_EQ(ev.error, "");
  const bool chat = target == "/v1/chat/completions";
  const bool want_usage = body.contains("stream_options");
  std::map<int, int> seen;  // chunks per choice
  EXPECT_GE(ev.data.size(), 2u);
  for (size_t i = 0; i < ev.data.size(); ++i) {
    if (ev.data[i] == "[DONE]") {
      EXPECT_EQ(i + 1, ev.data.size()) << "[DONE] must come last";
      continue;
    }
    const json c = json::parse(ev.data[i]);
    ++out.chunks;
    EXPECT_EQ(c["object"], chat ? "chat.completion.chunk" : "text_completion");
    out.fingerprints.insert(c.value("system_fingerprint", json("")).dump());
    if (c.contains("usage") && !c["usage"].is_null()) {
      EXPECT_TRUE(c["choices"].empty());
      EXPECT_TRUE(want_usage);
      out.usage = c["usage"];
      EXPECT_EQ(i + 2, ev.data.size()) << "the usage chunk comes right before [DONE]";
      continue;
    }
    const json& choice = c["choices"].at(0);
    const int index = choice["index"].get<int>();
    EXPECT_FALSE(out.finish.count(index)) << "a chunk after choice " << index << "'s finish";
    if (chat && seen[index]++ == 0) {
      EXPECT_EQ(choice["delta"], json({{"role", "assistant"}, {"content", ""}})) << c.dump();
      EXPECT_TRUE(choice["finish_reason"].is_null());
      continue;
    }
    ++seen[index];
    if (!choice["finish_reason"].is_null()) {
      out.finish[index] = choice["finish_reason"].get<std::string>();
      if (chat) {
        EXPECT_EQ(choice["delta"], json::object()) << c.dump();
      } else {
        EXPECT_EQ(choice["text"], "") << c.dump();
      }
      continue;
    }
    out.text[index] += chat ? choice["delta"].value("content", "") : choice["text"].get<std::string>();
  }
  EXPECT_EQ(ev.data.back(), "[DONE]");
  if (want_usage) {
    EXPECT_TRUE(out.usage.is_object());
  }
  for (const auto& [index, n] : seen) EXPECT_TRUE(out.finish.count(index)) << "choice " << index << " never finished";
  return out;
}

class Conformance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (Stories260K().empty()) return;
    stack_ = StartStack(Stories260K(), 1,
                        {"--chat-template", TemplateFile(), "--kv-capacity-tokens",
                         std::to_string(kKvCapacity), "--cors-origins",
                         "https://app.example,http://localhost:3000"})
                 .release();
    ready_ = WaitForHttpHealth(Http());
  }
  static void TearDownTestSuite() {
    delete stack_;
    stack_ = nullptr;
    ready_ = false;
  }
  void SetUp() override {
    if (!stack_) GTEST_SKIP() << "../shared/models/stories260K absent";
    ASSERT_TRUE(ready_) << "the gateway did not answer GET /health with 200 within 60 s";
  }
  static int Http() { return stack_->ports["gateway"]["http"].get<int>(); }
  static json Chat(const std::string& text) { return json::array({{{"role", "user"}, {"content", text}}}); }
  static ServingStack* stack_;
  static bool ready_;
};
ServingStack* Conformance::stack_ = nullptr;
bool Conformance::ready_ = false;

json Ids(int n) { return json(std::vector<int>(n, 5)); }

std::string LongText(int words) {
  std::string s;
  for (int i = 0; i < words; ++i) s += "Once upon a time there was a cat. ";
  return s;
}

// 1 and 3: a request that cannot fit is a 400 before any stream byte, in
// OpenAI's shape, naming the prompt's tokens and the context.
TEST_F(Conformance, TooLongStreamedRequestsAre400BeforeTheStream) {
  HttpResult r = PostJson(Http(), "/v1/chat/completions",
                          {{"messages", Chat(LongText(60))}, {"stream", true}});
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.content_type, "application/json");
  json e = r.Json()["error"];
  EXPECT_EQ(e["code"], "context_length_exceeded");
  EXPECT_EQ(e["param"], "messages");
  EXPECT_EQ(e["type"], "invalid_request_error");
  const std::string m = e["message"];
  EXPECT_NE(m.find("tokens"), std::string::npos) << m;
  EXPECT_NE(m.find("context length " + std::to_string(kKvCapacity)), std::string::npos) << m;
  EXPECT_EQ(m.find("max_tokens"), std::string::npos) << "the client sent none: " << m;

  // Longer than the KV (256) though shorter than the model's context (512).
  r = PostJson(Http(), "/v1/completions", {{"prompt", Ids(300)}, {"stream", true}});
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.Json()["error"]["code"], "context_length_exceeded");
  EXPECT_NE(r.Json()["error"]["message"].get<std::string>().find("has 300 tokens"), std::string::npos)
      << r.body;
  // A prompt that fits, with a max_tokens that does not.
  r = PostJson(Http(), "/v1/completions", {{"prompt", Ids(100)}, {"max_tokens", 200}, {"stream", true}});
  ASSERT_EQ(r.status, 400) << r.body;
  e = r.Json()["error"];
  EXPECT_EQ(e["code"], "context_length_exceeded");
  EXPECT_EQ(e["param"], "prompt");
  EXPECT_NE(e["message"].get<std::string>().find("max_tokens is 200"), std::string::npos) << e.dump();
  // max_tokens alone too large, on chat.
  r = PostJson(Http(), "/v1/chat/completions",
               {{"messages", Chat("Hi")}, {"max_completion_tokens", 100000}, {"stream", true}});
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.Json()["error"]["code"], "context_length_exceeded");
}

// 2: an omitted max_tokens is "up to what fits", never a refusal.
TEST_F(Conformance, OmittedMaxTokensGeneratesUntilTheContextIsFull) {
  const int prompt = 200;  // fits; the default reservation (256) would not
  HttpResult r = PostJson(Http(), "/v1/completions",
                          {{"prompt", Ids(prompt)}, {"ignore_eos", true}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.Json();
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt);
  EXPECT_EQ(j["usage"]["completion_tokens"], kKvCapacity - prompt);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
}

// 4 and 6: the stream framing, system_fingerprint everywhere.
TEST_F(Conformance, StreamFramingAndSystemFingerprint) {
  const json chat_body = {{"messages", Chat("Hello")}, {"max_tokens", 6}, {"temperature", 0},
                          {"stream", true}, {"stream_options", {{"include_usage", true}}}};
  const Framed chat = StreamFramed(Http(), "/v1/chat/completions", chat_body);
  EXPECT_EQ(chat.finish.at(0), "length");
  EXPECT_EQ(chat.usage["completion_tokens"], 6);
  ASSERT_EQ(chat.fingerprints.size(), 1u);
  const std::string fp = *chat.fingerprints.begin();
  EXPECT_NE(fp.find("fp_specline-"), std::string::npos) << fp;
  // The streamed text is the whole non-streamed text (the last token is not
  // lost with the finish chunk).
  json whole_body = chat_body;
  whole_body.erase("stream");
  whole_body.erase("stream_options");
  HttpResult whole = PostJson(Http(), "/v1/chat/completions", whole_body);
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(whole.Json()["choices"][0]["message"]["content"], chat.text.at(0));
  EXPECT_EQ(whole.Json()["system_fingerprint"].dump(), fp);

  const Framed cmpl = StreamFramed(Http(), "/v1/completions",
                                   {{"prompt", "Once"}, {"max_tokens", 5}, {"temperature", 0}, {"stream", true}});
  EXPECT_EQ(cmpl.finish.at(0), "length");
  EXPECT_FALSE(cmpl.text.at(0).empty());
  EXPECT_EQ(cmpl.fingerprints, chat.fingerprints);
}

// 5 and 7: what OpenAI accepts is accepted.
TEST_F(Conformance, AcceptsOpenAiOnlyFieldsAndNullAssistantContent) {
  HttpResult r = PostJson(
      Http(), "/v1/chat/completions",
      {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}},
                                 {{"role", "assistant"}, {"content", nullptr}},
                                 {{"role", "user"}, {"content", "Again"}}})},
       {"max_tokens", 3}, {"store", false}, {"metadata", {{"run", "7"}}}, {"service_tier", "auto"},
       {"modalities", {"text"}}, {"reasoning_effort", "low"}, {"user", "u1"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["choices"][0]["message"]["role"], "assistant");
  r = PostJson(Http(), "/v1/chat/completions",
               {{"messages", Chat("Hi")}, {"modalities", {"text", "audio"}}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.Json()["error"]["param"], "modalities");
}

// 8: CORS for the configured origins only.
TEST_F(Conformance, CorsPreflightAndHeaders) {
  HttpResult pre = HttpCall(Http(), "OPTIONS", "/v1/chat/completions", "",
                            {{"Origin", "https://app.example"},
                             {"Access-Control-Request-Method", "POST"},
                             {"Access-Control-Request-Headers", "authorization, content-type"}});
  EXPECT_EQ(pre.status, 204);
  EXPECT_EQ(pre.headers["access-control-allow-origin"], "https://app.example");
  EXPECT_NE(pre.headers["access-control-allow-methods"].find("POST"), std::string::npos);
  EXPECT_EQ(pre.headers["access-control-allow-headers"], "authorization, content-type");
  EXPECT_FALSE(pre.headers["access-control-max-age"].empty());
  HttpResult other = HttpCall(Http(), "OPTIONS", "/v1/chat/completions", "",
                              {{"Origin", "https://evil.example"}, {"Access-Control-Request-Method", "POST"}});
  EXPECT_NE(other.status, 204);
  EXPECT_FALSE(other.headers.count("access-control-allow-origin"));
  HttpResult post = PostJson(Http(), "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}},
                             {{"Origin", "http://localhost:3000"}});
  EXPECT_EQ(post.status, 200);
  EXPECT_EQ(post.headers["access-control-allow-origin"], "http://localhost:3000");
  HttpResult streamed = PostJson(Http(), "/v1/completions",
                                 {{"prompt", "Once"}, {"max_tokens", 2}, {"stream", true}},
                                 {{"Origin", "https://app.example"}});
  EXPECT_EQ(streamed.headers["access-control-allow-origin"], "https://app.example");
  HttpResult no_origin = PostJson(Http(), "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}});
  EXPECT_FALSE(no_origin.headers.count("access-control-allow-origin"));
}

// 9: the completions extras.
TEST_F(Conformance, CompletionsListEchoEmptyPromptAndMaxTokensZero) {
  auto one = [&](const json& prompt) {
    HttpResult r = PostJson(Http(), "/v1/completions", {{"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}});
    EXPECT_EQ(r.status, 200) << r.body;
    return r.Json();
  };
  HttpResult r = PostJson(Http(), "/v1/completions",
                          {{"prompt", {"Once upon", "The cat"}}, {"max_tokens", 4}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  json j = r.Json();
  ASSERT_EQ(j["choices"].size(), 2u);
  const json a = one("Once upon"), b = one("The cat");
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][0]["text"], a["choices"][0]["text"]);
  EXPECT_EQ(j["choices"][1]["text"], b["choices"][0]["text"]);
  // Different prompts: their tokens add up.
  EXPECT_EQ(j["usage"]["prompt_tokens"],
            a["usage"]["prompt_tokens"].get<int>() + b["usage"]["prompt_tokens"].get<int>());

  r = PostJson(Http(), "/v1/completions", {{"prompt", "Once upon"}, {"max_tokens", 4}, {"temperature", 0}, {"echo", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["choices"][0]["text"], "Once upon" + a["choices"][0]["text"].get<std::string>());

  r = PostJson(Http(), "/v1/completions", {{"prompt", "Once upon"}, {"max_tokens", 0}, {"echo", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["choices"][0]["text"], "Once upon");
  EXPECT_EQ(r.Json()["usage"]["completion_tokens"], 0);
  EXPECT_EQ(r.Json()["usage"]["prompt_tokens"], a["usage"]["prompt_tokens"]);
  r = PostJson(Http(), "/v1/completions", {{"prompt", "Once upon"}, {"max_tokens", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["choices"][0]["text"], "");
  EXPECT_EQ(r.Json()["choices"][0]["finish_reason"], "length");

  r = PostJson(Http(), "/v1/completions", {{"prompt", ""}, {"max_tokens", 3}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["usage"]["prompt_tokens"], 1);  // BOS alone

  r = PostJson(Http(), "/v1/completions", {{"prompt", "def f("}, {"suffix", "return x"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.Json()["error"]["param"], "suffix");

  // Streamed, with echo: the prompt's text opens each choice.
  const Framed s = StreamFramed(Http(), "/v1/completions",
                                {{"prompt", {"Once upon", "The cat"}}, {"max_tokens", 4}, {"temperature", 0},
                                 {"echo", true}, {"stream", true}});
  EXPECT_EQ(s.text.at(0), "Once upon" + a["choices"][0]["text"].get<std::string>());
  EXPECT_EQ(s.text.at(1), "The cat" + b["choices"][0]["text"].get<std::string>());
}

// 10: GET /v1/models/{id}.
TEST_F(Conformance, ModelById) {
  HttpResult r = HttpCall(Http(), "GET", "/v1/models/stories260K");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["id"], "stories260K");
  EXPECT_EQ(r.Json()["object"], "model");
  r = HttpCall(Http(), "GET", "/v1/models/gpt-4o");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.Json()["error"]["code"], "model_not_found");
  EXPECT_TRUE(r.Json()["error"]["message"].is_string());
}

// 10: POST /v1/responses, whole and streamed.
TEST_F(Conformance, ResponsesApi) {
  const json body = {{"model", "stories260K"}, {"input", "Hello"}, {"instructions", "Tell a story."},
                     {"max_output_tokens", 5}, {"temperature", 0}, {"store", false}};
  HttpResult r = PostJson(Http(), "/v1/responses", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.Json();
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["id"].get<std::string>().rfind("resp_", 0), 0u);
  ASSERT_EQ(j["output"].size(), 1u);
  EXPECT_EQ(j["output"][0]["type"], "message");
  EXPECT_EQ(j["output"][0]["role"], "assistant");
  const std::string text = j["output"][0]["content"][0]["text"];
  EXPECT_EQ(j["output"][0]["content"][0]["type"], "output_text");
  EXPECT_EQ(j["output_text"], text);
  EXPECT_EQ(j["usage"]["output_tokens"], 5);
  EXPECT_GT(j["usage"]["input_tokens"].get<int>(), 0);
  EXPECT_EQ(j["status"], "incomplete");  // stopped by max_output_tokens
  // The same text as the chat API gives the same conversation.
  HttpResult chat = PostJson(Http(), "/v1/chat/completions",
                             {{"messages", json::array({{{"role", "system"}, {"content", "Tell a story."}},
                                                        {{"role", "user"}, {"content", "Hello"}}})},
                              {"max_tokens", 5}, {"temperature", 0}});
  EXPECT_EQ(chat.Json()["choices"][0]["message"]["content"], text);

  json streamed = body;
  streamed["stream"] = true;
  r = PostJson(Http(), "/v1/responses", streamed);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "text/event-stream");
  const Events ev = ParseEvents(r.body);
  ASSERT_EQ(ev.error, "");
  std::vector<std::string> order;
  std::string deltas;
  for (size_t i = 0; i < ev.names.size(); ++i) {
    const json d = json::parse(ev.data[i]);
    EXPECT_EQ(d["type"], ev.names[i]);
    EXPECT_EQ(d["sequence_number"], static_cast<int>(i));
    if (ev.names[i] == "response.output_text.delta") {
      deltas += d["delta"].get<std::string>();
      if (order.back() == ev.names[i]) continue;
    }
    order.push_back(ev.names[i]);
  }
  EXPECT_EQ(order, (std::vector<std::string>{
                       "response.created", "response.output_item.added", "response.content_part.added",
                       "response.output_text.delta", "response.output_text.done",
                       "response.content_part.done", "response.output_item.done",
                       "response.incomplete"}));
  EXPECT_EQ(deltas, text);
  EXPECT_EQ(json::parse(ev.data.back())["response"]["output"][0]["content"][0]["text"], text);
}

// n > 1 on the HTTP API: n choices, each with its own seed stream, the
// prompt counted once.
TEST_F(Conformance, NChoices) {
  const json body = {{"messages", Chat("Hello there")}, {"max_tokens", 8}, {"seed", 11}, {"n", 3}};
  HttpResult r = PostJson(Http(), "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.Json();
  ASSERT_EQ(j["choices"].size(), 3u);
  HttpResult single = PostJson(Http(), "/v1/chat/completions",
                               {{"messages", Chat("Hello there")}, {"max_tokens", 8}, {"seed", 12}});
  ASSERT_EQ(single.status, 200);
  EXPECT_EQ(j["usage"]["prompt_tokens"], single.Json()["usage"]["prompt_tokens"]);
  int completion = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    completion += 8;
  }
  EXPECT_EQ(j["usage"]["completion_tokens"], completion);
  // Choice 1 is sampled with seed + 1.
  EXPECT_EQ(j["choices"][1]["message"]["content"], single.Json()["choices"][0]["message"]["content"]);

  json streamed = body;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  const Framed s = StreamFramed(Http(), "/v1/chat/completions", streamed);
  ASSERT_EQ(s.finish.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s.text.at(i), j["choices"][i]["message"]["content"]) << i;
  EXPECT_EQ(s.usage["prompt_tokens"], j["usage"]["prompt_tokens"]);

  r = PostJson(Http(), "/v1/chat/completions", {{"messages", Chat("Hi")}, {"n", 17}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.Json()["error"]["param"], "n");
}

// n > 1 on the gRPC API: each choice's messages carry its index and it ends
// with its own final message; the later choices find the prompt in the
// prefix cache, so it was prefilled once.
TEST_F(Conformance, GrpcNChoicesSharePrefill) {
  v1::GenerateRequest req;
  for (int i = 0; i < 70; ++i) req.mutable_token_ids()->add_ids(5 + i % 20);
  req.set_max_tokens(4);
  req.set_n(3);
  req.mutable_sampling()->set_temperature(1.0f);
  req.mutable_sampling()->set_seed(3);
  auto stub = v1::Generation::NewStub(stack_->channel());
  grpc::ClientContext ctx;
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse msg;
  std::map<int, int> finals, tokens;
  std::map<int, v1::Usage> usage;
  while (reader->Read(&msg)) {
    const int i = static_cast<int>(msg.index());
    EXPECT_FALSE(finals.count(i)) << "a message after choice " << i << "'s final one";
    tokens[i] += msg.token_ids_size();
    if (msg.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      ++finals[i];
      usage[i] = msg.usage();
    }
  }
  const grpc::Status status = reader->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(finals.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(tokens[i], 4) << i;
    EXPECT_EQ(usage[i].prompt_tokens(), 70);
  }
  RecordProperty("cached_tokens_choice0", usage[0].cached_tokens());
  RecordProperty("cached_tokens_choice1", usage[1].cached_tokens());
  RecordProperty("cached_tokens_choice2", usage[2].cached_tokens());
  // 70 prompt tokens: 4 full blocks of 16 are shared.
  EXPECT_GE(usage[1].cached_tokens(), 64);
  EXPECT_GE(usage[2].cached_tokens(), 64);
  req.set_n(17);
  grpc::ClientContext bad_ctx;
  auto bad = stub->Generate(&bad_ctx, req);
  while (bad->Read(&msg)) {
  }
  const grpc::Status refused = bad->Finish();
  EXPECT_EQ(refused.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("n:"), std::string::npos) << refused.error_message();
}

}  // namespace
}  // namespace specline::testing
