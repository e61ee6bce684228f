#pragma once
/// The bus's insides, shared by its parts: bus.cpp (the public face, the queue, the sockets
/// set up at start), bus_loop.cpp (the I/O loop, heartbeats, sending, shutdown),
/// bus_inbound.cpp (what arrives: checks, dispatch, fetches served), bus_options.cpp
/// (options, validation, socket settings) and bus_security.cpp (CURVE keys, the ZAP
/// handler, the bulk channel's secrets and addresses, who may send what). Not for use
/// outside nodes/bus/bus*.cpp.

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include <sys/eventfd.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "common/sha256.hpp"
#include "config/config.hpp"
#include "nodes/bus/bus_dedup.hpp"
#include "nodes/bus/bus_frame.hpp"
#include "nodes/bus/hello.hpp"
#include "nodes/data/inputs.hpp"
#include "nodes/bus/liveness.hpp"
#include "nodes/bus/bus.hpp"

namespace vidline::nodes::bus {
namespace bus_detail {

using steady = std::chrono::steady_clock;

/// Frames taken from one source per loop turn, so one busy socket cannot starve the
/// others, the timers or the outbound queue.
constexpr int io_batch = 64;

/// The target of bus-level messages (heartbeats, the data plane).
constexpr const char* bus_target = "bus";

/// Where an outgoing frame goes.
enum class route {
  peer,         ///< out on the DEALER connected to that peer
  router,       ///< back on the ROUTER to a routing id (replies)
  local,        ///< this host: decoded and dispatched like a received frame
  bulk_peer,    ///< out on the bulk DEALER to that peer (latent requests)
  bulk_router,  ///< back on the bulk ROUTER to a routing id (latent chunks)
};

/// A frame waiting for the I/O thread.
struct outgoing {
  route where = route::peer;
  std::string address;  ///< peer host or routing id
  zmq::message_t frame;
};

/// Where a received frame came from.
struct ingress {
  std::string reply_to;  ///< ROUTER routing id; empty otherwise
  std::string path;      ///< dedup path: "r:<routing id>", "d:<peer>", or empty for local
  bool local = false;
  std::string user;      ///< ROUTER with CURVE: the host the ZAP handler named the key after
  bool bulk = false;     ///< came in on the bulk channel (no CURVE)
};

/// The ZAP domain of the bulk ROUTER (NULL mechanism: the handler checks the address).
constexpr const char* bulk_zap_domain = "vidline-bulk";

/// Where libzmq asks the ZAP handler (RFC 27) and where the ROUTER's monitor reports.
constexpr const char* zap_endpoint = "inproc://zeromq.zap.01";
constexpr const char* monitor_endpoint = "inproc://vidline-bus-monitor";
constexpr const char* bulk_monitor_endpoint = "inproc://vidline-bus-bulk-monitor";

/// Bulk connections whose secret is not known yet (their host's heartbeat with it has not
/// arrived: it just started, or this node did) wait at most this many at once for it.
constexpr std::size_t max_waiting_bulk_connections = 64;


/// Constant-time comparison of two secrets.
bool same_secret(std::string_view a, std::string_view b);
/// 32 random bytes as 64 hex digits: a bulk secret.
std::string random_secret();

/// Security events, each with its own counter and log gate.
enum class security_event {
  key_refused,
  handshake_failed,
  impersonation,
  bulk_address_refused,
  bulk_misuse,
  bulk_secret_refused
};
constexpr std::size_t security_event_kinds = 6;
const char* to_string(security_event e);

/// The 32 bytes of a Z85 key, or "" when it is not one.
std::string z85_to_binary(const std::string& z85);
std::string binary_to_z85(std::string_view key);

/// Reads and discards the remaining parts of a multipart message (they arrive together).
void drain_parts(zmq::socket_t& s);
/// A routing id for logs: client ids are binary.
std::string printable(std::string_view id);
std::string describe(const ingress& in);

/// Throws std::invalid_argument naming the first bus option that is wrong.
void validate(const bus_options& o);
/// The silence after which a peer is declared down: also how long ZeroMQ waits for a
/// TCP connect, and TCP for an acknowledgement, before a connection is given up.
int liveness_window_ms(const config::knobs& k);
/// The options every socket of the bus gets (linger, high-water marks, frame limit,
/// reconnects, TCP user timeout and keepalive).
void set_common_options(zmq::socket_t& s, const bus_options& o);

} // namespace bus_detail

using namespace bus_detail;

struct bus::impl {
  impl(bus_options o, message_handler m, peer_handler p);
  ~impl();

