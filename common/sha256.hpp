#pragma once
/// SHA-256 of files; the digest of bytes in memory and its hex form are common/digest.hpp,
/// included here so one include gives both.

#include <cstdint>
#include <string>

#include "common/digest.hpp"

namespace vidline {

/// SHA-256 of a whole file as hex; empty string when it cannot be read.
std::string sha256_file_hex(const std::string& path, uint64_t* bytes = nullptr);

} // namespace vidline
