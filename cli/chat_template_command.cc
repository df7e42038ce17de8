// `specline chat-template`: prints the prompt a model's chat template makes
// of a conversation, exactly as the server sends it to the model (and as
// llama-server's /apply-template answers), so users can see what the model
// is sent.
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "model/formats/model_source.h"
#include "model/tokenizer/chat_template.h"
#include "model/tokenizer/model_tokenizer.h"

namespace specline::cli {
namespace {

const char kUsage[] = R"(usage: specline chat-template (--model FILE | --template FILE) --messages JSON [options]
  --model FILE            the model whose template (GGUF tokenizer.chat_template or
                          tokenizer_config.json) and BOS/EOS texts are used
  --template FILE         a template file (Jinja, or JSON with "chat_template");
                          with --model it replaces the model's own
  --messages JSON         the conversation: a JSON list of {"role", "content"}, or a
                          chat request body with "messages"; @FILE reads it from FILE
  --tools JSON            OpenAI-shaped tool definitions (a JSON list, or @FILE)
  --kwargs JSON           further template variables ({"enable_thinking": false})
  --no-generation-prompt  leave out the assistant's opening
  --bos-token TEXT        bos_token's text (default: the model's; "" with --template alone)
  --eos-token TEXT        eos_token's text (default: the model's; "" with --template alone)
  --tokenizer PATH        tokenizer file (default: the model's own)
  --count-tokens          also print the prompt's token count to stderr (needs --model)
The prompt goes to stdout as it is, without a trailing newline.
)";

// A JSON argument given inline or as @FILE.
nlohmann::ordered_json ReadJsonArg(const std::string& name, const std::string& value) {
  std::string text = value;
  if (!value.empty() && value[0] == '@') {
    std::ifstream in(value.substr(1), std::ios::binary);
    if (!in) throw std::runtime_error("--" + name + ": cannot read " + value.substr(1));
    std::stringstream s;
    s << in.rdbuf();
    text = s.str();
  }
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded()) throw std::runtime_error("--" + name + " is not valid JSON");
  return j;
}

}  // namespace

int ChatTemplateCommand(int argc, char** argv) {
  Args args(argc, argv, 2,
            {"model", "template", "messages", "tools", "kwargs", "bos-token", "eos-token",
             "tokenizer"},
            {"no-generation-prompt", "count-tokens", "help"});
  if (args.Has("help")) {
    std::cout << kUsage;
    return 0;
  }
  if (!args.Has("model") && !args.Has("template")) {
    std::cerr << "pass --model FILE or --template FILE\n" << kUsage;
    return 2;
  }
  if (!args.Has("messages")) {
    std::cerr << "pass --messages JSON\n" << kUsage;
    return 2;
  }
  std::unique_ptr<ModelSource> model;
  std::unique_ptr<Tokenizer> tokenizer;
  if (args.Has("model")) {
    model = OpenModel(args.Str("model"));
    tokenizer = OpenTokenizerFor(*model, args.Str("tokenizer"));
  }
  auto special = [&](const char* flag, int32_t id) {
    if (args.Has(flag)) return args.Str(flag);
    return tokenizer && id >= 0 ? tokenizer->Piece(id) : std::string();
  };
  const std::string bos = special("bos-token", tokenizer ? tokenizer->bos_id() : -1);
  const std::string eos = special("eos-token", tokenizer ? tokenizer->eos_id() : -1);

  absl::StatusOr<ChatTemplate> tmpl = absl::NotFoundError("");
  if (args.Has("template")) {
    tmpl = ChatTemplate::FromFile(args.Str("template"), bos, eos);
  } else {
    absl::StatusOr<std::optional<ChatTemplate>> own = ChatTemplateFor(*model, tokenizer.get());
    if (!own.ok()) {
      tmpl = own.status();
    } else if (!*own) {
      std::cerr << args.Str("model")
                << " carries no chat template (a base model?); give one with --template FILE\n";
      return 1;
    } else {
      tmpl = **std::move(own);
      tmpl->set_special_texts(bos, eos);
    }
  }
  if (!tmpl.ok()) {
    std::cerr << "error: " << tmpl.status().message() << "\n";
    return 1;
  }

  nlohmann::ordered_json messages = ReadJsonArg("messages", args.Str("messages"));
  if (messages.is_object() && messages.contains("messages")) messages = messages["messages"];
  if (!messages.is_array()) {
    std::cerr << "--messages must be a JSON list of messages\n";
    return 2;
  }
  ChatRenderOptions options;
  options.add_generation_prompt = !args.Has("no-generation-prompt");
  if (args.Has("tools")) options.tools = ReadJsonArg("tools", args.Str("tools"));
  if (args.Has("kwargs")) options.extra = ReadJsonArg("kwargs", args.Str("kwargs"));
  absl::StatusOr<std::string> prompt = tmpl->Apply(messages, options);
  if (!prompt.ok()) {
    std::cerr << "error: " << prompt.status().message() << "\n";
    return 1;
  }
  std::cout << *prompt << std::flush;
  if (args.Has("count-tokens")) {
    if (!tokenizer) {
      std::cerr << "--count-tokens needs --model\n";
      return 2;
    }
    std::cerr << "\n" << tokenizer->Encode(*prompt, false, true).size() << " tokens\n";
  }
  return 0;
}

}  // namespace specline::cli
