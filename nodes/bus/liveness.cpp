/// The peer liveness machine (liveness.hpp).

#include "nodes/bus/liveness.hpp"

#include <algorithm>
#include <stdexcept>

namespace vidline::nodes {

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
  if (!p.up) {
    p.up = true;
    out.push_back({liveness_effect::kind::peer_up, host, boot_id});
  }
  return out;
}

void liveness::observe(int64_t now_ms, std::vector<liveness_effect>& out) {
  const bool stalled = fed_ && now_ms - last_fed_ms_ > stall_gap_ms_;
  if (stalled) {
    // The peers' beats of the stall were not read (or never sent: peers drop a connection
    // whose other end stops answering): judging them on it would blame them for our pause.
    ++stalls_;
    for (auto& [host, p] : peers_)
      if (p.up)
        p.last_beat_ms = std::max(p.last_beat_ms, now_ms);
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
    if (p.up && now_ms - p.last_beat_ms >= silence_limit_ms_) {
      p.up = false;
      out.push_back({liveness_effect::kind::peer_down, host, p.boot_id});
    }
  }
  return out;
}

std::optional<int64_t> liveness::next_deadline() const {
  std::optional<int64_t> next;
  for (const auto& [host, p] : peers_)
    if (p.up && (!next || p.last_beat_ms + silence_limit_ms_ < *next))
      next = p.last_beat_ms + silence_limit_ms_;
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

} // namespace vidline::nodes
