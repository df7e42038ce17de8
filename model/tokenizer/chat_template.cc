// Chat formats rendered natively: a model's Jinja template is recognised by
// its marker tokens rather than interpreted, since the handful of formats
// below cover the models specline serves and a Jinja engine would be the
// largest piece of this library. Each renderer reproduces what transformers'
// apply_chat_template (jinja2 with trim_blocks/lstrip_blocks) prints for the
// reference template of its family; tests/data/tokenizer/chat_*.json pin it.
#include <stdexcept>

#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/unicode.h"

namespace specline {
namespace {

// Python's str.strip() as Jinja's trim filter and .strip() apply it.
std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  auto space_at = [&](size_t i, int* len) {
    char32_t cp = unicode::DecodeUtf8(s, i, len);
    return unicode::IsWhitespace(cp) || (cp >= 0x1C && cp <= 0x1F);
  };
  int len;
  while (b < e && space_at(b, &len)) b += len;
  while (e > b) {
    size_t start = e - 1;
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (!space_at(start, &len)) break;
    e = start;
  }
  return s.substr(b, e - b);
}

bool Contains(const std::string& s, const char* needle) {
  return s.find(needle) != std::string::npos;
}

// The default system prompt a ChatML template writes when the conversation
// has none: the text of a string literal between "<|im_start|>system\n" and
// "<|im_end|>". Empty when the template has no such literal.
std::string ExtractDefaultSystem(const std::string& src) {
  const std::string open = "<|im_start|>system";
  for (size_t at = src.find(open); at != std::string::npos; at = src.find(open, at + 1)) {
    size_t p = at + open.size();
    if (src.compare(p, 1, "\n") == 0) {
      p += 1;
    } else if (src.compare(p, 2, "\\n") == 0) {
      p += 2;
    } else {
      continue;
    }
    size_t end = src.find("<|im_end|>", p);
    if (end == std::string::npos) continue;
    std::string raw = src.substr(p, end - p);
    // A literal, not an expression splicing in message content.
    if (raw.find_first_of("'\"{}") != std::string::npos || raw.empty()) continue;
    std::string text;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '\\' && i + 1 < raw.size()) {
        char c = raw[++i];
        text.push_back(c == 'n' ? '\n' : c == 't' ? '\t' : c);
      } else {
        text.push_back(raw[i]);
      }
    }
    return text;
  }
  return "";
}

std::string RenderChatMl(const std::vector<ChatMessage>& msgs, bool gen,
                         const std::string& default_system) {
  std::string out;
  if (!default_system.empty() && (msgs.empty() || msgs[0].role != "system") && !msgs.empty())
    out += "<|im_start|>system\n" + default_system + "<|im_end|>\n";
  for (const auto& m : msgs) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

// Llama 2 chat: the system prompt rides inside the first [INST] block.
std::string RenderLlama2(const std::vector<ChatMessage>& msgs) {
  std::string out, system;
  size_t first = 0;
  if (!msgs.empty() && msgs[0].role == "system") {
    system = msgs[0].content;
    first = 1;
  }
  for (size_t i = first; i < msgs.size(); ++i) {
    std::string content = msgs[i].content;
    if (i == first && first == 1) content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content;
    // Appended piece by piece: `"literal" + std::string&&` trips GCC 12's
    // -Wrestrict false positive at -O3.
    if (msgs[i].role == "user") {
      out.append("<s>[INST] ").append(Trim(content)).append(" [/INST]");
    } else if (msgs[i].role == "assistant") {
      out.append(" ").append(Trim(content)).append(" </s>");
    }
  }
  return out;
}

std::string RenderLlama3(const std::vector<ChatMessage>& msgs, bool gen) {
  std::string out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (i == 0) out += "<|begin_of_text|>";
    out += "<|start_header_id|>" + msgs[i].role + "<|end_header_id|>\n\n" + Trim(msgs[i].content) +
           "<|eot_id|>";
  }
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string RenderZephyr(const std::vector<ChatMessage>& msgs, bool gen) {
  std::string out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const auto& m = msgs[i];
    if (m.role == "user" || m.role == "system" || m.role == "assistant")
      out += "<|" + m.role + "|>\n" + m.content + "</s>\n";
    if (i + 1 == msgs.size() && gen) out += "<|assistant|>\n";
  }
  return out;
}