  // Set at construction, read-only afterwards.
  bus_options opt;
  message_handler on_message;
  peer_handler on_peer;
  msg::decode_limits limits;
  uint64_t boot;
  steady::time_point t0 = steady::now();

  // Lifecycle: start() and stop() under lifecycle_mutex, which the I/O thread never
  // takes (stop() holds it while joining, and callbacks may call back into the bus).
  std::mutex lifecycle_mutex;
  std::atomic<bool> started{false};
  bool joined = false;
  std::atomic<bool> stopping{false};
  std::thread io;
  std::atomic<std::thread::id> io_id{};  ///< set by the I/O thread itself
  mutable std::mutex bound_mutex;
  std::string bound;

  // Sockets: created by start(), then owned by the I/O thread. ctx outlives them.
  zmq::context_t ctx{1};
  zmq::socket_t router;
  zmq::socket_t zap;      ///< the ZAP handler's ROUTER socket (CURVE or a bulk channel)
  zmq::socket_t monitor;  ///< CURVE only: the ROUTER's failed handshakes
  zmq::socket_t bulk_monitor;  ///< bulk channel only: the bulk ROUTER's failed handshakes
  std::map<std::string, std::string> host_of_key;  ///< binary public key -> host
  std::vector<std::pair<std::string, zmq::socket_t>> dealers;
  std::map<std::string, std::size_t> dealer_of;
  zmq::socket_t bulk_router;  ///< bulk channel only
  std::vector<std::pair<std::string, zmq::socket_t>> bulk_dealers;
  std::map<std::string, std::size_t> bulk_dealer_of;
  std::map<std::string, uint64_t> bulk_fallbacks;  ///< requests sent on CURVE instead, per peer
  /// Per bulk peer: the secret our bulk DEALER presents to it (random per boot, sent in
  /// our heartbeats over CURVE), and the one it sent us, which its bulk DEALER must present.
  std::map<std::string, std::string> bulk_secret_out;
  std::map<std::string, std::string> bulk_secret_in;
  /// A bulk connection's ZAP request held until its host's secret arrives.
  struct waiting_zap {
    std::string pipe, request_id, host, password, address;
    int64_t deadline_ms = 0;
  };
  std::deque<waiting_zap> zap_waiting;
  int wake_fd = -1;

  // The hand-over from other threads, under queue_mutex.
  std::mutex queue_mutex;
  std::deque<outgoing> queued;
  std::deque<std::function<void()>> tasks;
  bool closed = false;  ///< the I/O thread has taken the last of them

  std::atomic<uint64_t> next_id{data::first_envelope_id()};
  std::atomic<uint64_t> loop_turns{0};

  mutable std::mutex stats_mutex;
  bus_stats counters;

  // The I/O thread's own state.
  liveness live;
  bus_dedup dedup;
  data::latent_fetcher fetcher;
  data::latent_server server;
  data::input_store inputs;  ///< uploads (input_put) land here: opt.input_dir
  std::deque<zmq::message_t> local;  ///< frames to this host, waiting their turn
  std::vector<int64_t> next_beat_ms;  ///< per dealer
  /// Per dealer: when its connections are dialled afresh next while its peer is down
  /// (0: not down). See redial().
  std::vector<int64_t> next_redial_ms;
  uint64_t beat_seq = 0;
  struct log_gate {
    int64_t last_ms = 0;
    bool ever = false;
    uint64_t suppressed = 0;
  };
  std::array<log_gate, decode_error_kinds> log_gates{};
  std::array<log_gate, security_event_kinds> security_gates{};
  /// Peers whose latest hello was refused, with the reason; their other frames are dropped.
  std::map<std::string, std::string> refused;
  std::map<std::string, log_gate> refused_gates;

