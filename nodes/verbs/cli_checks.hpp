#pragma once
/// Checks of the command line's numeric options, with errors a person can read: CLI11's own
/// (CLI::NonNegativeNumber, CLI::Range on a uint64) print their bounds in full (DBL_MAX in
/// 300 digits) and let "-5" through a uint64 as 18446744073709551611.
///
/// Each is a CLI::Validator for `->check(...)`; it sees the text as typed, before the
/// conversion, and its message follows the option's name ("--grace: ...").

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>

namespace vidline::nodes::verbs {

/// A whole number written with digits only (no sign, no spaces) from `lo` to `hi`.
inline CLI::Validator whole_number(uint64_t lo, uint64_t hi) {
  const std::string range = std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
    [lo, hi, range](std::string& s) -> std::string {
      bool digits = !s.empty() && s.size() <= 20;
      for (char c : s)
        digits = digits && c >= '0' && c <= '9';
      if (!digits)
        return "must be a whole number from " + range + ", got '" + s + "'";
      errno = 0;
      const unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
      if (errno == ERANGE || v < lo || v > hi)
        return "must be from " + range + ", got " + s;
      return "";
    },
    "INT in [" + range + "]");
}

/// A number of seconds (decimals allowed), finite, at least `lo` (`lo` itself allowed
/// unless `above`), at most `hi`.
inline CLI::Validator seconds(double lo, bool above = false, double hi = 365.0 * 86400) {
  auto text = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return std::string(buf);
  };
  const std::string range = (above ? "more than " : "at least ") + text(lo) + " and at most "
                            + text(hi);
  return CLI::Validator(
    [lo, hi, above, range](std::string& s) -> std::string {
      char* end = nullptr;
      errno = 0;
      const double v = std::strtod(s.c_str(), &end);
      if (s.empty() || end == s.c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(v))
        return "must be a number of seconds, got '" + s + "'";
      if (v < lo || (above && v == lo) || v > hi)
        return "must be " + range + " seconds, got " + s;
      return "";
    },
    "SECONDS");
}

/// Why `--seed` with `--count` is refused ("" = it is not): job i gets seed + i, and the
/// last job's seed must not pass 2^64-1 (it would wrap to 0).
inline std::string seed_range_error(uint64_t seed, uint64_t count) {
  if (count == 0 || seed <= UINT64_MAX - (count - 1))
    return "";
  return "--seed " + std::to_string(seed) + " with --count " + std::to_string(count)
         + ": the last job's seed would pass 2^64-1 (" + std::to_string(UINT64_MAX)
         + "); the largest --seed for this count is " + std::to_string(UINT64_MAX - (count - 1));
}

} // namespace vidline::nodes::verbs
