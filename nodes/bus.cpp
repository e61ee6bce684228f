/// The node's bus (bus.hpp): sockets, the I/O loop, heartbeats, dispatch. Options and
/// validation are in bus_options.cpp, CURVE/ZAP and the bulk channel's admission in
/// bus_security.cpp; the shared insides in bus_impl.hpp.

#include "nodes/bus_impl.hpp"

namespace vidline::nodes {
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
      server(opt.latent_dir, opt.knobs.max_frame_bytes - chunk_frame_overhead_bytes,
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
  next_redial_ms.assign(dealers.size(), 0);

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
    if (next_redial_ms[i] != 0 && now >= next_redial_ms[i]) {
      const peer_liveness* p = live.peer(dealers[i].first);
      if (p != nullptr && p->up) {
        next_redial_ms[i] = 0;
      } else {
        redial(i);
        next_redial_ms[i] = now + live.silence_limit_ms();
      }
    }
    if (now < next_beat_ms[i])
      continue;
    // Paced from now, not from the missed slot: a late loop skips beats, never bursts.
    next_beat_ms[i] = now + (send_heartbeat(dealers[i].first) ? interval : retry);
  }
}

void bus::impl::redial(std::size_t i) {
  auto& [host, s] = dealers[i];
  auto again = [this, &host](zmq::socket_t& sock, const std::string& ep) {
    try {
      sock.disconnect(ep);
    } catch (const zmq::error_t&) {
      // not connected (ENOENT): the connect below is all there is to do
    }
    try {
      sock.connect(ep);
    } catch (const zmq::error_t& e) {
      spdlog::warn("bus {}: cannot dial {} at {} again: {}", opt.self, host, ep, e.what());
    }
  };
  again(s, opt.peers.at(host));
  if (auto b = bulk_dealer_of.find(host); b != bulk_dealer_of.end())
    again(bulk_dealers[b->second].second, opt.bulk_peers.at(host));
  count(&bus_stats::redials);
  spdlog::debug("bus {}: dialled {} afresh (down)", opt.self, host);
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
  if (env.type == msg::input_put::wire_name) {
    msg::input_put req;  // its data points into *m, alive until on_input_put returns
    try {
      keep.get().convert(req);
    } catch (const std::exception&) {
      return drop(msg::decode_error::bad_body, in, env.type);
    }
    return on_input_put(env, req, in);
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

void bus::impl::on_input_put(const msg::envelope& env, const msg::input_put& req,
                             const ingress& in) {
  // An upload comes from a client (the CLI) on the ROUTER, whose connection names it: the
  // part file is that connection's alone. Written on this thread: a chunk is at most
  // chunk_bytes, and only the last one is fsynced (docs/shots.md, "References travel").
  if (in.reply_to.empty() || in.bulk)
    return drop(msg::decode_error::bad_body, in, env.type);
  const auto r = inputs.put(in.reply_to + "/" + env.sender, req);
  if (r.done && req.offset + req.data.size == req.total && req.data.size > 0)
    spdlog::info("bus {}: input {} ({} bytes) uploaded by {}", opt.self, req.sha256, req.total,
                 env.sender);
  zmq::message_t out = make_frame(make_env(msg::input_put_reply::wire_name, bus_target, env.id),
                                  msg::pack_body(r));
  transmit(route::router, in.reply_to, out);
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
      if (auto d = dealer_of.find(e.host); d != dealer_of.end()) {
        redial(d->second);
        next_redial_ms[d->second] = now_ms() + live.silence_limit_ms();
      }
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
               "than {} ms), {} redials of down peers", opt.self, totals.local_stalls,
               live.stall_gap_ms(), totals.redials);
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
                       const std::string& dest_path, fetch_callback callback,
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
      callback(fetch_result{fetch_outcome::transient, "bus not running", 0, 0});
  }
}

bus_stats bus::stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mutex);
  return impl_->counters;
}

} // namespace vidline::nodes
