#pragma once
/// Text that came from outside: UTF-8 checks. JSON (the journal, the status contract)
/// holds only valid UTF-8, and nlohmann's dump() throws on anything else, so every string
/// from a message is checked or repaired before it can reach one.

#include <string>
#include <string_view>

namespace vidline::text {

/// Whether `s` is valid UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF).
bool is_valid_utf8(std::string_view s);

/// `s` with every byte that does not begin a valid UTF-8 sequence replaced by U+FFFD;
/// valid input comes back unchanged.
std::string to_valid_utf8(std::string_view s);

/// Whether `s` holds no control characters (below 0x20, or 0x7f): safe to log or to put
/// on one line of a file.
bool is_single_line(std::string_view s);

} // namespace vidline::text
