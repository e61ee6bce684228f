/// The node's bus (bus.hpp): its public face, the queue actors hand frames to, and the
/// sockets set up at start. The I/O loop is in bus_loop.cpp, what arrives in
/// bus_inbound.cpp, options and validation in bus_options.cpp, CURVE/ZAP and the bulk
/// channel's admission in bus_security.cpp; the shared insides in bus_impl.hpp.

#include "nodes/bus/bus_impl.hpp"

namespace vidline::nodes::bus {
namespace bus_detail {

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

} // namespace bus_detail

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
      server(opt.latent_dir, opt.knobs.max_frame_bytes - data::chunk_frame_overhead_bytes,
             opt.corrupt_every_nth_chunk),
      inputs(opt.input_dir) {
  server.set_output_dir(opt.output_dir);
  server.set_input_dir(opt.input_dir);
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
                       const std::string& dest_path, data::fetch_callback callback,
                       const std::string& kind) {
  impl& d = *impl_;
  if (!is_sha256_hex(sha256_hex))
    throw std::invalid_argument("fetch_latent: sha256 must be 64 lowercase hex digits");
  if (host != d.opt.self && d.opt.peers.count(host) == 0)
    throw std::invalid_argument("fetch_latent: unknown host " + host);
  if (dest_path.empty())
    throw std::invalid_argument("fetch_latent: empty destination path");
  auto task = [&d, host, sha256_hex, bytes, dest_path, callback, kind]() mutable {
    d.fetcher.start(host, sha256_hex, bytes, dest_path, std::move(callback), kind);
  };
  if (!d.started.load() || !d.post(std::move(task))) {
    if (callback)
      callback(data::fetch_result{data::fetch_outcome::transient, "bus not running", 0, 0});
  }
}

bus_stats bus::stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mutex);
  return impl_->counters;
}

} // namespace vidline::nodes::bus
