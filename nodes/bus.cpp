/// The node's bus (bus.hpp): sockets, the I/O loop, heartbeats, dispatch.

#include "nodes/bus.hpp"

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
#include "nodes/bus_dedup.hpp"
#include "nodes/bus_frame.hpp"
#include "nodes/hello.hpp"
#include "nodes/liveness.hpp"

namespace vidline::nodes {
namespace {

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
bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size() || a.empty())
    return false;
  unsigned char d = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

/// 32 random bytes as 64 hex digits: a bulk secret.
std::string random_secret() {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 8; ++i) {
    uint32_t v = rd();
    for (int j = 0; j < 8; ++j, v >>= 4)
      out.push_back(hex[v & 0xf]);
  }
  return out;
}

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

const char* to_string(security_event e) {
  switch (e) {
  case security_event::key_refused:
    return "refused a key";
  case security_event::handshake_failed:
    return "a handshake failed";
  case security_event::impersonation:
    return "refused a frame";
  case security_event::bulk_address_refused:
    return "refused a bulk connection";
  case security_event::bulk_misuse:
    return "refused a frame on the bulk channel";
  case security_event::bulk_secret_refused:
    return "refused a bulk connection without its host's secret";
  }
  return "?";
}

/// The 32 bytes of a Z85 key, or "" when it is not one.
std::string z85_to_binary(const std::string& z85) {
  if (z85.size() != 40)
    return "";
  std::string out(32, '\0');
  if (zmq_z85_decode(reinterpret_cast<uint8_t*>(out.data()), z85.c_str()) == nullptr)
    return "";
  return out;
}

std::string binary_to_z85(std::string_view key) {
  if (key.size() != 32)
    return "(" + std::to_string(key.size()) + " bytes, not a key)";
  char buf[41];
  zmq_z85_encode(buf, reinterpret_cast<const uint8_t*>(key.data()), 32);
  return buf;
}

/// Reads and discards the remaining parts of a multipart message (they arrive together).
void drain_parts(zmq::socket_t& s) {
  zmq::message_t part;
  do {
    if (!s.recv(part, zmq::recv_flags::dontwait))
      return;
  } while (part.more());
}

/// A routing id for logs: client ids are binary.
std::string printable(std::string_view id) {
  bool plain = !id.empty() && std::all_of(id.begin(), id.end(), [](char c) {
    return c >= 0x21 && c <= 0x7e;
  });
  if (plain)
    return std::string(id);
  static const char* hex = "0123456789abcdef";
  std::string out = "0x";
  for (unsigned char c : id) {
    out.push_back(hex[c >> 4]);
    out.push_back(hex[c & 0xf]);
  }
  return out;
}

std::string describe(const ingress& in) {
  if (in.local)
    return "this host";
  if (!in.reply_to.empty())
    return "router id " + printable(in.reply_to);
  return "peer connection " + in.path.substr(2);
}

bool valid_name(const std::string& s, std::size_t max) {
  return !s.empty() && s.size() <= max && std::all_of(s.begin(), s.end(), [](char c) {
    return c >= 0x21 && c <= 0x7e;
  });
}

[[noreturn]] void invalid(const std::string& what) {
  throw std::invalid_argument("bus_options." + what);
}

void validate_security(const bus_options& o) {
  const bus_security& s = o.security;
  if (s.plaintext && s.plaintext_anywhere)
    return;
  if (s.plaintext) {
    if (!is_loopback_endpoint(o.bind_endpoint))
      invalid("security.plaintext is allowed on loopback only, and bind_endpoint is " +
              o.bind_endpoint + ": give this host a CURVE key pair");
    for (const auto& [host, ep] : o.peers)
      if (!is_loopback_endpoint(ep))
        invalid("security.plaintext is allowed on loopback only, and peer " + host +
                " is at " + ep + ": give every host a CURVE key pair");
    return;
  }
  if (z85_to_binary(s.public_z85).empty() || z85_to_binary(s.secret_z85).empty())
    invalid("security: this host's public and secret keys must be Z85 CURVE keys");
  std::map<std::string, std::string> seen;  // binary key -> host
  for (const auto& [host, key] : s.host_keys) {
    const std::string bin = z85_to_binary(key);
    if (bin.empty())
      invalid("security.host_keys: the key of " + host + " is not a Z85 CURVE key");
    if (auto [it, fresh] = seen.emplace(bin, host); !fresh)
      invalid("security.host_keys: " + host + " and " + it->second + " have the same key");
  }
  auto self_key = s.host_keys.find(o.self);
  if (self_key == s.host_keys.end() || self_key->second != s.public_z85)
    invalid("security.host_keys must list this host (" + o.self + ") with its public key");
  for (const auto& [host, ep] : o.peers)
    if (s.host_keys.count(host) == 0)
      invalid("security.host_keys has no key for peer " + host);
}

void validate(const bus_options& o) {
  const msg::decode_limits l = wire_limits(o.knobs);
  const auto& k = o.knobs;
  if (!valid_name(o.self, l.max_name))
    invalid("self must be a non-empty printable name without spaces");
  if (o.bind_endpoint.empty())
    invalid("bind_endpoint is empty");
  for (const auto& [host, ep] : o.peers) {
    if (!valid_name(host, l.max_name))
      invalid("peers: bad host name '" + host + "'");
    if (host == o.self)
      invalid("peers: lists this host (" + host + ") itself");
    if (ep.empty())
      invalid("peers: empty endpoint for " + host);
  }
  if (k.heartbeat_interval_ms <= 0)
    invalid("knobs.heartbeat_interval_ms must be positive");
  if (k.heartbeat_misses <= 0)
    invalid("knobs.heartbeat_misses must be positive");
  if (k.reconnect_min_ms <= 0 || k.reconnect_max_ms < k.reconnect_min_ms)
    invalid("knobs.reconnect_min_ms must be positive and at most reconnect_max_ms");
  if (k.transfer_timeout_ms <= 0)
    invalid("knobs.transfer_timeout_ms must be positive");
  if (k.chunk_bytes == 0 || k.chunk_window <= 0)
    invalid("knobs.chunk_bytes and knobs.chunk_window must be positive");
  if (uint64_t{k.chunk_bytes} + chunk_frame_overhead_bytes > k.max_frame_bytes)
    invalid("knobs.chunk_bytes (" + std::to_string(k.chunk_bytes) + ") + " +
            std::to_string(chunk_frame_overhead_bytes) +
            " bytes of headers must fit in knobs.max_frame_bytes (" +
            std::to_string(k.max_frame_bytes) + ")");
  if (o.socket_hwm <= 0 || o.max_queued == 0)
    invalid("socket_hwm and max_queued must be positive");
  if (o.dedup_window == 0 || o.dedup_keys == 0)
    invalid("dedup_window and dedup_keys must be positive");
  validate_security(o);
  if (o.bulk_bind_endpoint.empty() && !o.bulk_peers.empty())
    invalid("bulk_peers without a bulk_bind_endpoint");
  for (const auto& [host, ep] : o.bulk_peers)
    if (o.peers.count(host) == 0 || ep.empty())
      invalid("bulk_peers: " + host + " is not a peer, or its endpoint is empty");
  if (!o.bulk_bind_endpoint.empty() && o.bulk_admit_addresses.empty())
    invalid("bulk_admit_addresses is empty: the bulk channel would admit nobody");
}

