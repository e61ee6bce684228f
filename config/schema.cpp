/// The value rules shared by the JSON reader and the validator.

#include "config/json_reader.hpp"
#include "config/schema.hpp"

namespace vidline::config::detail {

const std::vector<std::string>& vendors() {
  static const std::vector<std::string> list{"nvidia", "amd", "intel", "cpu"};
  return list;
}

const std::vector<std::string>& backend_types() {
  static const std::vector<std::string> list{"sim", "exec", "worker", "comfyui"};
  return list;
}

const std::vector<std::string>& dispatch_policies() {
  static const std::vector<std::string> list{"in_turn", "first_free", "auto"};
  return list;
}

void check_name(const std::string& name, const std::string& path) {
  if (name.empty())
    throw config_error(path, "must not be empty");
  const auto allowed = [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '-' || ch == '.';
  };
  bool ok = name.size() <= name_max && name.front() != '.' && name.front() != '-';
  for (char ch : name)
    ok = ok && allowed(ch);
  if (!ok)
    throw config_error(path, "name '" + name + "' must be 1-" + std::to_string(name_max) +
                                 " characters of A-Z a-z 0-9 _ . - not starting with '.' "
                                 "or '-'");
}

void check_one_of(const std::string& value, const std::vector<std::string>& allowed,
                  const std::string& path, const std::string& what) {
  for (const auto& a : allowed)
    if (value == a)
      return;
  throw config_error(path, "unknown " + what + " '" + value + "'" +
                               did_you_mean(value, allowed) + "; allowed: " + join(allowed));
}

} // namespace vidline::config::detail
