#pragma once
/// Which names may become file names: pure checks of text that came from a message or a
/// config, before anything uses it as part of a path. No I/O, so the state machines and
/// the inbound checks use them as the nodes do.

#include <cstddef>
#include <string_view>

namespace vidline::names {

/// True when `name` is a plain file name: not empty, no '/', not "." or "..", no NUL.
bool is_plain_name(std::string_view name);

/// True when `name` may name a file or directory under a data directory whatever its
/// origin (a message, a config): 1-`max` characters of A-Z a-z 0-9 _ . - not starting
/// with '.' or '-' (so never "..", a hidden file, or an option to a child program), the
/// rule config names follow. Run ids, host names and attempt numbers all pass it.
bool is_safe_name(std::string_view name, std::size_t max = 128);

} // namespace vidline::names
