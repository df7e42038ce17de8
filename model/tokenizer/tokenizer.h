// Text <-> token ids. Two algorithm families cover the Llama family:
// SentencePiece (unigram/BPE over "▁"-escaped text with byte fallback: Llama 2,
// TinyLlama, Mistral, the stories models) and GPT-2 style byte-level BPE
// (Llama 3, Qwen, SmolLM2), each loadable from several file formats.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace specline {

class GgufFile;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Encodes `text`. add_bos prepends bos_id() when the vocabulary has one.
  // Special tokens written in the text ("<|im_start|>") are matched as
  // specials when parse_special is true (chat templates need it), else
  // encoded as plain text.
  virtual std::vector<int32_t> Encode(std::string_view text, bool add_bos,
                                      bool parse_special = false) const = 0;

  // The raw bytes token `id` stands for when it follows `prev` (SentencePiece
  // drops the leading space of the first piece after BOS). Byte tokens
  // ("<0x0A>", byte-level BPE symbols) become their byte; control tokens
  // (BOS/EOS/PAD) become "". May be a partial UTF-8 sequence.
  virtual std::string TokenBytes(int32_t prev, int32_t id) const = 0;

  // The piece as stored in the vocabulary (for listings and debugging).
  virtual const std::string& Piece(int32_t id) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when none
  virtual int32_t eos_id() const = 0;  // -1 when none
  // Every id that ends a generation (EOS, "<|im_end|>", "<|eot_id|>", ...).
  virtual const std::vector<int32_t>& stop_ids() const = 0;
  virtual bool IsControl(int32_t id) const = 0;
  // Whether prompts for this model start with BOS (SentencePiece models and
  // GGUF add_bos_token = true; SmolLM2's byte-level vocabulary says false).
  // Encode's add_bos is the caller's decision; this is the model's advice.
  virtual bool add_bos_by_default() const { return true; }

  // Decodes a whole sequence (concatenated TokenBytes).
  std::string Decode(const std::vector<int32_t>& ids) const;
};

// Loaders. Each throws std::runtime_error naming the file on bad input.
std::unique_ptr<Tokenizer> LoadSentencePieceModel(const std::string& path);  // .model
std::unique_ptr<Tokenizer> LoadLlama2cTokenizer(const std::string& path,
                                                int32_t vocab_size);  // tokenizer.bin
std::unique_ptr<Tokenizer> LoadTokenizerJson(const std::string& path);  // HF tokenizer.json
std::unique_ptr<Tokenizer> LoadGgufTokenizer(const GgufFile& gguf);
// Picks the loader from the path (file suffix, or tokenizer files inside a
// model directory). `model_vocab_size` is needed by tokenizer.bin only.
std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& path,
                                         int32_t model_vocab_size);

// Streams text from a sequence of ids, a token at a time, never emitting an
// incomplete UTF-8 character: bytes of a split character are held back until
// the character completes. Invalid sequences become U+FFFD when it is clear
// they cannot complete.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tok, int32_t prev = -1)
      : tok_(tok), prev_(prev) {}
  // The text that became complete with this token (may be empty).
  std::string Push(int32_t id);
  // Whatever is still held back, with U+FFFD for incomplete characters.
  std::string Flush();

 private:
  const Tokenizer& tok_;
  int32_t prev_;
  std::string pending_;
};

}  // namespace specline
