// Preflight's profile check: every pool and decoder kind of the mode has timings in the
// profile the line plans and dispatches by. A kind the profile does not know leaves plan
// refusing the mode and the coordinator without estimates for that pool.
#include <optional>
#include <set>

#include "config/profile/profile.hpp"
#include "nodes/verbs/preflight.hpp"

namespace vidline::nodes::verbs {

std::vector<check_line> check_profile_kinds(const config::cluster& c, const config::mode& m) {
  using lvl = check_line::level;
  std::vector<check_line> out;
  std::string from;
  for (auto& p : c.pools)
    if (auto* b = c.find_backend(p.backend); b != nullptr && b->type == "sim" && !b->profile.empty())
      from = b->profile;
  std::optional<config::profile::profile> loaded;
  try {
    loaded = from.empty() ? config::profile::profile::reference() : config::profile::profile::load(from);
  } catch (const std::exception& e) {
    out.push_back({lvl::fail, "profile", from + ": " + e.what(), "fix the profile file", ""});
    return out;
  }
  const auto& prof = *loaded;
  const std::string name = from.empty() ? "the embedded reference profile" : from;
  // Old kind names load as the new ones (config/profile/kinds.hpp): said, so files move on.
  for (const auto& k : c.old_profile_keys)
    out.push_back({lvl::warn, "profile name " + k.path,
                   "\"" + k.written + "\" is the old name of kind '" + k.kind + "' (read as it)",
                   "write \"profile\": \"" + k.kind + "\" (or leave \"profile\" out: it is "
                   "derived from the GPUs' model)", ""});
  for (const auto& k : prof.old_names())
    out.push_back({lvl::warn, "profile name " + k.path,
                   name + " names kind '" + k.kind + "' by its old name (read as it)",
                   "rename " + k.path + " to '" + k.kind + "' in " + name, ""});
  auto known = [](const auto& map) {
    std::string k;
    for (auto& [key, v] : map)
      k += (k.empty() ? "" : ", ") + key;
    return k;
  };
  const std::size_t renamed = out.size();
  // The sim backend paces itself by the profile: a kind it lacks cannot run. A real
  // backend runs, but plan and the coordinator's estimates lack its timings: a warning.
  auto level = [&](const std::string& backend) {
    auto* b = c.find_backend(backend);
    return b != nullptr && b->type == "sim" ? lvl::fail : lvl::warn;
  };
  for (auto& p : m.pools)
    if (auto* pool = c.find_pool(p); pool && !prof.pools().count(pool->profile_key))
      out.push_back({level(pool->backend), "profile pool " + p,
                     "its kind '" + pool->profile_key + "' has no timings in " + name +
                       " (its pool kinds: " + known(prof.pools()) + ")",
                     "give the pool the profile's name for this card (\"profile\": one of " +
                       known(prof.pools()) + "), or time the card with `vidline profile build`",
                     ""});
  for (auto& d : m.decoders)
    if (auto* dec = c.find_decoder(d); dec && !prof.decoders().count(dec->profile_key))
      out.push_back({level(dec->backend), "profile decoder " + d,
                     "its kind '" + dec->profile_key + "' has no timings in " + name +
                       " (its decoder kinds: " + known(prof.decoders()) + ")",
                     "give the decoder the profile's name for this card (\"profile\": one of " +
                       known(prof.decoders()) + "), or time the card with `vidline profile build`",
                     ""});
  if (out.size() == renamed)
    out.push_back({lvl::ok, "profile", "every pool and decoder kind of mode " + m.name +
                                         " has timings in " + name, "", ""});
  return out;
}

} // namespace vidline::nodes::verbs
