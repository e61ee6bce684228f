/// The peer liveness machine (liveness.hpp).

#include "nodes/bus/liveness.hpp"

#include <algorithm>
#include <stdexcept>

namespace vidline::nodes::bus {

liveness::liveness(const std::vector<std::string>& peers, int64_t interval_ms, int misses) {
  if (interval_ms <= 0)
    throw std::invalid_argument("liveness: heartbeat_interval_ms must be positive");
  if (misses <= 0)
    throw std::invalid_argument("liveness: heartbeat_misses must be positive");
  silence_limit_ms_ = interval_ms * misses;
  stall_gap_ms_ = interval_ms + interval_ms / 2;
  for (const auto& p : peers)
    peers_.emplace(p, peer_liveness{});
}

std::vector<liveness_effect> liveness::beat_received(const std::string& host,
                                                     uint64_t boot_id, int64_t now_ms) {
  std::vector<liveness_effect> out;
  observe(now_ms, out);
  auto it = peers_.find(host);
  if (it == peers_.end() || boot_id == 0)
    return out;
  peer_liveness& p = it->second;
  // A beat of the boot before the last restart can still be in flight on an old
  // connection; taking it would flip the peer back and forth between boots.
  if (p.previous_boot_id != 0 && boot_id == p.previous_boot_id)
    return out;
  if (p.boot_id != 0 && boot_id != p.boot_id) {
    p.previous_boot_id = p.boot_id;
    p.boot_id = boot_id;
    out.push_back({liveness_effect::kind::peer_restarted, host, boot_id});
  }
  p.boot_id = boot_id;
  p.last_beat_ms = now_ms;
  p.unbeaten_since_ms = -1;
  p.declared_down = false;
  if (!p.up) {
    p.up = true;
    out.push_back({liveness_effect::kind::peer_up, host, boot_id});
  }
  return out;
}

std::vector<liveness_effect> liveness::frame_received(const std::string& host,
                                                      int64_t now_ms) {
  std::vector<liveness_effect> out;
  observe(now_ms, out);
  auto it = peers_.find(host);
  if (it != peers_.end() && !it->second.up && !it->second.declared_down
      && it->second.unbeaten_since_ms < 0)
    it->second.unbeaten_since_ms = now_ms;
  return out;
}

/// When `p` is declared down if nothing changes; -1 when it is not being judged.
static int64_t judged_until(const peer_liveness& p, int64_t limit) {
  if (p.up)
    return p.last_beat_ms + limit;
  if (p.unbeaten_since_ms >= 0)
    return p.unbeaten_since_ms + limit;
  return -1;
}

void liveness::observe(int64_t now_ms, std::vector<liveness_effect>& out) {
  const bool stalled = fed_ && now_ms - last_fed_ms_ > stall_gap_ms_;
  if (stalled) {
    // The peers' beats of the stall were not read (or never sent: peers drop a connection
    // whose other end stops answering): judging them on it would blame them for our pause.
    ++stalls_;
    for (auto& [host, p] : peers_) {
      if (p.up)
        p.last_beat_ms = std::max(p.last_beat_ms, now_ms);
      else if (p.unbeaten_since_ms >= 0)
        p.unbeaten_since_ms = std::max(p.unbeaten_since_ms, now_ms);
    }
    liveness_effect e;
    e.what = liveness_effect::kind::stalled;
    e.gap_ms = now_ms - last_fed_ms_;
    out.push_back(e);
  }
  if (!fed_ || now_ms > last_fed_ms_)
    last_fed_ms_ = now_ms;
  fed_ = true;
}

std::vector<liveness_effect> liveness::tick(int64_t now_ms) {
  std::vector<liveness_effect> out;
  observe(now_ms, out);
  for (auto& [host, p] : peers_) {
    const int64_t until = judged_until(p, silence_limit_ms_);
    if (until >= 0 && now_ms >= until) {
      p.up = false;
      p.unbeaten_since_ms = -1;
      p.declared_down = true;
      out.push_back({liveness_effect::kind::peer_down, host, p.boot_id});
    }
  }
  return out;
}

std::optional<int64_t> liveness::next_deadline() const {
  std::optional<int64_t> next;
  for (const auto& [host, p] : peers_) {
    const int64_t until = judged_until(p, silence_limit_ms_);
    if (until >= 0 && (!next || until < *next))
      next = until;
  }
  return next;
}

const peer_liveness* liveness::peer(const std::string& host) const {
  auto it = peers_.find(host);
  return it == peers_.end() ? nullptr : &it->second;
}

const char* to_string(liveness_effect::kind k) {
  switch (k) {
  case liveness_effect::kind::peer_up:
    return "peer_up";
  case liveness_effect::kind::peer_down:
    return "peer_down";
  case liveness_effect::kind::peer_restarted:
    return "peer_restarted";
  case liveness_effect::kind::stalled:
    return "stalled";
  }
  return "unknown";
}

} // namespace vidline::nodes::bus