  int64_t now_ms() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0).count();
  }
  void count(uint64_t bus_stats::*field, uint64_t n = 1) {
    std::lock_guard<std::mutex> lock(stats_mutex);
    counters.*field += n;
  }
  msg::envelope make_env(std::string_view type, const std::string& target, uint64_t corr) {
    msg::envelope env;
    env.type = std::string(type);
    env.id = next_id.fetch_add(1);
    env.sender = opt.self;
    env.correlation = corr;
    env.target = target;
    return env;
  }

  // Any thread.
  void wake();
  uint64_t enqueue(route where, std::string address, const msg::envelope& env,
                   std::string_view body);
  bool post(std::function<void()> task);

  // I/O thread.
  void run();
  void drain_queue();
  void run_local();
  /// Reads what arrived on the ROUTER (or the bulk ROUTER).
  void read_router(zmq::socket_t& s, bool bulk);
  /// Reads what arrived on a DEALER (or a bulk DEALER) to a peer.
  void read_dealer(std::pair<std::string, zmq::socket_t>& dealer, bool bulk);
  void read_zap();
  void answer_zap(const std::string& pipe, const std::string& request_id, bool bulk,
                  bool admitted, const std::string& reason, const std::string& user,
                  const std::string& detail, bool secret = false);
  void settle_waiting_bulk(const std::string* host, int64_t now);
  void read_monitor(zmq::socket_t& m, bool bulk);
  bool authorised(const msg::envelope& env, const ingress& in);
  void security(security_event e, const std::string& detail);
  bool gate(log_gate& g, std::string& suppressed_note);
  void shutdown_io();
  bool transmit(route where, const std::string& address, zmq::message_t& frame);
  /// A bus message from this bus, framed and sent on `where`.
  bool send_on(route where, const std::string& host, std::string_view type,
               std::string_view body, uint64_t corr);
  bool send_direct(const std::string& host, std::string_view type, std::string_view body,
                   uint64_t corr);
  bool send_heartbeat(const std::string& host);
  void beat_due(int64_t now);
  /// Closes this dealer's connections to its peer (and the bulk one) and dials again. Done
  /// when the peer is declared down and every liveness window while it stays down: a
  /// connection that libzmq keeps but no longer reads or writes (seen after a link cut
  /// under load) cannot then keep the peer deaf to us for good.
  void redial(std::size_t dealer);
  void handle(std::shared_ptr<zmq::message_t> m, const ingress& in);
  void on_heartbeat(const msg::frame& f, const ingress& in);
  void refuse_peer(const std::string& host, const std::string& why);
  void on_fetch(const msg::envelope& env, const msg::latent_fetch& req, const ingress& in);
  void on_input_put(const msg::envelope& env, const msg::input_put& req, const ingress& in);
  void apply(const std::vector<liveness_effect>& effects);
  void drop(msg::decode_error e, const ingress& in, std::string_view detail = {});
  template <class F>
  void guarded(const char* what, F&& f);
};

/// Runs `f`; an exception it throws is counted and logged, never let out of the loop.
template <class F>
void bus::impl::guarded(const char* what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    count(&bus_stats::handler_errors);
    spdlog::error("bus {}: {} threw: {}", opt.self, what, e.what());
  } catch (...) {
    count(&bus_stats::handler_errors);
    spdlog::error("bus {}: {} threw", opt.self, what);
  }
}

} // namespace vidline::nodes::bus
