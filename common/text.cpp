#include "common/text.hpp"

namespace vidline::text {
namespace {

/// The length of the valid UTF-8 sequence starting at s[i], or 0 when there is none.
std::size_t sequence_at(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const auto cont = [&](std::size_t k) { return k < s.size() && (b(k) & 0xC0) == 0x80; };
  const unsigned char c = b(i);
  if (c < 0x80)
    return 1;
  if (c >= 0xC2 && c <= 0xDF && cont(i + 1))
    return 2;
  if (c >= 0xE0 && c <= 0xEF && cont(i + 1) && cont(i + 2) &&
      !(c == 0xE0 && b(i + 1) < 0xA0) &&  // overlong
      !(c == 0xED && b(i + 1) > 0x9F))    // surrogates
    return 3;
  if (c >= 0xF0 && c <= 0xF4 && cont(i + 1) && cont(i + 2) && cont(i + 3) &&
      !(c == 0xF0 && b(i + 1) < 0x90) &&  // overlong
      !(c == 0xF4 && b(i + 1) > 0x8F))    // above U+10FFFF
    return 4;
  return 0;
}

} // namespace

bool is_valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = sequence_at(s, i);
    if (n == 0)
      return false;
    i += n;
  }
  return true;
}

std::string to_valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = sequence_at(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

bool is_single_line(std::string_view s) {
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f)
      return false;
  }
  return true;
}

} // namespace vidline::text
