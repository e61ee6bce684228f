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
///   down (never declared so) + another frame: silence counted from that frame; no beat
///   within the limit: peer_down. A peer that spoke (its pools reported, say) but died
///   before its first beat was read is declared down like one that was up, so what it was
///   given is taken back; one that was declared down is not declared so again until a
///   beat brings it up.
///
/// A local stall is not a peer's death. The owner feeds the machine at least once per
/// heartbeat interval (the bus's loop never sleeps longer). A gap of more than
/// `stall_gap_ms` (1.5 intervals) between two calls means this node was not running (its
/// host was paused with SIGSTOP, swapped out, a VM frozen): every up peer then gets a fresh
/// grace period (the silence is counted from now), so a peer is judged only on beats it
/// had a fair chance to deliver after the stall. The effect `stalled` says so, once.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace vidline::nodes::bus {

/// What the liveness machine tells its owner to do or announce.
struct liveness_effect {
  enum class kind {
    peer_up,         ///< the peer is heard again (or for the first time)
    peer_down,       ///< the peer was silent too long
    peer_restarted,  ///< the peer's boot_id changed: whatever it was doing is lost
    stalled,         ///< this node was not running for gap_ms: every peer got a fresh grace
  };
  kind what = kind::peer_up;
  std::string host;
  uint64_t boot_id = 0;  ///< the peer's current boot (for peer_down: the last one heard)
  int64_t gap_ms = 0;    ///< stalled only: how long this node was not running
};

/// One peer as the machine sees it.
struct peer_liveness {
  bool up = false;
  int64_t last_beat_ms = 0;       ///< when the last accepted beat arrived
  uint64_t boot_id = 0;           ///< 0 until the first beat
  uint64_t previous_boot_id = 0;  ///< the boot before the last restart; its beats are stale
  int64_t unbeaten_since_ms = -1; ///< down: when a frame came without a beat since; -1: none
  bool declared_down = false;     ///< peer_down was said and no beat came since
};

/// The liveness machine of one node over its configured peers.
class liveness {
public:
  /// `peers`: the hosts to track (others' beats are ignored). A peer is declared down
  /// after `misses` x `interval_ms` without a beat. Throws std::invalid_argument when
  /// interval_ms or misses is not positive.
  liveness(const std::vector<std::string>& peers, int64_t interval_ms, int misses);

  /// A heartbeat from `host` carrying `boot_id` arrived at `now_ms`. After a stall the
  /// effects start with `stalled`.
  std::vector<liveness_effect> beat_received(const std::string& host, uint64_t boot_id,
                                             int64_t now_ms);

  /// A frame other than a heartbeat came from `host` over its authenticated link at
  /// `now`: a peer that is down and was never declared so is judged from then on, and
  /// declared down if no beat follows within the limit.
  std::vector<liveness_effect> frame_received(const std::string& host, int64_t now_ms);

  /// Time passed: declares down every up peer silent for the limit, and every peer heard
  /// only by other frames for that long (after a stall: none, their silence starts again
  /// from now).
  std::vector<liveness_effect> tick(int64_t now_ms);

  /// The earliest time at which tick() may declare a peer down; none when no peer is up
  /// or being judged.
  std::optional<int64_t> next_deadline() const;

  /// The peer's state; nullptr for a host that is not a configured peer.
  const peer_liveness* peer(const std::string& host) const;

  /// The silence after which an up peer is declared down, in ms.
  int64_t silence_limit_ms() const { return silence_limit_ms_; }

  /// A gap between two calls longer than this is a local stall, in ms.
  int64_t stall_gap_ms() const { return stall_gap_ms_; }

  /// Local stalls seen so far.
  uint64_t stalls() const { return stalls_; }

private:
  /// Notes `now_ms`; after a stall, restarts every up peer's silence and says so in `out`.
  void observe(int64_t now_ms, std::vector<liveness_effect>& out);

  std::map<std::string, peer_liveness> peers_;
  int64_t silence_limit_ms_;
  int64_t stall_gap_ms_;
  bool fed_ = false;        ///< observe() was called before
  int64_t last_fed_ms_ = 0; ///< the latest now_ms fed
  uint64_t stalls_ = 0;
};

/// A name for an effect kind, for logs.
const char* to_string(liveness_effect::kind k);

} // namespace vidline::nodes::bus
