#pragma once
/// Reading config JSON value by value, every error naming the value by its JSON pointer.
/// Internal to config/: the schema code (cluster_reader.cpp, knobs.cpp) is built on it.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace vidline::config::detail {

using json = nlohmann::json;

/// The JSON pointer of member `key` of the value at `parent` (RFC 6901 escaping).
std::string child(const std::string& parent, std::string_view key);

/// The JSON pointer of element `index` of the array at `parent`.
std::string child(const std::string& parent, std::size_t index);

/// The type of `j` as messages name it: "string", "integer", "number", "object", ...
std::string type_name(const json& j);

/// " (did you mean 'x'?)" when one of `candidates` is near enough to `word` to be what a
/// typo meant, else "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

/// "a, b, c".
std::string join(const std::vector<std::string>& words);

/// Parses JSON text. Rejects duplicate keys in any object (the JSON library would keep
/// the last one silently, so a second mode of the same name would vanish). A syntax error
/// throws config_error with path "" and the line and column, prefixed by `source`
/// (a file name) when it is not empty.
json parse_json(const std::string& text, const std::string& source);

/// The message for an integer outside [lo, hi], e.g. "must be between 1 and 65535, got 0".
std::string range_message(int64_t lo, int64_t hi, const std::string& got);

/// Typed reads of one value. Each throws config_error at `path` when `j` has another type.
std::string read_string(const json& j, const std::string& path);
double read_number(const json& j, const std::string& path);
/// An integer within [lo, hi] (so it fits the field it goes to).
int64_t read_integer(const json& j, const std::string& path, int64_t lo, int64_t hi);
/// An array of strings.
std::vector<std::string> read_strings(const json& j, const std::string& path);
void expect_object(const json& j, const std::string& path);
void expect_array(const json& j, const std::string& path);

/// One JSON object, read member by member. Construction checks that it is an object and
/// that every key it holds is one of `allowed`; an unknown key is an error at its own
/// path that names the closest allowed key, so a typo is never silently ignored.
class object_reader {
public:
  object_reader(const json& j, std::string path, std::vector<std::string> allowed);

  const std::string& path() const noexcept { return path_; }
  /// The JSON pointer of member `key`.
  std::string path_of(std::string_view key) const { return child(path_, key); }
  bool has(std::string_view key) const;
  /// Member `key`; throws "missing required field" when absent.
  const json& required(std::string_view key) const;

  std::string string(std::string_view key) const;
  std::string string_or(std::string_view key, std::string fallback) const;
  double number(std::string_view key) const;
  double number_or(std::string_view key, double fallback) const;
  int64_t integer(std::string_view key, int64_t lo, int64_t hi) const;
  std::vector<std::string> strings(std::string_view key) const;

private:
  const json& j_;
  std::string path_;
};

} // namespace vidline::config::detail
