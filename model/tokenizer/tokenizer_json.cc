// Reads Hugging Face tokenizer.json files whose model is BPE: byte-level
// vocabularies (Llama 3, Qwen2, SmolLM2) and SentencePiece-style ones with
// byte fallback ("▁" spaces; Llama 2, TinyLlama, Mistral exports).
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "model/tokenizer/byte_level_bpe.h"
#include "model/tokenizer/sentencepiece.h"
#include "model/tokenizer/tokenizer.h"

namespace specline {
namespace {

using json = nlohmann::json;

// Every node of a (possibly Sequence) pre-tokenizer/normalizer/decoder tree.
void Flatten(const json& node, const char* list_key, std::vector<const json*>* out) {
  if (!node.is_object()) return;
  if (node.value("type", "") == "Sequence" && node.contains(list_key)) {
    for (const auto& child : node[list_key]) Flatten(child, list_key, out);
  } else {
    out->push_back(&node);
  }
}

bool Has(const std::vector<const json*>& nodes, const std::string& type) {
  for (const json* n : nodes)
    if (n->value("type", "") == type) return true;
  return false;
}

PreTokenizerKind PatternKind(const std::string& pattern, const std::string& path) {
  if (pattern.find("\\p{N}{1,3}") != std::string::npos) return PreTokenizerKind::kLlama3;
  if (pattern.find("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+") != std::string::npos)
    return PreTokenizerKind::kQwen2;
  if (pattern.find(" ?\\p{L}+| ?\\p{N}+") != std::string::npos) return PreTokenizerKind::kGpt2;
  throw std::runtime_error(path + ": unsupported pre-tokenizer pattern " + pattern);
}

ByteLevelBpeOptions ByteLevelOptions(const json& root, const std::string& path) {
  ByteLevelBpeOptions options;
  std::vector<const json*> pre;
  if (root.contains("pre_tokenizer")) Flatten(root["pre_tokenizer"], "pretokenizers", &pre);
  bool digits = false, regex_from_byte_level = false;
  std::string split_pattern;
  for (const json* n : pre) {
    std::string type = n->value("type", "");
    if (type == "Digits") {
      digits = n->value("individual_digits", false);
    } else if (type == "ByteLevel") {
      if (n->value("add_prefix_space", false))
        throw std::runtime_error(path + ": ByteLevel add_prefix_space is not supported");
      regex_from_byte_level = n->value("use_regex", true);
    } else if (type == "Split") {
      const json& pat = (*n)["pattern"];
      split_pattern = pat.contains("Regex") ? pat["Regex"].get<std::string>()
                                            : pat.value("String", "");
    } else {
      throw std::runtime_error(path + ": unsupported pre-tokenizer " + type);
    }
  }
  if (!split_pattern.empty()) {
    options.pre_tokenizer = PatternKind(split_pattern, path);
  } else if (regex_from_byte_level) {
    options.pre_tokenizer = digits ? PreTokenizerKind::kSmolLm : PreTokenizerKind::kGpt2;
  } else {
    options.pre_tokenizer = PreTokenizerKind::kNone;
  }
  options.ignore_merges = root["model"].value("ignore_merges", false);
  return options;
}

MergeList ReadMerges(const json& model) {
  MergeList merges;
  if (!model.contains("merges")) return merges;
  for (const auto& m : model["merges"]) {
    if (m.is_array() && m.size() == 2) {  // newer format: ["a", "b"]
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      std::string s = m.get<std::string>();
      size_t space = s.find(' ', 1);
      if (space == std::string::npos) throw std::runtime_error("merge '" + s + "' has no space");
      merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    }
  }
  return merges;
}

// The first id among `names` present in the vocabulary, or -1.
int32_t FindId(const std::unordered_map<std::string, int32_t>& index,
               std::initializer_list<const char*> names) {
  for (const char* n : names) {
    auto it = index.find(n);
    if (it != index.end()) return it->second;
  }
  return -1;
}

}  // namespace

std::unique_ptr<Tokenizer> LoadTokenizerJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open tokenizer file " + path);
  json root;
  try {
    root = json::parse(in);
    const json& model = root.at("model");
    if (model.value("type", "BPE") != "BPE")
      throw std::runtime_error("unsupported model type " + model.value("type", std::string()));

    Vocab vocab;
    const json& entries = model.at("vocab");
    vocab.pieces.resize(entries.size());
    for (auto it = entries.begin(); it != entries.end(); ++it) {
      int64_t id = it.value().get<int64_t>();
      if (id < 0 || id >= static_cast<int64_t>(vocab.pieces.size()))
        throw std::runtime_error("vocab id " + std::to_string(id) + " out of range");
      vocab.pieces[id] = it.key();
    }
    vocab.types.assign(vocab.pieces.size(), TokenType::kNormal);
    if (root.contains("added_tokens")) {
      for (const auto& t : root["added_tokens"]) {
        int64_t id = t.at("id").get<int64_t>();
        if (id < 0) throw std::runtime_error("negative added token id");
        if (id >= vocab.size()) {  // added tokens may extend the vocabulary
          vocab.pieces.resize(id + 1);
          vocab.types.resize(id + 1, TokenType::kUnused);
        }
        vocab.pieces[id] = t.at("content").get<std::string>();
        vocab.types[id] = t.value("special", false) ? TokenType::kControl : TokenType::kUserDefined;
      }
    }
    std::unordered_map<std::string, int32_t> index;
    for (int32_t id = 0; id < vocab.size(); ++id) index.emplace(vocab.pieces[id], id);
    MergeList merges = ReadMerges(model);

    std::vector<const json*> decoders;
    if (root.contains("decoder")) Flatten(root["decoder"], "decoders", &decoders);
    const bool sentencepiece_style = model.value("byte_fallback", false) ||
                                     Has(decoders, "ByteFallback") || Has(decoders, "Metaspace");
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      vocab.unk = FindId(index, {model["unk_token"].get<std::string>().c_str()});
      if (vocab.unk >= 0) vocab.types[vocab.unk] = TokenType::kUnknown;
    }
    // tokenizer.json does not say which token is BOS/EOS (that lives in
    // tokenizer_config.json); these are the names the supported families use.
    vocab.bos = FindId(index, {"<s>", "<|begin_of_text|>", "<bos>"});
    vocab.eos = FindId(index, {"</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>", "<|im_end|>"});
    if (!sentencepiece_style) {
      vocab.add_bos = vocab.bos >= 0 && vocab.pieces[vocab.bos] != "<|im_start|>";
      return MakeByteLevelBpeTokenizer(std::move(vocab), merges, ByteLevelOptions(root, path), path);
    }

