#include "cli/request_flags.h"

#include <sstream>
#include <stdexcept>

#include "proto/policy_names.h"

namespace specline::cli {

const std::vector<std::string> kRequestOptions = {
    "system", "prompt-ids", "max-tokens", "temperature", "top-k", "top-p", "min-p",
    "repetition-penalty", "seed", "stop", "stop-token-ids", "request-id", "policy", "pipo-tau",
    "cache-salt"};
const std::vector<std::string> kRequestFlags = {"chat", "ignore-eos"};

const char kRequestUsage[] = R"(  --chat                 send the prompt as a chat message (model's chat template)
  --system TEXT          system message for --chat
  --prompt-ids 1,2,3     send token ids instead of text
  --max-tokens N         tokens to generate (default: the server's)
  --temperature T        0 = greedy (default 0)
  --top-k K  --top-p P  --min-p P  --repetition-penalty R  --seed S
  --policy P             ar, ppsd, spd, pipo, ptp or recycle (default: the server's)
  --pipo-tau X           PIPO's confidence threshold (0 = always two tokens, > 1 = one)
  --stop TEXT            a stop string (excluded from the output)
  --stop-token-ids 1,2   extra stop token ids
  --ignore-eos           keep going past the model's stop tokens
  --request-id ID        id for logs and Abort (default: the server makes one)
  --cache-salt S         share prefix-cache blocks only with requests of the same salt
)";

std::vector<int32_t> ParseIdList(const std::string& option, const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used;
      ids.push_back(std::stoi(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw std::invalid_argument("--" + option + ": not a list of integers: '" + text + "'");
    }
  }
  return ids;
}

v1::GenerateRequest RequestFromArgs(const Args& args, const std::string& prompt_option) {
  v1::GenerateRequest req;
  req.set_request_id(args.Str("request-id"));
  if (args.Has("prompt-ids")) {
    for (int32_t id : ParseIdList("prompt-ids", args.Str("prompt-ids")))
      req.mutable_token_ids()->add_ids(id);
  } else if (args.Has("chat")) {
    auto* chat = req.mutable_chat();
    if (args.Has("system")) {
      auto* m = chat->add_messages();
      m->set_role("system");
      m->set_content(args.Str("system"));
    }
    auto* m = chat->add_messages();
    m->set_role("user");
    m->set_content(args.Str(prompt_option));
  } else {
    req.set_text(args.Str(prompt_option));
  }
  auto* s = req.mutable_sampling();
  s->set_temperature(static_cast<float>(args.Float("temperature", 0.0)));
  s->set_top_k(args.Int("top-k", 0));
  s->set_top_p(static_cast<float>(args.Float("top-p", 1.0)));
  s->set_min_p(static_cast<float>(args.Float("min-p", 0.0)));
  s->set_repetition_penalty(static_cast<float>(args.Float("repetition-penalty", 1.0)));
  if (args.Has("seed")) s->set_seed(args.U64("seed", 0));
  req.set_max_tokens(args.Int("max-tokens", 0));
  if (args.Has("stop")) req.add_stop(args.Str("stop"));
  if (args.Has("stop-token-ids")) {
    for (int32_t id : ParseIdList("stop-token-ids", args.Str("stop-token-ids")))
      req.add_stop_token_ids(id);
  }
  req.set_ignore_eos(args.Has("ignore-eos"));
  req.set_cache_salt(args.Str("cache-salt"));
  const absl::StatusOr<v1::DecodingPolicy> policy = PolicyFromName(args.Str("policy"));
  if (!policy.ok()) throw std::invalid_argument(std::string(policy.status().message()));
  req.set_policy(*policy);
  if (args.Has("pipo-tau")) req.set_pipo_tau(static_cast<float>(args.Float("pipo-tau", 0)));
  return req;
}

}  // namespace specline::cli