// Mistral Instruct has no system role; like its later templates, a system
// message is folded into the first user turn.
std::string RenderMistral(std::vector<ChatMessage> msgs) {
  if (!msgs.empty() && msgs[0].role == "system") {
    std::string system = msgs[0].content;
    msgs.erase(msgs.begin());
    if (!msgs.empty()) msgs[0].content = system + "\n\n" + msgs[0].content;
  }
  std::string out = "<s>";
  for (const auto& m : msgs) {
    if (m.role == "user") out += "[INST] " + m.content + " [/INST]";
    else if (m.role == "assistant") out += m.content + "</s>";
  }
  return out;
}

// Gemma has no system role either; it is folded into the first user turn.
std::string RenderGemma(std::vector<ChatMessage> msgs, bool gen) {
  if (!msgs.empty() && msgs[0].role == "system") {
    std::string system = msgs[0].content;
    msgs.erase(msgs.begin());
    if (!msgs.empty()) msgs[0].content = system + "\n\n" + msgs[0].content;
  }
  std::string out = "<bos>";
  for (const auto& m : msgs) {
    std::string role = m.role == "assistant" ? "model" : m.role;
    out += "<start_of_turn>" + role + "\n" + Trim(m.content) + "<end_of_turn>\n";
  }
  if (gen) out += "<start_of_turn>model\n";
  return out;
}

std::string RenderPhi3(const std::vector<ChatMessage>& msgs, bool gen) {
  std::string out;
  for (const auto& m : msgs) {
    if (m.role == "system" || m.role == "user" || m.role == "assistant")
      out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
  }
  out += gen ? "<|assistant|>\n" : "<|endoftext|>";
  return out;
}

}  // namespace

ChatTemplate ChatTemplate::FromJinja(const std::string& src) {
  ChatTemplate t;
  if (Contains(src, "<|im_start|>")) {
    t = ByName("chatml");
    t.default_system_ = ExtractDefaultSystem(src);
  } else if (Contains(src, "<|start_header_id|>")) {
    t = ByName("llama3");
  } else if (Contains(src, "<start_of_turn>")) {
    t = ByName("gemma");
  } else if (Contains(src, "<|user|>") && Contains(src, "<|end|>")) {
    t = ByName("phi3");
  } else if (Contains(src, "<|user|>")) {
    t = ByName("zephyr");
  } else if (Contains(src, "[INST]") && Contains(src, "<<SYS>>")) {
    t = ByName("llama2");
  } else if (Contains(src, "[INST]")) {
    t = ByName("mistral");
  } else {
    throw std::runtime_error("unrecognised chat template (no known markers): " +
                             src.substr(0, 200));
  }
  return t;
}

ChatTemplate ChatTemplate::ByName(const std::string& name) {
  static const char* const kNames[] = {"chatml", "llama2", "llama3", "zephyr",
                                       "mistral", "gemma", "phi3"};
  for (const char* n : kNames) {
    if (name == n) {
      ChatTemplate t;
      t.name_ = name;
      return t;
    }
  }
  throw std::runtime_error("unknown chat template name '" + name + "'");
}

bool ChatTemplate::renders_bos() const {
  return name_ == "llama2" || name_ == "llama3" || name_ == "mistral" || name_ == "gemma";
}

std::string ChatTemplate::Apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) const {
  const bool gen = add_generation_prompt;
  if (name_ == "chatml") return RenderChatMl(messages, gen, default_system_);
  if (name_ == "llama2") return RenderLlama2(messages);
  if (name_ == "llama3") return RenderLlama3(messages, gen);
  if (name_ == "zephyr") return RenderZephyr(messages, gen);
  if (name_ == "mistral") return RenderMistral(messages);
  if (name_ == "gemma") return RenderGemma(messages, gen);
  if (name_ == "phi3") return RenderPhi3(messages, gen);
  throw std::runtime_error("chat template '" + name_ + "' has no renderer");
}

}  // namespace specline
