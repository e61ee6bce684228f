// Drains (drain.hpp): state::drains and the `drained` flags of the views, kept equal.
#include "actors/coordinator/drain.hpp"
#include "actors/coordinator/index.hpp"

namespace vidline::actors::coordinator {
namespace {

/// Sets the view's flag of `target` ("pool:NAME" / "decoder:NAME"); false when there is
/// no such pool or decoder.
bool set_flag(state& s, const std::string& target, bool on) {
  if (target.rfind("pool:", 0) == 0) {
    auto name = target.substr(5);
    auto it = s.pools.find(name);
    if (it == s.pools.end())
      return false;
    it->second.drained = on;
    if (s.idx.built && s.idx.owner == &s)
      if (auto id = s.idx.pool_ids.find(name); id != s.idx.pool_ids.end())
        detail::refresh_pool(s, id->second);
    return true;
  }
  if (target.rfind("decoder:", 0) == 0) {
    auto it = s.decoders.find(target.substr(8));
    if (it == s.decoders.end())
      return false;
    it->second.drained = on;
    return true;
  }
  return false;
}

void changed(std::vector<effect>& fx, const std::string& target, bool drained,
             const std::string& reason) {
  fx.push_back(fx_drain_changed{target, drained, reason});
  fx.push_back(fx_log{drained ? 3 : 2, target + (drained ? " drained: " : " back in service: ")
                                           + reason});
}

/// The targets `e` names, or why none.
std::vector<std::string> targets_of(const state& s, const ev_drain& e, std::string& error) {
  std::vector<std::string> out;
  if (e.kind == "pool") {
    if (s.pools.count(e.name))
      out.push_back("pool:" + e.name);
    else
      error = "no pool named '" + e.name + "'";
  } else if (e.kind == "decoder") {
    if (s.decoders.count(e.name))
      out.push_back("decoder:" + e.name);
    else
      error = "no decoder named '" + e.name + "'";
  } else if (e.kind == "host") {
    for (auto& [name, p] : s.pools)
      if (p.host == e.name)
        out.push_back("pool:" + name);
    for (auto& [name, d] : s.decoders)
      if (d.host == e.name)
        out.push_back("decoder:" + name);
    if (out.empty())
      error = "no pool or decoder runs on a host named '" + e.name + "'";
  } else {
    error = "what to drain must be pool, decoder or host, not '" + e.kind + "'";
  }
  return out;
}

} // namespace

void apply_drain(state& s, const ev_drain& e, double now, std::vector<effect>& fx) {
  std::string error;
  auto targets = targets_of(s, e, error);
  if (targets.empty()) {
    fx.push_back(fx_drain_answer{{}, error});
    return;
  }
  bool any = false;
  for (auto& t : targets) {
    if (e.drain) {
      auto& d = s.drains[t];
      const bool was = d.active();
      const std::string reason = e.reason.empty() ? "drained by hand" : e.reason;
      any = any || !d.by_hand || d.reason != reason;
      d.by_hand = true;
      d.reason = reason;
      if (!was) {
        d.since = now;
        set_flag(s, t, true);
        changed(fx, t, true, reason);
      }
    } else if (auto it = s.drains.find(t); it != s.drains.end()) {
      // Undrain clears the sick cards too: they drain it again only when they next change.
      s.drains.erase(it);
      set_flag(s, t, false);
      changed(fx, t, false, "undrained by hand");
      any = true;
    }
  }
  if (any)
    fx.push_back(fx_persist_drains{});
  fx.push_back(fx_drain_answer{targets, ""});
}

void apply_gpu_health(state& s, const ev_gpu_health& e, double now, std::vector<effect>& fx) {
  auto known = s.gpu_sick.find(e.gpu);
  if (known != s.gpu_sick.end() && known->second == e.sick)
    return;
  s.gpu_sick[e.gpu] = e.sick;
  bool any = false;
  if (e.sick) {
    fx.push_back(fx_log{3, "card " + e.gpu + " is sick: " + e.reason});
    for (auto& t : e.users) {
      if (!(t.rfind("pool:", 0) == 0 ? s.pools.count(t.substr(5))
                                     : t.rfind("decoder:", 0) == 0 && s.decoders.count(t.substr(8))))
        continue;
      auto& d = s.drains[t];
      const bool was = d.active();
      const bool added = d.sick_gpus.insert(e.gpu).second;  // for every user, not once
      any = any || added;
      if (!was) {
        d.since = now;
        d.reason = "card " + e.gpu + ": " + e.reason;
        set_flag(s, t, true);
        changed(fx, t, true, d.reason);
      }
    }
  } else {
    // Every drain of this card goes, whoever it was reported for.
    for (auto it = s.drains.begin(); it != s.drains.end();) {
      if (it->second.sick_gpus.erase(e.gpu) == 0) {
        ++it;
        continue;
      }
      any = true;
      if (it->second.active()) {
        ++it;
        continue;
      }
      const std::string t = it->first;
      it = s.drains.erase(it);
      set_flag(s, t, false);
      changed(fx, t, false, "card " + e.gpu + " recovered");
    }
  }
  if (any)
    fx.push_back(fx_persist_drains{});
}

void restore_drains(state& s, std::map<std::string, drain> drains) {
  for (auto& [name, p] : s.pools)
    p.drained = false;
  for (auto& [name, d] : s.decoders)
    d.drained = false;
  s.drains.clear();
  for (auto& [t, d] : drains)
    if (d.active() && set_flag(s, t, true))
      s.drains.emplace(t, d);
  s.idx.built = false;  // the next step reindexes with the flags
}

} // namespace vidline::actors::coordinator
