#pragma once
/// The node's message bus over ZeroMQ (docs/design.md, "The bus"; messages/PROTOCOL.md).
///
/// One I/O thread owns every socket: a ROUTER bound on this node's port, and one DEALER
/// per peer (routing id = this host's name) connected to that peer's ROUTER. Other threads
/// hand it frames through a queue and wake it through an eventfd that zmq::poll watches,
/// so a send never waits for a poll timeout; the timeout only paces heartbeats, liveness
/// and transfer deadlines. The bus itself handles heartbeats (liveness, peer events) and
/// the data plane (latent_fetch / latent_chunk); every other valid message goes to the
/// user's callback. Bad frames are dropped, counted and logged at a bounded rate.
///
/// No CAF here: the node wires the callbacks to its actors.

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "config/knobs.hpp"
#include "messages/envelope.hpp"
#include "messages/messages.hpp"
#include "nodes/data/transfer.hpp"

namespace vidline::nodes::bus {

/// One message delivered by the bus (or the reply a client receives).
struct inbound {
  msg::envelope env;
  std::string body;      ///< the packed struct named by env.type (msg::unpack_body_as)
  std::string reply_to;  ///< opaque: where bus::reply answers; empty when the message did
                         ///< not come in on this node's ROUTER (answer with send(env.sender))
};

/// How a bus authenticates its links (docs/security.md, "Authentication").
///
/// With CURVE the ROUTER is a CURVE server and every DEALER a CURVE client that checks its
/// peer's public key. A ZAP handler, polled in the I/O thread, admits a client key only
/// when `host_keys` lists it and names the connection after that key's host; every frame
/// is then held to that name (a peer cannot speak as another host). Plaintext (no keys)
/// is refused for any endpoint that is not loopback.
struct bus_security {
  bool plaintext = true;                         ///< no CURVE: loopback endpoints only
  bool plaintext_anywhere = false;               ///< benchmarks only: plaintext beyond
                                                 ///< loopback, to measure what CURVE costs
                                                 ///< (nodes never: the config refuses it)
  std::string public_z85;                        ///< this host's pair (CURVE)
  std::string secret_z85;
  std::map<std::string, std::string> host_keys;  ///< host name -> public key (Z85), every
                                                 ///< host including this one
};

/// Whether `endpoint` ("tcp://ADDR:PORT", "ipc://...", "inproc://...") stays on this
/// machine: tcp to 127.0.0.0/8, ::1 or localhost, or ipc/inproc.
bool is_loopback_endpoint(const std::string& endpoint);

/// Everything a bus needs to run.
struct bus_options {
  std::string self;                          ///< this host's name (also its routing id)
  std::string bind_endpoint;                 ///< "tcp://ADDR:PORT" ("tcp://ADDR:*": any port)
  std::map<std::string, std::string> peers;  ///< host name -> its "tcp://ADDR:PORT"
  config::knobs knobs;                       ///< liveness, reconnect, data plane, limits
  std::string latent_dir;                    ///< this host's latents, as <sha256>.latent
  std::string output_dir;                    ///< finished videos by digest, as <sha256> (collect)
  std::string input_dir;                     ///< inputs (reference images), as <sha256>:
                                             ///< uploads land there (input_put), fetches
                                             ///< of kind "input" are served from it
  uint64_t boot_id = 0;                      ///< random per process start; 0 = pick one
  bus_security security;                     ///< CURVE keys, or plaintext on loopback
  /// Announced in every heartbeat (the hello); a peer announcing another version or
  /// config digest is refused (nodes/bus/hello.hpp). Empty in tests that build a bus alone.
  std::string version;
  std::string config_digest;

