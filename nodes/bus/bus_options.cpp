/// The bus's options and their validation, and the settings every socket gets (bus_impl.hpp).

#include <algorithm>
#include <random>
#include <stdexcept>

#include "nodes/bus/bus_impl.hpp"

namespace vidline::nodes::bus {
namespace bus_detail {
namespace {

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

} // namespace

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
  if (uint64_t{k.chunk_bytes} + data::chunk_frame_overhead_bytes > k.max_frame_bytes)
    invalid("knobs.chunk_bytes (" + std::to_string(k.chunk_bytes) + ") + " +
            std::to_string(data::chunk_frame_overhead_bytes) +
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
  // A connection whose other end vanished without a FIN (power loss, cable pulled) is
  // dropped by TCP itself, so the DEALER reconnects instead of queueing into a dead socket:
  // data unacknowledged for the liveness window (TCP_USER_TIMEOUT; the app heartbeats keep
  // data moving on every DEALER), and keepalive probes on a connection with nothing to
  // send. Not ZMTP heartbeats: libzmq 4.3.4 aborts the process (`!_io_error`,
  // stream_engine_base.cpp:331) when its ping timer fires on a connection whose input had
  // stopped, which a reconnect under load produces (libzmq issues 4364 and 4841).
  const int window_ms = liveness_window_ms(k);
  const int window_s = std::max(1, (window_ms + 999) / 1000);
  s.set(zmq::sockopt::tcp_maxrt, window_ms);
  s.set(zmq::sockopt::tcp_keepalive, 1);
  s.set(zmq::sockopt::tcp_keepalive_idle, window_s);
  s.set(zmq::sockopt::tcp_keepalive_intvl, 1);
  s.set(zmq::sockopt::tcp_keepalive_cnt, window_s);
}

} // namespace bus_detail

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

uint64_t random_boot_id() {
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0)
    id = (uint64_t{rd()} << 32) ^ rd();
  return id;
}

} // namespace vidline::nodes::bus
