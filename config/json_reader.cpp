#include "config/json_reader.hpp"

#include <algorithm>
#include <utility>

#include "config/config.hpp"

namespace vidline::config::detail {

namespace {

/// Levenshtein distance between two short words.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      const std::size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      row[j] = std::min({above + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

/// Tracks the open objects and arrays while the parser runs, so that a repeated key can
/// be reported at its JSON pointer.
class duplicate_key_check {
public:
  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        open(event == json::parse_event_t::array_start);
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!open_.empty())
          open_.pop_back();
        break;
      case json::parse_event_t::key:
        on_key(parsed.get<std::string>());
        break;
      case json::parse_event_t::value:
        if (!open_.empty() && open_.back().is_array)
          ++open_.back().next_index;
        break;
    }
    return true;
  }

private:
  struct container {
    std::string path;
    bool is_array = false;
    std::size_t next_index = 0;
    std::vector<std::string> keys;  // objects in a config are small: linear search
  };

  void open(bool is_array) {
    std::string path;
    if (!open_.empty()) {
      container& parent = open_.back();
      path = parent.is_array ? child(parent.path, parent.next_index++)
                             : child(parent.path, parent.keys.back());
    }
    open_.push_back(container{std::move(path), is_array, 0, {}});
  }

  void on_key(std::string key) {
    container& object = open_.back();
    if (std::find(object.keys.begin(), object.keys.end(), key) != object.keys.end())
      throw config_error(child(object.path, key), "duplicate key '" + key + "'");
    object.keys.push_back(std::move(key));
  }

  std::vector<container> open_;
};

/// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string strip_exception_id(const std::string& what) {
  const auto end = what.find("] ");
  return what.rfind("[json.exception.", 0) == 0 && end != std::string::npos
             ? what.substr(end + 2)
             : what;
}

[[noreturn]] void wrong_type(const json& j, const std::string& path, const char* expected) {
  throw config_error(path, std::string("wrong type: expected ") + expected + ", got " +
                               type_name(j));
}

} // namespace

std::string child(const std::string& parent, std::string_view key) {
  std::string path = parent + "/";
  for (char c : key) {
    if (c == '~')
      path += "~0";
    else if (c == '/')
      path += "~1";
    else
      path += c;
  }
  return path;
}

std::string child(const std::string& parent, std::size_t index) {
  return parent + "/" + std::to_string(index);
}

std::string type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: return "number";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    default: return "binary";
  }
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  const std::string* best = nullptr;
  std::size_t best_distance = 0;
  for (const auto& candidate : candidates) {
    const std::size_t d = edit_distance(word, candidate);
    if (best == nullptr || d < best_distance) {
      best = &candidate;
      best_distance = d;
    }
  }
  // Up to half the word (at least 2 edits) still reads as a slip; more is another word.
  const std::size_t near = std::max<std::size_t>(2, word.size() / 2);
  if (best == nullptr || best_distance > near)
    return "";
  return " (did you mean '" + *best + "'?)";
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words)
    out += (out.empty() ? "" : ", ") + w;
  return out;
}

json parse_json(const std::string& text, const std::string& source) {
  try {
    return json::parse(text, duplicate_key_check{});
  } catch (const json::parse_error& e) {
    const std::string where = source.empty() ? "" : source + ": ";
    throw config_error("", where + "invalid JSON: " + strip_exception_id(e.what()));
  } catch (const json::out_of_range& e) {  // a number too large for a double: 1e999999
    const std::string where = source.empty() ? "" : source + ": ";
    throw config_error("", where + "invalid JSON: " + strip_exception_id(e.what()));
  }
}

std::string range_message(int64_t lo, int64_t hi, const std::string& got) {
  return "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " +
         got;
}

std::string read_string(const json& j, const std::string& path) {
  if (!j.is_string())
    wrong_type(j, path, "string");
  return j.get<std::string>();
}

double read_number(const json& j, const std::string& path) {
  if (!j.is_number())
    wrong_type(j, path, "number");
  return j.get<double>();
}

int64_t read_integer(const json& j, const std::string& path, int64_t lo, int64_t hi) {
  if (!j.is_number_integer())
    wrong_type(j, path, "integer");
  if (j.is_number_unsigned()) {
    const auto u = j.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo)))
      throw config_error(path, range_message(lo, hi, std::to_string(u)));
    return static_cast<int64_t>(u);
  }
  const auto v = j.get<int64_t>();
  if (v < lo || v > hi)
    throw config_error(path, range_message(lo, hi, std::to_string(v)));
  return v;
}

std::vector<std::string> read_strings(const json& j, const std::string& path) {
  expect_array(j, path);
  std::vector<std::string> out;
  out.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i)
    out.push_back(read_string(j[i], child(path, i)));
  return out;
}

void expect_object(const json& j, const std::string& path) {
  if (!j.is_object())
    wrong_type(j, path, "object");
}

void expect_array(const json& j, const std::string& path) {
  if (!j.is_array())
    wrong_type(j, path, "array");
}

object_reader::object_reader(const json& j, std::string path, std::vector<std::string> allowed)
    : j_(j), path_(std::move(path)) {
  expect_object(j_, path_);
  for (const auto& item : j_.items()) {
    if (std::find(allowed.begin(), allowed.end(), item.key()) != allowed.end())
      continue;
    const std::string hint = did_you_mean(item.key(), allowed);
    throw config_error(path_of(item.key()),
                       "unknown key '" + item.key() + "'" + hint + "; allowed here: " +
                           join(allowed));
  }
}

bool object_reader::has(std::string_view key) const {
  return j_.find(key) != j_.end();
}

const json& object_reader::required(std::string_view key) const {
  const auto it = j_.find(key);
  if (it == j_.end())
    throw config_error(path_of(key), "missing required field '" + std::string(key) + "'");
  return *it;
}

std::string object_reader::string(std::string_view key) const {
  return read_string(required(key), path_of(key));
}

std::string object_reader::string_or(std::string_view key, std::string fallback) const {
  return has(key) ? string(key) : std::move(fallback);
}

double object_reader::number(std::string_view key) const {
  return read_number(required(key), path_of(key));
}

double object_reader::number_or(std::string_view key, double fallback) const {
  return has(key) ? number(key) : fallback;
}

int64_t object_reader::integer(std::string_view key, int64_t lo, int64_t hi) const {
  return read_integer(required(key), path_of(key), lo, hi);
}

std::vector<std::string> object_reader::strings(std::string_view key) const {
  return read_strings(required(key), path_of(key));
}

} // namespace vidline::config::detail
