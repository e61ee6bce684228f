#include "actors/latents/store_machine.hpp"

namespace vidline::actors::latents {

uint64_t state::bytes() const {
  uint64_t n = 0;
  for (auto& [sha, h] : latents)
    n += h.f.bytes;
  return n;
}

namespace {

/// Removes the released latents whose retention is over.
void expire(state& s, double now, std::vector<effect>& fx) {
  for (auto it = s.latents.begin(); it != s.latents.end();) {
    const bool over = it->second.f.checkpoint_step != 0 || now - it->second.released_at >= s.retention_s;
    if (it->second.released_at >= 0 && over) {
      fx.push_back(fx_remove{it->first});
      it = s.latents.erase(it);
    } else {
      ++it;
    }
  }
}

} // namespace

std::vector<effect> step(state& s, const event& e, double now) {
  std::vector<effect> fx;
  const bool was_accepting = s.accepting();
  if (auto* sc = std::get_if<ev_scan>(&e)) {
    std::map<std::string, held> next;
    for (auto& [sha, f] : sc->files) {
      auto it = s.latents.find(sha);
      next[sha] = held{f, it == s.latents.end() ? -1.0 : it->second.released_at};
    }
    s.latents = std::move(next);
    expire(s, now, fx);
    msg::latent_holdings h;
    h.host = s.host;
    h.epoch = s.epoch;
    h.seq = ++s.seq;
    for (auto& [sha, l] : s.latents)
      if (l.released_at < 0)
        h.latents.push_back(msg::latent_held{sha, l.f.bytes, l.f.run_id, l.f.index,
                                             l.f.checkpoint_step, l.f.attempt});
    h.bytes = s.bytes();
    h.accepting = s.accepting();
    fx.push_back(fx_report{std::move(h)});
  } else if (auto* r = std::get_if<ev_release>(&e)) {
    for (auto& sha : r->sha256s) {
      auto it = s.latents.find(sha);
      if (it != s.latents.end() && it->second.released_at < 0)
        it->second.released_at = now;
    }
    expire(s, now, fx);
  }
  if (s.accepting() != was_accepting) {
    fx.push_back(fx_accepting{s.accepting()});
    fx.push_back(fx_log{2, std::string(s.accepting() ? "below" : "at")
                             + " the latent budget: " + std::to_string(s.bytes()) + " of "
                             + std::to_string(s.budget_bytes) + " bytes; pools "
                             + (s.accepting() ? "take jobs again" : "stop taking jobs")});
  }
  return fx;
}

} // namespace vidline::actors::latents
