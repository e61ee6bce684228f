#pragma once
/// The decoder's credit and queue logic: a pure state machine. The decoder holds at most
/// `capacity` (2) latents: one decoding and at most one pending beside it. Both are fetched
/// as soon as they are ordered, so the handoff of the pending one hides behind the decode
/// of the other.
///
///   order --> fetching --fetched--> ready --(nothing decoding)--> decoding --> result
///                 |                                                  |
///                 +---- fetch failed ---> result (corrupt / not_found / transient)
///
/// Results stay in `unacked` and in every status report until the coordinator acks them.

#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "messages/messages.hpp"

namespace vidline::decoding {

/// Where one held order is.
enum class phase { fetching, ready, decoding };

struct held {
  msg::decode_order order;
  phase at = phase::fetching;
  double ordered_at = 0;
  double fetched_at = -1;
  double handoff_s = 0;
};

struct state {
  std::string decoder;
  std::string host;
  uint64_t epoch = 0;
  static constexpr uint32_t capacity = 2;  ///< 1 decoding + 1 pending, by design
  std::deque<held> holding;                ///< oldest first
  std::vector<msg::decode_result> unacked;
  std::deque<uint64_t> recent_done;        ///< attempts finished lately (dedups resent orders)
  uint64_t refused_orders = 0;             ///< orders that came without a credit
  uint64_t status_seq = 0;

  /// Credits it grants now.
  uint32_t credits() const;
  /// Held latents not being decoded: the pending queue (never more than 1).
  uint32_t pending() const;
  /// The next status report (numbered, so the coordinator can drop stale ones).
  msg::decoder_status status();
};

struct ev_order { msg::decode_order order; };
struct ev_fetched { uint64_t attempt = 0; std::string outcome; std::string error; };
struct ev_decoded { uint64_t attempt = 0; std::string outcome; std::string error;
                    std::string output; std::string output_sha256; double decode_s = 0; };
struct ev_ack { uint64_t attempt = 0; };
using event = std::variant<ev_order, ev_fetched, ev_decoded, ev_ack>;

struct fx_fetch { msg::decode_order order; };         ///< pull the latent, verify, store
struct fx_decode { msg::decode_order order; };        ///< run the backend on it
struct fx_report {};                                  ///< send status() to the coordinator
struct fx_log { int level = 2; std::string text; };
using effect = std::variant<fx_fetch, fx_decode, fx_report, fx_log>;

/// Applies one event at run-clock time `now`.
std::vector<effect> step(state& s, const event& e, double now);

} // namespace vidline::decoding