    // SentencePiece-style BPE: a merge's rank is its priority, which the
    // score-driven SentencePiece BPE reproduces with score = -rank.
    vocab.scores.assign(vocab.pieces.size(), 0.0f);
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      auto it = index.find(merges[rank].first + merges[rank].second);
      if (it != index.end() && vocab.scores[it->second] == 0.0f)
        vocab.scores[it->second] = -static_cast<float>(rank) - 1.0f;
    }
    for (int32_t id = 0; id < vocab.size(); ++id) {
      const std::string& p = vocab.pieces[id];
      if (vocab.types[id] == TokenType::kNormal && p.size() == 6 && p.compare(0, 3, "<0x") == 0 &&
          p[5] == '>')
        vocab.types[id] = TokenType::kByte;
    }
    SentencePieceOptions options;
    options.algorithm = SentencePieceAlgorithm::kBpe;
    options.byte_fallback = model.value("byte_fallback", false);
    options.normalizer.remove_extra_whitespaces = false;
    // The dummy prefix is a Prepend("▁") normalizer or a Metaspace
    // pre-tokenizer with prepend_scheme "first"/"always".
    std::vector<const json*> norm, pre;
    if (root.contains("normalizer")) Flatten(root["normalizer"], "normalizers", &norm);
    if (root.contains("pre_tokenizer")) Flatten(root["pre_tokenizer"], "pretokenizers", &pre);
    bool prefix = Has(norm, "Prepend");
    for (const json* n : pre) {
      if (n->value("type", "") == "Metaspace")
        prefix = prefix || n->value("prepend_scheme", "always") != "never" ||
                 n->value("add_prefix_space", false);
    }
    options.normalizer.add_dummy_prefix = prefix;
    return MakeSentencePieceTokenizer(std::move(vocab), std::move(options), path);
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": bad tokenizer.json: " + e.what());
  } catch (const std::runtime_error& e) {
    std::string msg = e.what();
    if (msg.find(path) != std::string::npos) throw;
    throw std::runtime_error(path + ": " + msg);
  }
}

}  // namespace specline
