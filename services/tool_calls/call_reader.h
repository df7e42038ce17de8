// Reads one tool call's JSON as its text arrives: the name, and where the
// arguments' value begins and ends, without waiting for the call to close.
// Parsers use it to stream a call's arguments while they are generated, and
// to take a whole call's arguments as the model wrote them, so the streamed
// pieces concatenate to exactly the non-streamed arguments.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace specline::tool_calls {

class CallReader {
 public:
  static constexpr size_t npos = std::string_view::npos;

  // A call object: {"name": ..., "arguments" | "parameters": ...} in any
  // key order (the first of the two argument keys counts).
  CallReader() = default;
  // The arguments' value alone, the name given by the syntax (Mistral's
  // name[ARGS]{...}).
  explicit CallReader(std::string name);

  // `text` is the call's text so far; each text extends the one before.
  // Only what is new is scanned.
  void Advance(std::string_view text);

  bool has_name() const { return name_.has_value(); }
  const std::string& name() const { return *name_; }
  // The arguments' value in the text: its first byte (npos until it
  // begins) and the byte past its end (npos while it is open).
  size_t arguments_begin() const { return args_begin_; }
  size_t arguments_end() const { return args_end_; }
  // The object (or, for the arguments alone, the value) closed at end().
  bool closed() const { return state_ == State::kClosed; }
  size_t end() const { return end_; }
  // The text cannot be a call (a stray character between keys and
  // values): nothing more is read.
  bool broken() const { return state_ == State::kBroken; }
  // How much of the text has been read (where a broken text stopped).
  size_t scanned() const { return pos_; }

 private:
  enum class State { kBeforeObject, kKey, kInKey, kColon, kValue, kInValue, kAfterValue, kClosed, kBroken };
  enum class Field { kOther, kName, kArguments };
  // One byte; false when the byte must be read again in the new state (a
  // bare value ends at the delimiter after it).
  bool Step(std::string_view text, size_t i);
  void BeginValue(size_t i, char c);
  bool StepValue(std::string_view text, size_t i, char c);
  void EndValue(std::string_view text, size_t end);

  State state_ = State::kBeforeObject;
  bool arguments_only_ = false;
  size_t pos_ = 0;  // the next byte to scan
  std::optional<std::string> name_;
  size_t args_begin_ = npos, args_end_ = npos, end_ = npos;
  // The key or value being scanned.
  std::string key_;
  Field field_ = Field::kOther;
  size_t value_begin_ = 0;
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false, bare_ = false;
};

}  // namespace specline::tool_calls
