#include "common/names.hpp"

namespace vidline::names {

bool is_plain_name(std::string_view name) {
  if (name.empty() || name == "." || name == "..")
    return false;
  for (char c : name)
    if (c == '/' || c == '\0')
      return false;
  return true;
}

bool is_safe_name(std::string_view name, std::size_t max) {
  if (name.empty() || name.size() > max || name.front() == '.' || name.front() == '-')
    return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.';
    if (!ok)
      return false;
  }
  return true;
}

} // namespace vidline::names
