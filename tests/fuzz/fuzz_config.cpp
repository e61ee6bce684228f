// libFuzzer target: the config parser (config::parse: JSON text -> cluster -> validation).
//
// Checked, besides "no crash, no sanitizer report":
// - parse throws nothing but config_error, and never the "unexpected JSON error" one,
//   which marks a type check the readers missed (config.cpp parse_text);
// - an accepted config round-trips: to_json -> dump -> parse -> to_json gives the same
//   JSON (config.hpp: "The config as JSON (round-trips through parse)"), and its knobs
//   pass validate() on their own.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "config/config.hpp"

namespace config = vidline::config;

namespace {

/// Relative paths resolve against this; parse never touches it (only lexically).
const char* const base_dir = "/nonexistent/vidline-fuzz";

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_config: property violated: %s\n", what.c_str());
  std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(bytes), size);
  config::cluster c;
  try {
    c = config::parse(text, base_dir);
  } catch (const config::config_error& e) {
    // Compared at the start of the message: the fuzzer learns the words and puts them
    // into inputs, so they turn up inside quoted syntax errors.
    if (e.path().empty() && e.message().rfind("unexpected JSON error: ", 0) == 0)
      fail(std::string("a JSON type error escaped the readers: ") + e.what());
    return 0;
  }

  std::string first;
  try {
    first = config::to_json(c).dump();
  } catch (const std::exception& e) {
    fail(std::string("to_json/dump of an accepted config threw: ") + e.what());
  }
  try {
    const config::cluster again = config::parse(first, base_dir);
    const std::string second = config::to_json(again).dump();
    if (second != first)
      fail("to_json(parse(to_json(c))) != to_json(c):\n" + first + "\n" + second);
    config::validate(again.knobs);
  } catch (const config::config_error& e) {
    fail(std::string("the config written back is refused: ") + e.what() + "\n" + first);
  }
  return 0;
}