/// The silence after which a peer is declared down: also how long ZeroMQ waits for a
/// TCP connect or a ZMTP pong before it gives up on a connection and reconnects.
int liveness_window_ms(const config::knobs& k) {
  return k.heartbeat_interval_ms * k.heartbeat_misses;
}

void set_common_options(zmq::socket_t& s, const bus_options& o) {
  const auto& k = o.knobs;
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, o.socket_hwm);
  s.set(zmq::sockopt::rcvhwm, o.socket_hwm);
  s.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(k.max_frame_bytes));
  s.set(zmq::sockopt::reconnect_ivl, k.reconnect_min_ms);
  s.set(zmq::sockopt::reconnect_ivl_max, k.reconnect_max_ms);
  // ZMTP heartbeats drop a connection whose other end vanished without a FIN (power
  // loss, cable pulled), so the DEALER reconnects instead of queueing into a dead socket.
  s.set(zmq::sockopt::heartbeat_ivl, k.heartbeat_interval_ms);
  s.set(zmq::sockopt::heartbeat_timeout, liveness_window_ms(k));
  s.set(zmq::sockopt::heartbeat_ttl, liveness_window_ms(k));
}

} // namespace

// -- free functions ------------------------------------------------------------------------

uint64_t bus_stats::decode_errors_total() const {
  uint64_t n = 0;
  for (std::size_t i = 1; i < decode_errors.size(); ++i)
    n += decode_errors[i];
  return n;
}

msg::decode_limits wire_limits(const config::knobs& knobs) {
  msg::decode_limits l;
  l.max_frame_bytes = knobs.max_frame_bytes;
  // A chunk's bin, and a status reply's JSON, may fill a frame. Strings and bins are
  // referenced, not copied, while decoding: the frame size is what bounds them.
  l.max_bin = knobs.max_frame_bytes;
  l.max_str = knobs.max_frame_bytes;
  return l;
}

bool is_loopback_endpoint(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0)
    return true;
  if (endpoint.rfind("tcp://", 0) != 0)
    return false;
  std::string addr = endpoint.substr(6);
  const auto colon = addr.rfind(':');
  if (colon == std::string::npos)
    return false;
  addr.resize(colon);
  if (addr.size() >= 2 && addr.front() == '[' && addr.back() == ']')
    addr = addr.substr(1, addr.size() - 2);
  return config::is_loopback_address(addr);
}

uint64_t first_envelope_id() {
  using namespace std::chrono;
  const auto us = duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
  return us > 0 ? static_cast<uint64_t>(us) : 1;
}

uint64_t random_boot_id() {
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0)
    id = (uint64_t{rd()} << 32) ^ rd();
  return id;
}

// -- the implementation --------------------------------------------------------------------

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

  std::atomic<uint64_t> next_id{first_envelope_id()};
  std::atomic<uint64_t> loop_turns{0};

  mutable std::mutex stats_mutex;
  bus_stats counters;

  // The I/O thread's own state.
  liveness live;
  bus_dedup dedup;
  latent_fetcher fetcher;
  latent_server server;
  std::deque<zmq::message_t> local;  ///< frames to this host, waiting their turn
  std::vector<int64_t> next_beat_ms;  ///< per dealer
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
  void handle(std::shared_ptr<zmq::message_t> m, const ingress& in);
  void on_heartbeat(const msg::frame& f, const ingress& in);
  void refuse_peer(const std::string& host, const std::string& why);
  void on_fetch(const msg::envelope& env, const msg::latent_fetch& req, const ingress& in);
  void apply(const std::vector<liveness_effect>& effects);
  void drop(msg::decode_error e, const ingress& in, std::string_view detail = {});
  template <class F>
  void guarded(const char* what, F&& f);
};

bus::impl::impl(bus_options o, message_handler m, peer_handler p)
    : opt(std::move(o)),
      on_message(std::move(m)),
      on_peer(std::move(p)),
      limits(wire_limits(opt.knobs)),
      boot(opt.boot_id != 0 ? opt.boot_id : random_boot_id()),
      live([&] {
        std::vector<std::string> names;
        for (const auto& [host, ep] : opt.peers)
          names.push_back(host);
        return names;
      }(),
           opt.knobs.heartbeat_interval_ms, opt.knobs.heartbeat_misses),
      dedup(opt.dedup_window, opt.dedup_keys),
      fetcher(
          opt.knobs,
          [this](const std::string& host, const msg::latent_fetch& req) {
            const std::string body = msg::pack_body(req);
            if (bulk_dealer_of.count(host) != 0) {
              if (send_on(route::bulk_peer, host, msg::latent_fetch::wire_name, body, 0))
                return true;
              // The bulk connection is down (its port firewalled, the peer restarting):
              // the authenticated link carries the request, and the chunks come back on it.
              if (bulk_fallbacks[host]++ % 1000 == 0)
                spdlog::warn("bus {}: the bulk channel to {} is not connected: latents from "
                             "it travel on the authenticated link ({} requests so far)",
                             opt.self, host, bulk_fallbacks[host]);
            }
            return send_direct(host, msg::latent_fetch::wire_name, body, 0);
          },
          [this](std::function<void()> task) { post(std::move(task)); },
          [this] { return now_ms(); }),
      server(opt.latent_dir, opt.knobs.max_frame_bytes - chunk_frame_overhead_bytes,
             opt.corrupt_every_nth_chunk) {
  server.set_output_dir(opt.output_dir);
  for (const auto& [host, key] : opt.security.host_keys)
    host_of_key[z85_to_binary(key)] = host;
  for (const auto& [host, ep] : opt.bulk_peers)
    bulk_secret_out[host] =
        opt.bulk_secret_for_tests.empty() ? random_secret() : opt.bulk_secret_for_tests;
  wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0)
    throw std::runtime_error(std::string("bus: eventfd: ") + std::strerror(errno));
}

bus::impl::~impl() {
  if (io.joinable())
    io.join();
  if (wake_fd >= 0)
    ::close(wake_fd);
}

