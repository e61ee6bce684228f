#pragma once
/// Peer liveness: a pure state machine fed with heartbeats and ticks, `now` passed in (ms
/// on any monotonic clock). No clock, socket or thread inside, so tests drive it on
/// virtual time and the bus drives it on the real one.
///
///   per peer:            beat (known boot)          beat (new boot)
///        +--------+   ------------------> +----+ ------------------> +----+
///        |  down  |   <------------------ | up |   peer_restarted    | up |
///        +--------+   silent misses x ivl +----+                     +----+
///   down + beat: peer_up (preceded by peer_restarted when the boot_id changed)
///   up + silence of heartbeat_misses x heartbeat_interval: peer_down
///   a beat carrying the boot_id the peer had before its last restart: ignored (stale)

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace vidline::nodes {

/// What the liveness machine tells its owner to do or announce.
struct liveness_effect {
  enum class kind {
    peer_up,         ///< the peer is heard again (or for the first time)
    peer_down,       ///< the peer was silent too long
    peer_restarted,  ///< the peer's boot_id changed: whatever it was doing is lost
  };
  kind what = kind::peer_up;
  std::string host;
  uint64_t boot_id = 0;  ///< the peer's current boot (for peer_down: the last one heard)
};

/// One peer as the machine sees it.
struct peer_liveness {
  bool up = false;
  int64_t last_beat_ms = 0;       ///< when the last accepted beat arrived
  uint64_t boot_id = 0;           ///< 0 until the first beat
  uint64_t previous_boot_id = 0;  ///< the boot before the last restart; its beats are stale
};

/// The liveness machine of one node over its configured peers.
class liveness {
public:
  /// `peers`: the hosts to track (others' beats are ignored). A peer is declared down
  /// after `misses` x `interval_ms` without a beat. Throws std::invalid_argument when
  /// interval_ms or misses is not positive.
  liveness(const std::vector<std::string>& peers, int64_t interval_ms, int misses);

  /// A heartbeat from `host` carrying `boot_id` arrived at `now_ms`.
  std::vector<liveness_effect> beat_received(const std::string& host, uint64_t boot_id,
                                             int64_t now_ms);

  /// Time passed: declares down every up peer silent for the limit.
  std::vector<liveness_effect> tick(int64_t now_ms);

  /// The earliest time at which tick() may declare a peer down; none when no peer is up.
  std::optional<int64_t> next_deadline() const;

  /// The peer's state; nullptr for a host that is not a configured peer.
  const peer_liveness* peer(const std::string& host) const;

  /// The silence after which an up peer is declared down, in ms.
  int64_t silence_limit_ms() const { return silence_limit_ms_; }

private:
  std::map<std::string, peer_liveness> peers_;
  int64_t silence_limit_ms_;
};

/// A name for an effect kind, for logs.
const char* to_string(liveness_effect::kind k);

} // namespace vidline::nodes
