#include "config/profile/kinds.hpp"

#include <algorithm>
#include <cctype>

namespace vidline::config::profile {

const std::vector<renamed_kind>& renamed_kinds() {
  static const std::vector<renamed_kind> all = {{"xtx", "rx7900xtx"}};
  return all;
}

std::optional<std::string> renamed(const std::string& key) {
  for (const auto& r : renamed_kinds()) {
    const std::string old = r.old_name;
    if (key == old)
      return std::string(r.name);
    // A pool of several such cards: the old name + "x" + its GPU count.
    if (key.size() > old.size() + 1 && key.compare(0, old.size(), old) == 0
        && key[old.size()] == 'x'
        && std::all_of(key.begin() + static_cast<std::ptrdiff_t>(old.size() + 1), key.end(),
                       [](unsigned char c) { return std::isdigit(c) != 0; }))
      return std::string(r.name) + key.substr(old.size());
  }
  return std::nullopt;
}

std::string current_kind(const std::string& key) {
  auto now = renamed(key);
  return now ? *now : key;
}

} // namespace vidline::config::profile
