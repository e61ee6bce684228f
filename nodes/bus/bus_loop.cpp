/// The bus's I/O loop (bus_impl.hpp): one thread polls the sockets and the wake-up eventfd,
/// sends what actors queued, beats and redials peers, reads frames and hands them to
/// bus_inbound.cpp, and closes everything when the bus stops.

#include "nodes/bus/bus_impl.hpp"

namespace vidline::nodes::bus {

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

} // namespace vidline::nodes::bus