  // -- the bulk channel (docs/security.md, "Bulk transfers") --
  // Latent requests and chunks to and from a peer listed in `bulk_peers` go on a second,
  // unencrypted connection when this host has `bulk_bind_endpoint`: a ROUTER whose ZAP
  // handler admits only `bulk_admit_addresses`, and a DEALER to each bulk peer. Only
  // latent_fetch and latent_chunk travel there; a latent's digest always comes over the
  // authenticated link and every byte is checked against it before the latent is used.
  std::string bulk_bind_endpoint;                 ///< empty: latents stay on the main link
  std::map<std::string, std::string> bulk_peers;  ///< host name -> its bulk endpoint
  std::vector<std::string> bulk_admit_addresses;  ///< numeric IPs the bulk ROUTER admits
  /// Chunks queued per requester on the bulk ROUTER before more are dropped (counted in
  /// send_dropped; the requester's fetch sees a gap and resumes): a requester that asks
  /// and does not read holds at most this many chunks of this process's memory (plus the
  /// kernel's socket buffers). 0 = 16 x chunk_window (64 MiB with the default knobs; a
  /// well-behaved receiver has chunk_window in flight per transfer).
  int bulk_hwm = 0;
  /// Tests only: the secret this bus's bulk DEALERs present to every bulk peer (and send
  /// it in heartbeats). Empty (always, in nodes): a random one per boot and peer.
  std::string bulk_secret_for_tests;
  /// Chunks (and replies) queued per connection on the main ROUTER before more are dropped
  /// (send_dropped), as bulk_hwm on the bulk channel: latents served on CURVE go back on
  /// it, so a listed peer that asks and does not read holds at most this many chunks of
  /// this process's memory (plus the kernel's socket buffers). Replies to clients share it:
  /// a client has one request in flight. 0 = 16 x chunk_window (64 MiB by default).
  int router_hwm = 0;

  // -- bounds of the bus itself (not cluster knobs: they protect this process) --
  int socket_hwm = 1000;             ///< messages queued per socket and direction; a send
                                     ///< beyond it is dropped and counted, never blocks
  std::size_t max_queued = 10000;    ///< frames waiting for the I/O thread before send()
                                     ///< refuses (a stuck I/O thread must not eat memory)
  std::size_t dedup_window = 4096;   ///< ids remembered per (path, sender): reordering
                                     ///< tolerated between a peer's two connections
  std::size_t dedup_keys = 4096;     ///< (path, sender) pairs remembered, LRU
  int log_interval_ms = 10000;       ///< at most one warning per reason in this interval

  // -- fault injection, tests only --
  uint32_t corrupt_every_nth_chunk = 0;  ///< flip a byte in every nth latent chunk served
                                         ///< (0 = off): the receiver must refuse the latent
};

/// How many decode_error values there are (counters are indexed by them).
inline constexpr std::size_t decode_error_kinds =
    static_cast<std::size_t>(msg::decode_error::bad_body) + 1;

/// Counters of one bus since it started.
struct bus_stats {
  std::array<uint64_t, decode_error_kinds> decode_errors{};  ///< frames dropped, by reason
  uint64_t frames_received = 0;      ///< frames read (valid or not, local included)
  uint64_t delivered = 0;            ///< messages handed to on_message
  uint64_t duplicates = 0;           ///< dropped as a repeated (sender, id)
  uint64_t sent = 0;                 ///< frames handed to ZeroMQ
  uint64_t send_dropped = 0;         ///< refused by ZeroMQ: peer not connected, HWM, gone
  uint64_t unroutable = 0;           ///< send()/reply() to an unknown host or empty reply_to
  uint64_t queue_full = 0;           ///< send()/reply() refused: max_queued reached
  uint64_t heartbeats_sent = 0;
  uint64_t heartbeats_received = 0;
  uint64_t heartbeats_ignored = 0;   ///< from hosts that are not peers, or not who they say
  uint64_t hellos_refused = 0;       ///< heartbeats of a peer with another version or config
  uint64_t refused_peer_frames = 0;  ///< other frames from a peer whose hello was refused
  uint64_t chunks_served = 0;        ///< latent chunks sent with data
  uint64_t chunks_received = 0;      ///< latent chunks taken by a running fetch
  uint64_t stale_chunks = 0;         ///< latent chunks no running fetch expected
  uint64_t handler_errors = 0;       ///< exceptions thrown by on_message / on_peer
  uint64_t redials = 0;               ///< a down peer's connections closed and dialled again
  uint64_t local_stalls = 0;         ///< gaps in this node's own loop past the stall limit
                                     ///< (the node was paused): peers got a fresh grace
  // -- authentication (CURVE) --
  uint64_t keys_admitted = 0;        ///< ZAP: connections admitted (listed key)
  uint64_t keys_refused = 0;         ///< ZAP: connections refused (key not listed)
  uint64_t handshakes_failed = 0;    ///< handshakes that failed before ZAP: no key, a wrong
                                     ///< server key, not ZMTP (socket monitor)
  uint64_t impersonations = 0;       ///< frames refused: sender or routing id not the
                                     ///< key's host
  // -- the bulk channel --
  uint64_t bulk_admitted = 0;        ///< ZAP: bulk connections admitted (listed address)
  uint64_t bulk_refused = 0;         ///< bulk connections refused: address not listed, no or
                                     ///< a wrong secret (ZAP), or no PLAIN handshake
  uint64_t bulk_misuse = 0;          ///< frames refused on the bulk channel: not a latent
                                     ///< request or chunk, or not from the host it names
  uint64_t bulk_chunks_served = 0;   ///< of chunks_served, those sent on the bulk channel
  uint64_t bulk_secrets_refused = 0;  ///< of bulk_refused: from a listed address without the
                                      ///< secret its host sent over CURVE (or none at all)

