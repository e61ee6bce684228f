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
///
/// Leases (docs/reliability.md, "Leases"). Every order is a lease the coordinator renews
/// in its answer (msg::lease_grant) to each status report; the lease runs from when that
/// report was sent, on this side's monotonic clock, less a fifth kept for the commit and
/// for the two clocks' rates. A decoded video is committed (renamed into place, receipt,
/// ledger line) only within the lease; past it the decoder asks (a status report) and
///
///   decoding --decoded--> lease valid? --yes--> commit --> result ok
///                              | no
///                              v
///                          confirming --grant: current--> commit --> result ok
///                              |
///                              +--grant: ended--> discard (removed, counted) --> result fenced
///
/// An attempt the coordinator ended is dropped wherever it is; its product, if any, is
/// removed and never published.
///
/// A published video's result survives a restart of the decoder: the shell keeps it on disk
/// from its commit until the coordinator acknowledges it (fx_commit, fx_forget), and hands
/// it back after a restart (ev_recovered), so the status of the new epoch reports it again.
/// The coordinator then adopts the video if its job still waits for one, or answers
/// `discard` when another attempt's video won: removed with its index line, counted
/// (`retracted`). A video committed while the coordinator was down and its host then
/// killed is therefore never left published beside the winner.

#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "messages/messages.hpp"

namespace vidline::actors::decoder {

/// Where one held order is.
enum class phase { fetching, ready, decoding, confirming };

struct held {
  msg::decode_order order;
  phase at = phase::fetching;
  double ordered_at = 0;
  double fetched_at = -1;
  double handoff_s = 0;
  double lease_until = -1;   ///< monotonic s; -1 = no grant yet
  bool ended = false;        ///< the coordinator gave this attempt up
  msg::decode_result made;   ///< confirming: the result waiting for the coordinator's word
  std::string staged;        ///< confirming: where the product lies, not yet published
  double decode_started_at = -1;  ///< run clock: its decode began (-1 not yet)
};

/// The share of a lease a worker keeps for the commit itself and for clock rates.
inline constexpr double lease_margin = 0.2;

/// When the status reports of one epoch were sent (monotonic s), for the leases their
/// grants renew. Bounded: a grant for a report forgotten renews nothing.
struct sent_reports {
  std::deque<std::pair<uint64_t, double>> sent;  ///< (seq, monotonic s), oldest first
  void note(uint64_t seq, double mono_s);
  /// When report `seq` was sent; -1 when unknown.
  double when(uint64_t seq) const;
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
  sent_reports reports;
  uint64_t fenced = 0;                     ///< products removed: their lease had ended
  uint64_t dropped = 0;                    ///< ended attempts dropped before a product
  uint64_t retracted = 0;                  ///< published videos removed: another attempt's won
  uint64_t recovered = 0;                  ///< unacknowledged results an earlier epoch left
  /// Real seconds per run-clock second: the `now` of step() times this is the unix time
  /// the results are stamped with (the run clock is unix time / time_scale, nodes/node.cpp).
  double time_scale = 1.0;

  /// Credits it grants now.
  uint32_t credits() const;
  /// Held latents not being decoded: the pending queue (never more than 1).
  uint32_t pending() const;
  /// The next status report (numbered, so the coordinator can drop stale ones), sent at
  /// monotonic `mono_s`: the grant answering it renews leases from then. A negative
  /// `mono_s` renews nothing.
  msg::decoder_status status(double mono_s = -1);
};

struct ev_order { msg::decode_order order; };
struct ev_fetched { uint64_t attempt = 0; std::string outcome; std::string error; };
/// A decode ended. `output` is where the video is published; `staged` where it lies until
/// then (equal to `output` for a video made before and reused: nothing to commit).
struct ev_decoded { uint64_t attempt = 0; std::string outcome; std::string error;
                    std::string output; std::string output_sha256; double decode_s = 0;
                    std::string staged; double mono_s = 0; };
/// The coordinator's `discard` flag: the product lost the race after it was published.
struct ev_ack { uint64_t attempt = 0; bool discard = false; };
/// The coordinator answered a status report; `mono_s` is when the grant arrived.
struct ev_grant { msg::lease_grant grant; double mono_s = 0; };
/// At start: the results of videos an earlier epoch of this decoder published and the
/// coordinator never acknowledged (kept by the shell since their fx_commit, products checked
/// still there). Reported again, so the coordinator adopts or retracts each.
struct ev_recovered { std::vector<msg::decode_result> results; };
using event = std::variant<ev_order, ev_fetched, ev_decoded, ev_ack, ev_grant, ev_recovered>;

struct fx_fetch { msg::decode_order order; };         ///< pull the latent, verify, store
struct fx_decode { msg::decode_order order; };        ///< run the backend on it
struct fx_report {};                                  ///< send status() to the coordinator
struct fx_log { int level = 2; std::string text; };
/// Publish the product: keep `result` durably until it is acknowledged (fx_forget), then
/// rename `staged` to `output`, write its receipt and ledger line and the run's index line
/// (with the stage seconds it took).
struct fx_commit { msg::decode_order order; std::string staged; std::string output;
                   std::string sha256; double handoff_s = 0; double decode_s = 0;
                   msg::decode_result result; };
/// Remove a product that lost the race (staged, or published: `published`, then with its
/// index line), log and count it in the ledger.
struct fx_discard { std::string run_id; uint32_t index = 0; uint64_t attempt = 0;
                    std::string path; bool published = false; std::string sha256; };
/// The coordinator acknowledged `attempt`'s published result: its kept copy goes.
struct fx_forget { uint64_t attempt = 0; };
using effect = std::variant<fx_fetch, fx_decode, fx_report, fx_log, fx_commit, fx_discard,
                            fx_forget>;

/// Applies one event at run-clock time `now`.
std::vector<effect> step(state& s, const event& e, double now);

} // namespace vidline::actors::decoder
