/// What arrives on the bus (bus_impl.hpp): a frame decoded and checked, duplicates and
/// impersonations dropped, heartbeats fed to liveness, latent fetches and input uploads
/// served, and everything else delivered to the node's handler; dropped frames logged
/// under a rate limit.

#include "nodes/bus/bus_impl.hpp"

namespace vidline::nodes::bus {

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
  if (!in.local && !in.bulk)  // a peer that speaks but never beats is judged all the same
    apply(live.frame_received(env.sender, now_ms()));
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

} // namespace vidline::nodes::bus