  uint64_t decode_error_count(msg::decode_error e) const {
    return decode_errors[static_cast<std::size_t>(e)];
  }
  uint64_t decode_errors_total() const;
};

/// Decode limits for frames from outside under these knobs (frame, bin and string sizes
/// follow max_frame_bytes; the rest are msg::decode_limits' defaults).
msg::decode_limits wire_limits(const config::knobs& knobs);

/// A random non-zero boot id.
uint64_t random_boot_id();

/// The node's bus. Thread-safe: send, reply, fetch_latent, stats and stop may be called
/// from any thread; callbacks run on the I/O thread and must not block.
class bus {
public:
  using message_handler = std::function<void(const inbound&)>;
  using peer_handler = std::function<void(const msg::peer_event&)>;

  /// Validates `options` (throws std::invalid_argument naming the field). Nothing runs
  /// until start().
  bus(bus_options options, message_handler on_message, peer_handler on_peer = {});
  ~bus();
  bus(const bus&) = delete;
  bus& operator=(const bus&) = delete;

  /// Binds the ROUTER, connects the DEALERs and starts the I/O thread. Throws
  /// std::runtime_error when the endpoint cannot be bound.
  void start();

  /// Stops the I/O thread and closes the sockets (no linger). Running fetches end with
  /// outcome transient first. Idempotent; from a callback it only asks the thread to end.
  void stop();

  const std::string& self() const;
  uint64_t boot_id() const;
  /// How many times the I/O loop has turned (at least once per heartbeat interval while
  /// it runs): the systemd watchdog pets only while this moves.
  uint64_t loop_turns() const;
  /// The bound endpoint, with the port resolved (valid after start()).
  std::string endpoint() const;

  /// Queues a message for actor `target` on `host` (this host: delivered locally, through
  /// the same decoding as remote frames). Returns its envelope id, 0 when refused (unknown
  /// host, queue full, stopped). Delivery is not guaranteed: PROTOCOL.md says what is.
  uint64_t send(const std::string& host, const std::string& target, std::string_view type,
                std::string_view body, uint64_t correlation = 0);

  template <class T>
  uint64_t send(const std::string& host, const std::string& target, const T& m,
                uint64_t correlation = 0) {
    return send(host, target, T::wire_name, msg::pack_body(m), correlation);
  }

  /// Answers a message that came in on the ROUTER (inbound::reply_to), e.g. a client's
  /// request. The reply's target is empty. Returns its envelope id, 0 when refused.
  uint64_t reply(const std::string& reply_to, std::string_view type, std::string_view body,
                 uint64_t correlation);

  template <class T>
  uint64_t reply(const std::string& reply_to, const T& m, uint64_t correlation) {
    return reply(reply_to, T::wire_name, msg::pack_body(m), correlation);
  }

  /// Pulls latent `sha256_hex` (`bytes` long) from `host` (a peer or this host) into
  /// `dest_path`, verified (transfer.hpp). `callback` is called exactly once, on the I/O
  /// thread; if the bus has already stopped, on this thread with outcome transient.
  /// Throws std::invalid_argument for a malformed digest, unknown host or empty path.
  /// `kind` "input": an input (nodes/data/inputs.hpp) from the host's input_dir instead.
  void fetch_latent(const std::string& host, const std::string& sha256_hex, uint64_t bytes,
                    const std::string& dest_path, data::fetch_callback callback,
                    const std::string& kind = "");

  /// A snapshot of the counters.
  bus_stats stats() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace vidline::nodes::bus