void bus::impl::wake() {
  const uint64_t one = 1;
  // Cannot fail short of the counter nearing 2^64; a pending wake-up is all we need.
  [[maybe_unused]] ssize_t n = ::write(wake_fd, &one, sizeof one);
}

uint64_t bus::impl::enqueue(route where, std::string address, const msg::envelope& env,
                            std::string_view body) {
  zmq::message_t frame = make_frame(env, body);
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(queue_mutex);
    if (closed)
      return 0;
    if (queued.size() >= opt.max_queued) {
      std::lock_guard<std::mutex> slock(stats_mutex);
      ++counters.queue_full;
      return 0;
    }
    first = queued.empty() && tasks.empty();
    queued.push_back(outgoing{where, std::move(address), std::move(frame)});
  }
  if (first)
    wake();
  return env.id;
}

bool bus::impl::post(std::function<void()> task) {
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(queue_mutex);
    if (closed)
      return false;
    first = queued.empty() && tasks.empty();
    tasks.push_back(std::move(task));
  }
  if (first)
    wake();
  return true;
}

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

void bus::impl::run() {
  io_id.store(std::this_thread::get_id());
  std::vector<zmq::pollitem_t> items;
  items.push_back({nullptr, wake_fd, ZMQ_POLLIN, 0});
  items.push_back({router.handle(), 0, ZMQ_POLLIN, 0});
  const bool curve = !opt.security.plaintext;
  const bool bulk = static_cast<bool>(bulk_router);
  const bool zap_on = static_cast<bool>(zap);
  const std::size_t zap_item = items.size();
  if (zap_on)
    items.push_back({zap.handle(), 0, ZMQ_POLLIN, 0});
  const std::size_t monitor_item = items.size();
  if (curve)
    items.push_back({monitor.handle(), 0, ZMQ_POLLIN, 0});
  const std::size_t bulk_item = items.size();
  if (bulk)
    items.push_back({bulk_router.handle(), 0, ZMQ_POLLIN, 0});
  const std::size_t bulk_monitor_item = items.size();
  if (bulk)
    items.push_back({bulk_monitor.handle(), 0, ZMQ_POLLIN, 0});
  const std::size_t first_dealer = items.size();
  for (auto& [host, s] : dealers)
    items.push_back({s.handle(), 0, ZMQ_POLLIN, 0});
  const std::size_t first_bulk_dealer = items.size();
  for (auto& [host, s] : bulk_dealers)
    items.push_back({s.handle(), 0, ZMQ_POLLIN, 0});
  next_beat_ms.assign(dealers.size(), now_ms());  // beat at once

  while (!stopping.load()) {
    loop_turns.fetch_add(1, std::memory_order_relaxed);
    int64_t now = now_ms();
    beat_due(now);
    int64_t deadline = now + opt.knobs.heartbeat_interval_ms;
    for (int64_t t : next_beat_ms)
      deadline = std::min(deadline, t);
    if (auto d = live.next_deadline())
      deadline = std::min(deadline, *d);
    if (auto d = fetcher.next_deadline())
      deadline = std::min(deadline, *d);
    if (!zap_waiting.empty())
      deadline = std::min(deadline, zap_waiting.front().deadline_ms);
    const int64_t timeout = local.empty() ? std::max<int64_t>(0, deadline - now) : 0;
    try {
      zmq::poll(items, std::chrono::milliseconds(timeout));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR)
        continue;
      spdlog::critical("bus {}: poll failed: {}", opt.self, e.what());
      break;
    }
    if (items[0].revents & ZMQ_POLLIN) {
      uint64_t v = 0;
      [[maybe_unused]] ssize_t n = ::read(wake_fd, &v, sizeof v);  // before the queue
    }
    drain_queue();
    if (zap_on && (items[zap_item].revents & ZMQ_POLLIN))
      read_zap();  // handshakes wait on it: before the frames
    if (curve && (items[monitor_item].revents & ZMQ_POLLIN))
      read_monitor(monitor, false);
    if (bulk && (items[bulk_monitor_item].revents & ZMQ_POLLIN))
      read_monitor(bulk_monitor, true);
    if (items[1].revents & ZMQ_POLLIN)
      read_router(router, false);
    for (std::size_t i = 0; i < dealers.size(); ++i)
      if (items[first_dealer + i].revents & ZMQ_POLLIN)
        read_dealer(dealers[i], false);
    if (bulk && (items[bulk_item].revents & ZMQ_POLLIN))
      read_router(bulk_router, true);
    for (std::size_t i = 0; i < bulk_dealers.size(); ++i)
      if (items[first_bulk_dealer + i].revents & ZMQ_POLLIN)
        read_dealer(bulk_dealers[i], true);
    run_local();
    // Silence is judged only after reading what arrived: after a stall (a slow callback,
    // the machine swapping), the beats waiting in the sockets still count.
    now = now_ms();
    apply(live.tick(now));
    fetcher.tick(now);
    settle_waiting_bulk(nullptr, now);
  }
  shutdown_io();
}

void bus::impl::beat_due(int64_t now) {
  const int64_t interval = opt.knobs.heartbeat_interval_ms;
  // A peer not connected yet is tried again after the first reconnect delay, so it hears
  // of us as soon as its connection is up rather than an interval later.
  const int64_t retry = std::min<int64_t>(interval, opt.knobs.reconnect_min_ms);
  for (std::size_t i = 0; i < dealers.size(); ++i) {
    if (now < next_beat_ms[i])
      continue;
    // Paced from now, not from the missed slot: a late loop skips beats, never bursts.
    next_beat_ms[i] = now + (send_heartbeat(dealers[i].first) ? interval : retry);
  }
}

void bus::impl::drain_queue() {
  std::deque<outgoing> frames;
  std::deque<std::function<void()>> todo;
  {
    std::lock_guard<std::mutex> lock(queue_mutex);
    frames.swap(queued);
    todo.swap(tasks);
  }
  for (auto& o : frames)
    transmit(o.where, o.address, o.frame);
  for (auto& task : todo)
    guarded("a posted task", task);
}

void bus::impl::run_local() {
  for (int i = 0; i < io_batch && !local.empty(); ++i) {
    auto m = std::make_shared<zmq::message_t>(std::move(local.front()));
    local.pop_front();
    handle(std::move(m), ingress{"", "", true, ""});
  }
}

