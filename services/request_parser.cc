#include "services/request_parser.h"

#include <map>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include "absl/strings/str_cat.h"

namespace specline {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::io::CodedInputStream;
using google::protobuf::internal::WireFormatLite;

constexpr int kMaxDepth = 32;

// Walks the wire data with the message's descriptor and reports the first
// string field holding invalid UTF-8, by its path. Anything else that is
// malformed is left to the real parser (it returns OK for that).
absl::Status FindBadUtf8(CodedInputStream* in, const Descriptor* d, const std::string& path,
                         int depth) {
  if (depth > kMaxDepth) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": nested more than ", kMaxDepth, " deep"));
  }
  std::map<int, int> seen;  // index of each repeated field, for the path
  for (;;) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0) return absl::OkStatus();  // end of the message (or malformed)
    const FieldDescriptor* f = d->FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
    const bool nested = f != nullptr &&
                        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
                        (f->type() == FieldDescriptor::TYPE_STRING ||
                         f->type() == FieldDescriptor::TYPE_MESSAGE);
    if (!nested) {
      if (!WireFormatLite::SkipField(in, tag)) return absl::OkStatus();
      continue;
    }
    std::string name = path.empty() ? std::string(f->name()) : absl::StrCat(path, ".", f->name());
    if (f->is_repeated()) absl::StrAppend(&name, "[", seen[f->number()]++, "]");
    uint32_t length = 0;
    if (!in->ReadVarint32(&length)) return absl::OkStatus();
    if (f->type() == FieldDescriptor::TYPE_STRING) {
      std::string value;
      if (!in->ReadString(&value, static_cast<int>(length))) return absl::OkStatus();
      if (!IsValidUtf8(value)) return absl::InvalidArgumentError(name + ": not valid UTF-8");
      continue;
    }
    const CodedInputStream::Limit limit = in->PushLimit(static_cast<int>(length));
    if (absl::Status st = FindBadUtf8(in, f->message_type(), name, depth + 1); !st.ok()) return st;
    if (in->BytesUntilLimit() != 0) return absl::OkStatus();  // malformed inside
    in->PopLimit(limit);
  }
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int n;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) n = 1, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) n = 2, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) n = 3, cp = c & 0x07;
    else return false;
    if (end - p <= n) return false;
    for (int i = 1; i <= n; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    p += n + 1;
  }
  return true;
}

absl::Status ParseRequestBytes(std::string_view bytes, google::protobuf::Message* out) {
  const Descriptor* d = out->GetDescriptor();
  {
    CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()), static_cast<int>(bytes.size()));
    in.SetRecursionLimit(kMaxDepth);
    if (absl::Status st = FindBadUtf8(&in, d, "", 0); !st.ok()) return st;
  }
  if (!out->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request: ", bytes.size(), " bytes that are not a valid ", d->full_name(),
        " message (malformed protobuf wire data)"));
  }
  return absl::OkStatus();
}

absl::Status ParseRequestBuffer(const grpc::ByteBuffer& buffer, google::protobuf::Message* out) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return absl::InvalidArgumentError("request: unreadable message");
  std::string bytes;
  bytes.reserve(buffer.Length());
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return ParseRequestBytes(bytes, out);
}

}  // namespace specline
