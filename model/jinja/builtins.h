// What templates call: jinja2's object protocol (attribute and item access,
// iteration, operators), its filters and tests, and the str/dict/list
// methods templates use. Each follows the Python behaviour a template sees
// under ImmutableSandboxedEnvironment, including where it raises.
#pragma once

#include <string>
#include <string_view>

#include "model/jinja/value.h"

namespace specline::jinja {

// ops.cc: the object protocol.
// `obj.name`: a method of str/dict/list first (as Python's getattr), then a
// dict key; missing: Undefined. On Undefined it fails (jinja2's
// UndefinedError).
Value GetAttr(const Value& obj, const std::string& name);
// `obj[key]`: missing or inapplicable gives Undefined; on Undefined fails.
Value GetItem(const Value& obj, const Value& key);
Value Slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// The items `for` visits (dict keys, a string's characters); fails on a
// non-iterable.
List Iterate(const Value& v);
// len(); fails where Python's len() does.
int64_t Length(const Value& v);
bool Contains(const Value& container, const Value& item);  // `item in container`
// + - * / // % ** and ~, with Python's int/float rules; `max_string` caps
// string and list repetition.
Value BinaryOp(std::string_view op, const Value& a, const Value& b, int64_t max_string);
Value Negate(const Value& v);

// builtins.cc: filters, tests, methods and the undefined check.
bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);
Value ApplyFilter(std::string_view name, const Value& input, const CallArgs& args);
bool ApplyTest(std::string_view name, const Value& input, const CallArgs& args);
// A method bound to `self` (`s.strip`), if the type has one by that name.
bool HasMethod(const Value& self, std::string_view name);
Value CallMethod(const Value& self, std::string_view name, const CallArgs& args);

// Python's `fmt % args` for %s %r %d %i %%.
std::string PrintfFormat(const std::string& fmt, const List& args);

// markupsafe.escape of a str (& < > " ').
std::string HtmlEscape(const std::string& s);

// Fails with jinja2's message when `v` is Undefined ("'x' is undefined").
void RequireDefined(const Value& v);
[[noreturn]] void FailUndefined(const Value& v);

}  // namespace specline::jinja