void bus::impl::read_router(zmq::socket_t& s, bool bulk) {
  for (int i = 0; i < io_batch; ++i) {
    zmq::message_t id;
    if (!s.recv(id, zmq::recv_flags::dontwait))
      return;
    ingress in{id.to_string(), "", false, "", bulk};
    in.path = (bulk ? "R:" : "r:") + in.reply_to;
    auto frame = std::make_shared<zmq::message_t>();
    if (!id.more() || !s.recv(*frame, zmq::recv_flags::dontwait)) {
      count(&bus_stats::frames_received);
      drop(msg::decode_error::malformed, in, "no frame after the routing id");
      continue;
    }
    if (frame->more()) {  // one frame per message: drop the whole multipart message
      drain_parts(s);
      count(&bus_stats::frames_received);
      drop(msg::decode_error::malformed, in, "multipart message");
      continue;
    }
    // Set by the ZAP handler for a CURVE connection: the host whose key it presented.
    // On the bulk ROUTER: the host whose secret the connection presented.
    if (const char* user = zmq_msg_gets(frame->handle(), "User-Id"); user != nullptr)
      in.user = user;
    handle(std::move(frame), in);
  }
}

void bus::impl::read_zap() {
  for (int n = 0; n < io_batch; ++n) {
    std::vector<zmq::message_t> parts;
    zmq::message_t part;
    if (!zap.recv(part, zmq::recv_flags::dontwait))
      return;
    parts.push_back(std::move(part));
    while (parts.back().more() && parts.size() < 16) {
      zmq::message_t next;
      if (!zap.recv(next, zmq::recv_flags::dontwait))
        break;
      parts.push_back(std::move(next));
    }
    if (parts.back().more())
      drain_parts(zap);
    // The handler is a ROUTER (so a bulk request can wait for its host's secret): the
    // session's pipe id and an empty delimiter, then RFC 27: version, request id, domain,
    // address, routing id, mechanism, credentials.
    if (parts.size() < 2 || parts[1].size() != 0)
      continue;  // not from a libzmq session: nothing to answer
    const std::string pipe = parts[0].to_string();
    auto text = [&](std::size_t i) {
      return i + 2 < parts.size() ? parts[i + 2].to_string() : "";
    };
    const std::string key = text(6);
    // The bulk channel has no encryption (PLAIN mechanism, its own domain): a connection is
    // admitted from a listed host's address with the secret that host sent us over CURVE
    // in its heartbeats (user name = the host), and may then only ask for latents and
    // answer such requests (authorised()). Every other connection is CURVE with a listed
    // key.
    const bool bulk = text(2) == bulk_zap_domain;
    const std::string address = text(3);
    if (text(0) != "1.0" || text(5) != (bulk ? "PLAIN" : "CURVE") ||
        (!bulk && key.size() != 32)) {
      const std::string reason = bulk ? "not a PLAIN ZAP request" : "not a CURVE ZAP request";
      answer_zap(pipe, text(1), bulk, false, reason, "", "from " + printable(address) + ": " + reason);
      continue;
    }
    if (bulk) {
      const std::string host = key, password = text(7);
      const auto& ok = opt.bulk_admit_addresses;
      const std::string who = "from " + printable(address) + " as '" + printable(host) + "'";
      if (std::find(ok.begin(), ok.end(), address) == ok.end()) {
        answer_zap(pipe, text(1), true, false, "address not listed", "",
                   who + ": address not listed");
      } else if (opt.bulk_peers.count(host) == 0) {
        answer_zap(pipe, text(1), true, false, "not a bulk peer", "", who + ": not a bulk peer");
      } else if (auto it = bulk_secret_in.find(host);
                 it != bulk_secret_in.end() && same_secret(it->second, password)) {
        answer_zap(pipe, text(1), true, true, "OK", host, "");
      } else if (zap_waiting.size() < max_waiting_bulk_connections) {
        // Its host may have just started (or we did): its next heartbeat brings the
        // secret. Held until then, at most a liveness window.
        zap_waiting.push_back(waiting_zap{pipe, text(1), host, password, address,
                                          now_ms() + liveness_window_ms(opt.knobs)});
      } else {
        answer_zap(pipe, text(1), true, false, "no secret", "",
                   who + ": too many connections waiting for their host's secret", true);
      }
      continue;
    }
    if (auto it = host_of_key.find(key); it != host_of_key.end())
      answer_zap(pipe, text(1), false, true, "OK", it->second,
                 it->second + " from " + printable(address));
    else
      answer_zap(pipe, text(1), false, false, "key not listed", "",
                 "key " + binary_to_z85(key) + " from " + printable(address) +
                     ": key not listed");
  }
}

