// `specline generate`: streams a completion of a prompt to stdout and
// prints timing to stderr.
#include <chrono>
#include <cstdio>
#include <iostream>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "model/runtime/generator.h"
#include "model/tokenizer/model_tokenizer.h"

namespace specline::cli {

const char kGenerateUsage[] = R"(usage: specline generate [options]
  --model PATH           llama2.c .bin, .gguf, or a Hugging Face directory
                         (default: SmolLM2-135M-Instruct from the model cache,
                         else ../shared/models/stories260K)
  --tokenizer PATH       tokenizer file (default: the model's own)
  --prompt TEXT          prompt (default: empty, i.e. BOS only)
  --chat                 wrap the prompt in the model's chat template
  --chat-template FILE   the template for --chat instead of the model's own
  --system TEXT          system message for --chat
  --max-tokens N         tokens to generate (default 256)
  --temperature T        0 = greedy (default 0)
  --top-k K  --top-p P  --min-p P  --repetition-penalty R  --seed S
  --ignore-eos           keep going past end-of-sequence tokens
  --threads N            worker threads (default: all cores)
  --slices N             split the layers into N chained stage slices
  --show-ids             print the generated token ids to stderr at the end
)";

int GenerateCommand(int argc, char** argv) {
  Args args(argc, argv, 2,
            {"model", "tokenizer", "chat-template", "prompt", "system", "max-tokens", "temperature", "top-k",
             "top-p", "min-p", "repetition-penalty", "seed", "threads", "slices"},
            {"chat", "ignore-eos", "show-ids", "help"});
  if (args.Has("help")) {
    std::cout << kGenerateUsage;
    return 0;
  }
  const std::string model_path = args.Str("model", DefaultModelPath());
  if (model_path.empty()) {
    std::cerr << "no model: pass --model, or run scripts/setup.sh to fetch the default\n";
    return 2;
  }
  auto model = OpenModel(model_path);
  auto tokenizer = OpenTokenizerFor(*model, args.Str("tokenizer"));
  const ModelConfig& config = model->config();

  std::string prompt = args.Str("prompt");
  // As the gateway and llama.cpp do: BOS when the vocabulary asks for it
  // (SmolLM2's says no), and always for an empty prompt (generate from BOS).
  bool add_bos = tokenizer->add_bos_by_default() || prompt.empty();
  bool chat = false;
  if (args.Has("chat")) {
    absl::StatusOr<std::optional<ChatTemplate>> tmpl =
        args.Has("chat-template")
            ? absl::StatusOr<std::optional<ChatTemplate>>(
                  ChatTemplateFromFile(args.Str("chat-template"), tokenizer.get()))
            : ChatTemplateFor(*model, tokenizer.get());
    if (!tmpl.ok()) {
      std::cerr << "error: " << tmpl.status().message() << "\n";
      return 1;
    }
    if (*tmpl) {
      std::vector<ChatMessage> messages;
      if (args.Has("system")) messages.push_back({"system", args.Str("system")});
      messages.push_back({"user", prompt});
      absl::StatusOr<std::string> rendered = (*tmpl)->Apply(messages);
      if (!rendered.ok()) {
        std::cerr << "error: " << rendered.status().message() << "\n";
        return 1;
      }
      prompt = *std::move(rendered);
      add_bos = false;  // templates write their own BOS where the model wants one
      chat = true;
    } else {
      // A base model (stories260K): the prompt is used as it is.
      std::cerr << "note: " << model_path << " has no chat template; using the raw prompt\n";
    }
  }
  std::vector<int32_t> ids = tokenizer->Encode(prompt, add_bos, /*parse_special=*/chat);
  if (ids.empty()) {
    std::cerr << "the prompt encodes to no tokens and the vocabulary has no BOS\n";
    return 2;
  }

  GenerationOptions options;
  options.max_tokens = args.Int("max-tokens", 256);
  options.sampling.temperature = static_cast<float>(args.Float("temperature", 0.0));
  options.sampling.top_k = args.Int("top-k", 0);
  options.sampling.top_p = static_cast<float>(args.Float("top-p", 1.0));
  options.sampling.min_p = static_cast<float>(args.Float("min-p", 0.0));
  options.sampling.repetition_penalty = static_cast<float>(args.Float("repetition-penalty", 1.0));
  options.sampling.seed = args.U64("seed", 0);
  options.ignore_eos = args.Has("ignore-eos");
  options.stop_ids = tokenizer->stop_ids();

  SliceOptions slice_options;
  slice_options.kv_capacity_tokens = config.max_seq_len;
  LocalPipeline pipeline(*model, EvenSplit(config.n_layers, args.Int("slices", 1)), slice_options,
                         args.Int("threads", 0));

  IncrementalDetokenizer detok(*tokenizer, ids.back());
  // A plain completion echoes its prompt; a chat shows only the reply.
  if (!chat) std::fputs(args.Str("prompt").c_str(), stdout);
  auto result = Generate(pipeline, /*seq=*/1, ids, options, [&](int32_t token) {
    std::fputs(detok.Push(token).c_str(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::fputs(detok.Flush().c_str(), stdout);
  std::fputs("\n", stdout);
  if (!result.ok()) {
    std::cerr << "generation failed: " << result.status().message() << "\n";
    return 1;
  }
  const GenerationResult& r = *result;
  const size_t n = r.tokens.size();
  std::fprintf(stderr,
               "[%s] prompt %d tokens, generated %zu (%s); TTFT %.1f ms, TPOT %.2f ms, "
               "decode %.1f tok/s\n",
               model_path.c_str(), r.prompt_tokens, n, r.finish_reason.c_str(),
               r.prefill_seconds * 1e3, n > 1 ? r.decode_seconds * 1e3 / (n - 1) : 0.0,
               n > 1 ? (n - 1) / r.decode_seconds : 0.0);
  if (args.Has("show-ids")) {
    for (int32_t t : r.tokens) std::cerr << t << ' ';
    std::cerr << "\n";
  }
  return 0;
}

}  // namespace specline::cli