void bus::impl::answer_zap(const std::string& pipe, const std::string& request_id, bool bulk,
                           bool admitted, const std::string& reason, const std::string& user,
                           const std::string& detail, bool secret) {
  const std::string reply[] = {pipe, "", "1.0", request_id, admitted ? "200" : "400", reason,
                               user, ""};
  try {
    for (std::size_t i = 0; i < 8; ++i)
      zap.send(zmq::buffer(reply[i]), i < 7 ? zmq::send_flags::sndmore : zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    spdlog::error("bus {}: ZAP reply failed: {}", opt.self, e.what());
  }
  if (bulk) {
    count(admitted ? &bus_stats::bulk_admitted : &bus_stats::bulk_refused);
    if (secret)
      count(&bus_stats::bulk_secrets_refused);
    if (!admitted)
      security(secret ? security_event::bulk_secret_refused
                      : security_event::bulk_address_refused,
               detail);
  } else if (admitted) {
    count(&bus_stats::keys_admitted);
    spdlog::debug("bus {}: admitted {}", opt.self, detail);
  } else {
    count(&bus_stats::keys_refused);
    security(security_event::key_refused, detail);
  }
}

void bus::impl::settle_waiting_bulk(const std::string* host, int64_t now) {
  // `host` sent a heartbeat: its connections that wait are admitted when they present the
  // secret it sent, refused otherwise. Without a host: those past their deadline are
  // refused.
  for (auto it = zap_waiting.begin(); it != zap_waiting.end();) {
    const std::string who =
        "from " + printable(it->address) + " as '" + printable(it->host) + "'";
    if (host != nullptr && it->host == *host) {
      auto s = bulk_secret_in.find(*host);
      if (s != bulk_secret_in.end() && same_secret(s->second, it->password))
        answer_zap(it->pipe, it->request_id, true, true, "OK", it->host, "");
      else
        answer_zap(it->pipe, it->request_id, true, false, "wrong secret", "",
                   who + ": not the secret " + *host + " sent over the authenticated link",
                   true);
    } else if (host == nullptr && now >= it->deadline_ms) {
      answer_zap(it->pipe, it->request_id, true, false, "no secret", "",
                 who + ": no heartbeat of " + it->host + " with a matching secret within " +
                     std::to_string(liveness_window_ms(opt.knobs)) + " ms",
                 true);
    } else {
      ++it;
      continue;
    }
    it = zap_waiting.erase(it);
  }
}

void bus::impl::read_monitor(zmq::socket_t& m, bool bulk) {
  for (int n = 0; n < io_batch; ++n) {
    zmq::message_t event;
    if (!m.recv(event, zmq::recv_flags::dontwait))
      return;
    zmq::message_t address;
    if (event.more())
      (void)m.recv(address, zmq::recv_flags::dontwait);
    if (address.more())
      drain_parts(m);
    if (event.size() < 6)
      continue;
    uint16_t what = 0;
    uint32_t value = 0;
    std::memcpy(&what, event.data(), 2);
    std::memcpy(&value, static_cast<const char*>(event.data()) + 2, 4);
    // A refused key is counted by the ZAP handler; the rest failed before reaching it.
    if (what == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
      continue;
    const char* detail =
        what == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ? "protocol error" : "no detail";
    if (bulk) {
      count(&bus_stats::bulk_refused);
      count(&bus_stats::bulk_secrets_refused);
      security(security_event::bulk_address_refused,
               fmt::format("handshake failed on {} ({} {:#x}): not PLAIN with a host's "
                           "secret, or not ZMTP",
                           printable(address.to_string()), detail, value));
      continue;
    }
    count(&bus_stats::handshakes_failed);
    security(security_event::handshake_failed,
             fmt::format("on {} ({} {:#x}): no key, a wrong server key, or not ZMTP",
                         printable(address.to_string()), detail, value));
  }
}

void bus::impl::read_dealer(std::pair<std::string, zmq::socket_t>& dealer, bool bulk) {
  auto& [host, s] = dealer;
  for (int n = 0; n < io_batch; ++n) {
    auto frame = std::make_shared<zmq::message_t>();
    if (!s.recv(*frame, zmq::recv_flags::dontwait))
      return;
    ingress in{"", (bulk ? "b:" : "d:") + host, false, "", bulk};
    if (frame->more()) {
      drain_parts(s);
      count(&bus_stats::frames_received);
      drop(msg::decode_error::malformed, in, "multipart message");
      continue;
    }
    handle(std::move(frame), in);
  }
}

bool bus::impl::transmit(route where, const std::string& address, zmq::message_t& frame) {
  auto counted = [this](bool sent) {
    count(sent ? &bus_stats::sent : &bus_stats::send_dropped);
    return sent;
  };
  try {
    switch (where) {
    case route::local:
      local.push_back(std::move(frame));
      return true;
    case route::peer:
    case route::bulk_peer: {
      const bool bulk = where == route::bulk_peer;
      const auto& index = bulk ? bulk_dealer_of : dealer_of;
      auto it = index.find(address);
      if (it == index.end()) {
        count(&bus_stats::unroutable);
        return false;
      }
      // With ZMQ_IMMEDIATE a DEALER refuses (EAGAIN) while its peer is not connected:
      // the frame is dropped now instead of delivered stale after a reconnect.
      auto& s = (bulk ? bulk_dealers : dealers)[it->second].second;
      return counted(s.send(frame, zmq::send_flags::dontwait).has_value());
    }
    case route::router:
    case route::bulk_router: {
      auto& s = where == route::router ? router : bulk_router;
      zmq::message_t id(address.data(), address.size());
      // ROUTER_MANDATORY: EHOSTUNREACH (throws) for a routing id that is gone, EAGAIN
      // (empty result) at the HWM.
      return counted(s.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait) &&
                     s.send(frame, zmq::send_flags::dontwait));
    }
    }
  } catch (const zmq::error_t&) {
    count(&bus_stats::send_dropped);
  }
  return false;
}

bool bus::impl::send_on(route where, const std::string& host, std::string_view type,
                        std::string_view body, uint64_t corr) {
  zmq::message_t frame = make_frame(make_env(type, bus_target, corr), body);
  return transmit(where, host, frame);
}

bool bus::impl::send_direct(const std::string& host, std::string_view type,
                            std::string_view body, uint64_t corr) {
  return send_on(host == opt.self ? route::local : route::peer, host, type, body, corr);
}

bool bus::impl::send_heartbeat(const std::string& host) {
  using namespace std::chrono;
  msg::heartbeat hb;
  hb.host = opt.self;
  hb.boot_id = boot;
  hb.seq = ++beat_seq;
  hb.sent_unix_s = duration<double>(system_clock::now().time_since_epoch()).count();
  hb.version = opt.version;
  hb.config_digest = opt.config_digest;
  if (auto it = bulk_secret_out.find(host); it != bulk_secret_out.end())
    hb.bulk_secret = it->second;
  if (!send_direct(host, msg::heartbeat::wire_name, msg::pack_body(hb), 0))
    return false;
  count(&bus_stats::heartbeats_sent);
  return true;
}

void bus::impl::handle(std::shared_ptr<zmq::message_t> m, const ingress& in) {
  count(&bus_stats::frames_received);
  msg::frame f;
  const auto err = msg::decode_frame(m->data<char>(), m->size(), limits, f);
  if (err != msg::decode_error::none)
    return drop(err, in);
  const msg::envelope& env = f.env;
  if (!authorised(env, in))
    return;
  if (env.type == msg::heartbeat::wire_name)
    return on_heartbeat(f, in);  // idempotent, and must see a restarted peer's first beat
  if (!in.local && refused.count(env.sender) != 0) {
    count(&bus_stats::refused_peer_frames);
    return;
  }
  if (!in.local && !dedup.accept(in.path, env.sender, env.id)) {
    count(&bus_stats::duplicates);
    return;
  }
  msgpack::object_handle keep;
  if (!msg::unpack_body(f.body, limits, keep))
    return drop(msg::decode_error::bad_body, in, env.type);

  if (env.type == msg::latent_fetch::wire_name) {
    msg::latent_fetch req;
    try {
      keep.get().convert(req);
    } catch (const std::exception&) {
      return drop(msg::decode_error::bad_body, in, env.type);
    }
    return on_fetch(env, req, in);
  }
  if (env.type == msg::latent_chunk::wire_name) {
    msg::latent_chunk chunk;  // its data points into *m, which the disk worker keeps
    try {
      keep.get().convert(chunk);
    } catch (const std::exception&) {
      return drop(msg::decode_error::bad_body, in, env.type);
    }
    if (fetcher.on_chunk(env.sender, chunk, std::move(m)))
      count(&bus_stats::chunks_received);
    else
      count(&bus_stats::stale_chunks);
    return;
  }
  count(&bus_stats::delivered);
  if (on_message) {
    const inbound msg_in{env, std::string(f.body), in.reply_to};
    guarded("on_message", [&] { on_message(msg_in); });
  }
}

bool bus::impl::authorised(const msg::envelope& env, const ingress& in) {
  if (in.bulk) {
    // No keys here: only latent requests from a peer (routing id = its name = sender)
    // and chunks from the peer this DEALER reaches. A chunk's bytes count only once they
    // hash to the digest the authenticated link gave; a request is answered only from
    // this host's latent files, only to the connection it came on.
    std::string why;
    if (in.reply_to.empty()) {
      const std::string host = in.path.substr(2);
      if (env.type == msg::latent_chunk::wire_name && env.sender == host)
        return true;
      why = env.type + " from '" + env.sender + "' on the bulk connection to " + host;
    } else {
      // The routing id must be the host whose secret the connection presented (ZAP's
      // User-Id), so the name alone takes nothing over.
      if (env.type == msg::latent_fetch::wire_name && env.sender == in.reply_to &&
          in.user == in.reply_to && opt.bulk_peers.count(env.sender) != 0)
        return true;
      why = env.type + " from '" + env.sender + "' on bulk router id " + printable(in.reply_to);
    }
    count(&bus_stats::bulk_misuse);
    security(security_event::bulk_misuse, why);
    return false;
  }
  if (in.local || opt.security.plaintext)
    return true;
  std::string why;
  if (in.reply_to.empty()) {
    // On our DEALER to a peer, whose server key the CURVE handshake proved.
    const std::string host = in.path.substr(2);
    if (env.sender == host)
      return true;
    why = "sender '" + env.sender + "' on the connection to " + host;
  } else if (in.user.empty()) {
    why = "no authenticated key on router id " + printable(in.reply_to);
  } else {
    // A routing id that names a host must be the key's host; any other is a client (the
    // CLI holds a host's key) whose envelopes say "cli:...". Senders are held to the key.
    const bool id_is_host = in.reply_to == opt.self || opt.peers.count(in.reply_to) != 0;
    if (id_is_host && in.reply_to != in.user)
      why = "router id '" + in.reply_to + "' on a connection with the key of " + in.user;
    else if (env.sender == in.user || (!id_is_host && env.sender.rfind("cli:", 0) == 0))
      return true;
    else
      why = "sender '" + env.sender + "' on a connection with the key of " + in.user;
  }
  count(&bus_stats::impersonations);
  security(security_event::impersonation, why + " (" + env.type + ")");
  return false;
}

bool bus::impl::gate(log_gate& g, std::string& suppressed_note) {
  const int64_t now = now_ms();
  if (g.ever && now - g.last_ms < opt.log_interval_ms) {
    ++g.suppressed;
    return false;
  }
  suppressed_note = g.suppressed == 0
                        ? std::string()
                        : fmt::format(" ({} more since the last report)", g.suppressed);
  g.ever = true;
  g.last_ms = now;
  g.suppressed = 0;
  return true;
}

void bus::impl::security(security_event e, const std::string& detail) {
  std::string note;
  if (!gate(security_gates[static_cast<std::size_t>(e)], note))
    return;
  const bus_stats s = [&] {
    std::lock_guard<std::mutex> lock(stats_mutex);
    return counters;
  }();
  spdlog::warn("bus {}: security: {}: {}{} [totals: {} keys refused, {} handshakes failed, "
               "{} frames refused]",
               opt.self, to_string(e), detail, note, s.keys_refused, s.handshakes_failed,
               s.impersonations);
}

void bus::impl::on_heartbeat(const msg::frame& f, const ingress& in) {
  msg::heartbeat hb;
  if (!msg::unpack_body_as(f.body, limits, hb))
    return drop(msg::decode_error::bad_body, in, msg::heartbeat::wire_name);
  count(&bus_stats::heartbeats_received);
  if (hb.host != f.env.sender || live.peer(hb.host) == nullptr) {
    count(&bus_stats::heartbeats_ignored);
    return;
  }
  if (auto why = hello_mismatch({opt.version, opt.config_digest}, hb))
    return refuse_peer(hb.host, *why);
  if (refused.erase(hb.host) != 0)
    spdlog::info("bus {}: peer {} now runs vidline {} from this config: accepted", opt.self,
                 hb.host, hb.version);
  // The secret its bulk DEALER will present to our bulk ROUTER: a heartbeat comes over the
  // authenticated link (the sender is the key's host), so only that host can set it.
  if (bulk_router && opt.bulk_peers.count(hb.host) != 0) {
    if (hb.bulk_secret.empty() || hb.bulk_secret.size() > 255)
      bulk_secret_in.erase(hb.host);
    else
      bulk_secret_in[hb.host] = hb.bulk_secret;
    settle_waiting_bulk(&hb.host, now_ms());
  }
  apply(live.beat_received(hb.host, hb.boot_id, now_ms()));
}

void bus::impl::refuse_peer(const std::string& host, const std::string& why) {
  count(&bus_stats::hellos_refused);
  auto& last = refused[host];
  auto& g = refused_gates[host];
  if (last != why) {  // a new reason is reported at once, a repeated one once an interval
    last = why;
    g = log_gate{};
  }
  std::string note;
  if (!gate(g, note))
    return;
  const uint64_t total = [&] {
    std::lock_guard<std::mutex> lock(stats_mutex);
    return counters.hellos_refused;
  }();
  spdlog::error("bus {}: refusing peer {}: {}{} [{} hellos refused]", opt.self, host, why, note,
                total);
}

void bus::impl::on_fetch(const msg::envelope& env, const msg::latent_fetch& req,
                         const ingress& in) {
  const msg::envelope reply_env = make_env(msg::latent_chunk::wire_name, bus_target, env.id);
  zmq::message_t out;
  const bool data = server.serve(req, [&](std::size_t body_size) {
    const std::string head = msg::encode_frame_head(reply_env, body_size);
    out.rebuild(head.size() + body_size);
    std::memcpy(out.data(), head.data(), head.size());
    return static_cast<char*>(out.data()) + head.size();
  });
  if (data) {
    count(&bus_stats::chunks_served);
    if (in.bulk)
      count(&bus_stats::bulk_chunks_served);
  }
  if (in.bulk)
    transmit(route::bulk_router, in.reply_to, out);
  else if (!in.reply_to.empty())
    transmit(route::router, in.reply_to, out);
  else
    transmit(in.local ? route::local : route::peer, env.sender, out);
}

void bus::impl::apply(const std::vector<liveness_effect>& effects) {
  for (const auto& e : effects) {
    if (e.what == liveness_effect::kind::stalled) {
      // Our own pause: the peers hear of us at once, and are judged afresh.
      count(&bus_stats::local_stalls);
      spdlog::warn("bus {}: this node was not running for {} ms (paused or starved): every "
                   "peer gets a fresh grace period of {} ms before it is judged",
                   opt.self, e.gap_ms, live.silence_limit_ms());
      std::fill(next_beat_ms.begin(), next_beat_ms.end(), now_ms());
      continue;
    }
    msg::peer_event ev;
    ev.host = e.host;
    ev.boot_id = e.boot_id;
    switch (e.what) {
    case liveness_effect::kind::peer_up:
      ev.up = true;
      send_heartbeat(e.host);  // so it hears of us now, not an interval later
      break;
    case liveness_effect::kind::peer_down:
      ev.up = false;
      fetcher.fail_host(e.host, "peer down");
      break;
    case liveness_effect::kind::peer_restarted:
      ev.up = true;
      ev.restarted = true;
      dedup.forget_sender(e.host);
      fetcher.fail_host(e.host, "peer restarted");
      break;
    case liveness_effect::kind::stalled:
      break;  // handled above
    }
    spdlog::info("bus {}: {} {} (boot {:016x})", opt.self, to_string(e.what), e.host,
                 e.boot_id);
    if (on_peer)
      guarded("on_peer", [&] { on_peer(ev); });
  }
}

void bus::impl::drop(msg::decode_error e, const ingress& in, std::string_view detail) {
  const auto i = static_cast<std::size_t>(e);
  {
    std::lock_guard<std::mutex> lock(stats_mutex);
    ++counters.decode_errors[i];
  }
  // A flood of bad frames must not become a flood of log lines.
  std::string note;
  if (!gate(log_gates[i], note))
    return;
  spdlog::warn("bus {}: dropped a frame from {}: {}{}{}{}", opt.self, describe(in),
               msg::to_string(e), detail.empty() ? "" : ", ", detail, note);
}

void bus::impl::shutdown_io() {
  // Running fetches end now (their callbacks run here); the disk threads finish what
  // they hold and post the results, which the last drain below delivers.
  fetcher.shutdown();
  std::deque<outgoing> frames;
  std::deque<std::function<void()>> todo;
  {
    std::lock_guard<std::mutex> lock(queue_mutex);
    closed = true;
    frames.swap(queued);
    todo.swap(tasks);
  }
  for (auto& task : todo)
    guarded("a posted task", task);
  if (!frames.empty())
    count(&bus_stats::send_dropped, frames.size());
  local.clear();
  const bus_stats totals = [&] {
    std::lock_guard<std::mutex> lock(stats_mutex);
    return counters;
  }();
  if (!opt.security.plaintext)
    spdlog::info("bus {}: security totals: {} keys admitted, {} keys refused, {} handshakes "
                 "failed, {} frames refused as impersonation, {} bad frames, {} duplicates",
                 opt.self, totals.keys_admitted, totals.keys_refused, totals.handshakes_failed,
                 totals.impersonations, totals.decode_errors_total(), totals.duplicates);
  spdlog::info("bus {}: liveness totals: {} local stalls (this node not running for more "
               "than {} ms)", opt.self, totals.local_stalls, live.stall_gap_ms());
  if (bulk_router)
    spdlog::info("bus {}: bulk channel totals: {} connections admitted, {} refused, {} frames "
                 "refused, {} chunks served on it; {} of the refused without their host's "
                 "secret",
                 opt.self, totals.bulk_admitted, totals.bulk_refused, totals.bulk_misuse,
                 totals.bulk_chunks_served, totals.bulk_secrets_refused);
  if (!opt.security.plaintext) {
    zmq_socket_monitor(router.handle(), nullptr, 0);
    monitor.close();
  }
  router.close();
  for (auto& [host, s] : dealers)
    s.close();
  if (bulk_router) {
    zmq_socket_monitor(bulk_router.handle(), nullptr, 0);
    bulk_monitor.close();
    bulk_router.close();
  }
  for (auto& [host, s] : bulk_dealers)
    s.close();
  if (zap)
    zap.close();
}

// -- the public face -----------------------------------------------------------------------

bus::bus(bus_options options, message_handler on_message, peer_handler on_peer) {
  validate(options);
  impl_ = std::make_unique<impl>(std::move(options), std::move(on_message), std::move(on_peer));
}

bus::~bus() { stop(); }

void bus::start() {
  impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.lifecycle_mutex);
  if (d.started.load())
    throw std::logic_error("bus: already started");
  const bus_security& sec = d.opt.security;
  const bool bulk = !d.opt.bulk_bind_endpoint.empty();
  if (!sec.plaintext || bulk) {
    // The handler is bound before the ROUTER: without one, libzmq's CURVE admits any key.
    d.zap = zmq::socket_t(d.ctx, zmq::socket_type::router);
    d.zap.set(zmq::sockopt::linger, 0);
    d.zap.bind(zap_endpoint);
  }
  d.router = zmq::socket_t(d.ctx, zmq::socket_type::router);
  set_common_options(d.router, d.opt);
  // Latents served on CURVE go back on this ROUTER: bounded per requester like the bulk
  // ROUTER's (bus_options::router_hwm).
  d.router.set(zmq::sockopt::sndhwm,
               d.opt.router_hwm > 0 ? d.opt.router_hwm : 16 * d.opt.knobs.chunk_window);
  if (!sec.plaintext) {
    d.router.set(zmq::sockopt::zap_domain, "vidline");
    d.router.set(zmq::sockopt::curve_server, true);
    d.router.set(zmq::sockopt::curve_secretkey, sec.secret_z85);
    if (zmq_socket_monitor(d.router.handle(), monitor_endpoint,
                           ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0)
      throw std::runtime_error("bus " + d.opt.self + ": cannot monitor the router: " +
                               zmq_strerror(zmq_errno()));
    d.monitor = zmq::socket_t(d.ctx, zmq::socket_type::pair);
    d.monitor.set(zmq::sockopt::linger, 0);
    d.monitor.connect(monitor_endpoint);
  }
  d.router.set(zmq::sockopt::router_mandatory, true);
  // A restarted peer reconnects with the same routing id before its old connection is
  // seen closed: hand the id over instead of refusing the newcomer.
  d.router.set(zmq::sockopt::router_handover, true);
  try {
    d.router.bind(d.opt.bind_endpoint);
  } catch (const zmq::error_t& e) {
    throw std::runtime_error("bus " + d.opt.self + ": cannot bind " + d.opt.bind_endpoint +
                             ": " + e.what());
  }
  {
    std::lock_guard<std::mutex> block(d.bound_mutex);
    d.bound = d.router.get(zmq::sockopt::last_endpoint);
  }
  // A DEALER to a peer's ROUTER (routing id = our name), CURVE unless `plaintext`.
  auto connect_dealer = [&d, &sec](const std::string& host, const std::string& ep,
                                   bool plaintext, const char* what,
                                   const std::string* bulk_secret = nullptr) {
    zmq::socket_t s(d.ctx, zmq::socket_type::dealer);
    set_common_options(s, d.opt);
    s.set(zmq::sockopt::routing_id, d.opt.self);
    s.set(zmq::sockopt::immediate, true);
    s.set(zmq::sockopt::connect_timeout, liveness_window_ms(d.opt.knobs));
    if (!plaintext) {
      s.set(zmq::sockopt::curve_serverkey, sec.host_keys.at(host));
      s.set(zmq::sockopt::curve_publickey, sec.public_z85);
      s.set(zmq::sockopt::curve_secretkey, sec.secret_z85);
    }
    if (bulk_secret != nullptr) {  // PLAIN: our name and the secret we sent it over CURVE
      s.set(zmq::sockopt::plain_username, d.opt.self);
      s.set(zmq::sockopt::plain_password, *bulk_secret);
    }
    try {
      s.connect(ep);
    } catch (const zmq::error_t& e) {
      throw std::runtime_error("bus " + d.opt.self + ": cannot connect to " + what + host +
                               " at " + ep + ": " + e.what());
    }
    return s;
  };
  for (const auto& [host, ep] : d.opt.peers) {
    d.dealer_of[host] = d.dealers.size();
    d.dealers.emplace_back(host, connect_dealer(host, ep, sec.plaintext, "peer "));
  }
  if (bulk) {
    d.bulk_router = zmq::socket_t(d.ctx, zmq::socket_type::router);
    set_common_options(d.bulk_router, d.opt);
    d.bulk_router.set(zmq::sockopt::sndhwm,
                      d.opt.bulk_hwm > 0 ? d.opt.bulk_hwm : 16 * d.opt.knobs.chunk_window);
    d.bulk_router.set(zmq::sockopt::zap_domain, bulk_zap_domain);
    // PLAIN: each host's bulk DEALER presents the secret it sent us over CURVE.
    d.bulk_router.set(zmq::sockopt::plain_server, true);
    if (zmq_socket_monitor(d.bulk_router.handle(), bulk_monitor_endpoint,
                           ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) != 0)
      throw std::runtime_error("bus " + d.opt.self + ": cannot monitor the bulk router: " +
                               zmq_strerror(zmq_errno()));
    d.bulk_monitor = zmq::socket_t(d.ctx, zmq::socket_type::pair);
    d.bulk_monitor.set(zmq::sockopt::linger, 0);
    d.bulk_monitor.connect(bulk_monitor_endpoint);
    d.bulk_router.set(zmq::sockopt::router_mandatory, true);
    d.bulk_router.set(zmq::sockopt::router_handover, true);
    try {
      d.bulk_router.bind(d.opt.bulk_bind_endpoint);
    } catch (const zmq::error_t& e) {
      throw std::runtime_error("bus " + d.opt.self + ": cannot bind the bulk channel on " +
                               d.opt.bulk_bind_endpoint + ": " + e.what());
    }
    for (const auto& [host, ep] : d.opt.bulk_peers) {
      d.bulk_dealer_of[host] = d.bulk_dealers.size();
      d.bulk_dealers.emplace_back(
          host, connect_dealer(host, ep, /*plaintext=*/true, "the bulk channel of ",
                               &d.bulk_secret_out.at(host)));
    }
  }
  d.io = std::thread([&d] { d.run(); });
  d.started.store(true);
  spdlog::info("bus {}: listening on {} (boot {:016x}, {} peers, {}){}", d.opt.self, d.bound,
               d.boot, d.dealers.size(),
               sec.plaintext ? "PLAINTEXT, loopback only" : "CURVE, listed keys only",
               bulk ? fmt::format("; latents in plaintext on {} with {} peers (each proving "
                                  "its per-boot secret), digests on the authenticated link",
                                  d.opt.bulk_bind_endpoint, d.bulk_dealers.size())
                    : std::string());
}

void bus::stop() {
  impl& d = *impl_;
  if (std::this_thread::get_id() == d.io_id.load()) {
    d.stopping.store(true);  // from a callback: the loop ends after it returns
    return;
  }
  std::lock_guard<std::mutex> lock(d.lifecycle_mutex);
  if (!d.started.load() || d.joined)
    return;
  d.stopping.store(true);
  d.wake();
  d.io.join();
  d.joined = true;
}

const std::string& bus::self() const { return impl_->opt.self; }

uint64_t bus::boot_id() const { return impl_->boot; }
uint64_t bus::loop_turns() const { return impl_->loop_turns.load(std::memory_order_relaxed); }

std::string bus::endpoint() const {
  std::lock_guard<std::mutex> lock(impl_->bound_mutex);
  return impl_->bound;
}

uint64_t bus::send(const std::string& host, const std::string& target, std::string_view type,
                   std::string_view body, uint64_t correlation) {
  impl& d = *impl_;
  route where = route::peer;
  if (host == d.opt.self)
    where = route::local;
  else if (d.opt.peers.count(host) == 0) {
    d.count(&bus_stats::unroutable);
    return 0;
  }
  return d.enqueue(where, host, d.make_env(type, target, correlation), body);
}

uint64_t bus::reply(const std::string& reply_to, std::string_view type, std::string_view body,
                    uint64_t correlation) {
  impl& d = *impl_;
  if (reply_to.empty()) {
    d.count(&bus_stats::unroutable);
    return 0;
  }
  return d.enqueue(route::router, reply_to, d.make_env(type, "", correlation), body);
}

void bus::fetch_latent(const std::string& host, const std::string& sha256_hex, uint64_t bytes,
                       const std::string& dest_path, fetch_callback callback) {
  impl& d = *impl_;
  if (!is_sha256_hex(sha256_hex))
    throw std::invalid_argument("fetch_latent: sha256 must be 64 lowercase hex digits");
  if (host != d.opt.self && d.opt.peers.count(host) == 0)
    throw std::invalid_argument("fetch_latent: unknown host " + host);
  if (dest_path.empty())
    throw std::invalid_argument("fetch_latent: empty destination path");
  auto task = [&d, host, sha256_hex, bytes, dest_path, callback]() mutable {
    d.fetcher.start(host, sha256_hex, bytes, dest_path, std::move(callback));
  };
  if (!d.started.load() || !d.post(std::move(task))) {
    if (callback)
      callback(fetch_result{fetch_outcome::transient, "bus not running", 0, 0});
  }
}

bus_stats bus::stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mutex);
  return impl_->counters;
}

} // namespace vidline::nodes
