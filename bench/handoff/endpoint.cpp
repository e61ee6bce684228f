// bench_handoff's endpoint: one bus in its own process, driven by lines on stdin.

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>

#include <msgpack.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "bench/handoff/common.hpp"
#include "bench/handoff/setting.hpp"
#include "nodes/bus/bus.hpp"
#include "nodes/bus/keys.hpp"

namespace vidline::bench::handoff {

namespace {

constexpr const char* ack_type = "bench_latent_ack";      // receiver -> source
constexpr const char* acked_type = "bench_latent_acked";  // source -> receiver

/// Waits for answers to acknowledgements, by correlation id.
struct ack_waiter {
  std::mutex m;
  std::condition_variable cv;
  std::map<uint64_t, bool> answered;

  bool wait(uint64_t id, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(m);
    return cv.wait_for(lock, timeout, [&] { return answered.count(id) != 0; });
  }
  void answer(uint64_t id) {
    {
      std::lock_guard<std::mutex> lock(m);
      answered[id] = true;
    }
    cv.notify_all();
  }
};

} // namespace

/// `bench_handoff endpoint --self A --bind tcp://ADDR:PORT --peer B=tcp://ADDR:PORT
///  --dir DIR [--chunk-bytes N] [--chunk-window N]`. Commands on stdin, one per line:
///   wait_peer                     -> "peer_up" once the peer's heartbeats arrive
///   fetch SHA BYTES DEST          -> "ok HANDOFF_MS FETCH_MS" or "fail OUTCOME REASON"
///   quit
int endpoint_main(const args& a) {
  // stdout carries the protocol: logs go to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("endpoint"));
  spdlog::set_level(spdlog::level::warn);

  nodes::bus::bus_options o;
  o.self = a.need("self");
  o.bind_endpoint = a.need("bind");
  const std::string peer_spec = a.need("peer");
  const auto eq = peer_spec.find('=');
  if (eq == std::string::npos)
    die("--peer must be NAME=ENDPOINT");
  const std::string peer = peer_spec.substr(0, eq);
  o.peers[peer] = peer_spec.substr(eq + 1);
  o.latent_dir = a.need("dir");
  o.knobs.chunk_bytes = static_cast<uint32_t>(a.num("chunk-bytes", o.knobs.chunk_bytes));
  o.knobs.chunk_window = static_cast<int>(a.num("chunk-window", o.knobs.chunk_window));
  if (a.has("bulk-bind")) {
    o.bulk_bind_endpoint = a.need("bulk-bind");
    const std::string bp = a.need("bulk-peer");
    const auto beq = bp.find('=');
    if (beq == std::string::npos || bp.substr(0, beq) != peer)
      die("--bulk-peer must be " + peer + "=ENDPOINT");
    o.bulk_peers[peer] = bp.substr(beq + 1);
    o.bulk_admit_addresses = a.values.at("bulk-admit");
  }
  if (a.has("keys")) {
    // CURVE as a node runs it: DIR/<self>.key and .pub, DIR/<peer>.pub (vidline keygen).
    const std::string dir = a.get("keys");
    o.security.plaintext = false;
    o.security.secret_z85 = nodes::bus::read_secret_key(dir + "/" + o.self + ".key");
    o.security.public_z85 = nodes::bus::read_public_key(dir + "/" + o.self + ".pub");
    o.security.host_keys[o.self] = o.security.public_z85;
    o.security.host_keys[peer] = nodes::bus::read_public_key(dir + "/" + peer + ".pub");
  } else {
    o.security.plaintext_anywhere = true;  // the unauthenticated baseline, namespaces too
  }

  std::mutex m;
  std::condition_variable cv;
  bool peer_up = false;
  ack_waiter acks;
  nodes::bus* self_bus = nullptr;
  auto on_message = [&](const nodes::inbound& in) {
    if (in.env.type == ack_type && self_bus != nullptr) {
      // The source side of the acknowledgement: answer at once on the same connection.
      self_bus->reply(in.reply_to, acked_type, in.body, in.env.id);
    } else if (in.env.type == acked_type) {
      acks.answer(in.env.correlation);
    }
  };
  auto on_peer = [&](const msg::peer_event& ev) {
    std::lock_guard<std::mutex> lock(m);
    peer_up = ev.up;
    cv.notify_all();
  };
  nodes::bus b(o, on_message, on_peer);
  self_bus = &b;
  b.start();

  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "quit")
      break;
    if (cmd == "wait_peer") {
      std::unique_lock<std::mutex> lock(m);
      if (!cv.wait_for(lock, std::chrono::seconds(30), [&] { return peer_up; }))
        die(o.self + ": peer " + peer + " not up after 30 s");
      std::printf("peer_up\n");
    } else if (cmd == "fetch") {
      std::string sha, dest;
      uint64_t bytes = 0;
      in >> sha >> bytes >> dest;
      std::promise<nodes::data::fetch_result> done;
      auto f = done.get_future();
      const auto t0 = steady::now();
      b.fetch_latent(peer, sha, bytes, dest,
                     [&done](const nodes::data::fetch_result& r) { done.set_value(r); });
      if (f.wait_for(std::chrono::seconds(120)) != std::future_status::ready)
        die(o.self + ": fetch of " + sha + " did not end in 120 s");
      const nodes::data::fetch_result r = f.get();
      const auto t_fetched = steady::now();
      if (r.outcome != nodes::data::fetch_outcome::ok) {
        std::printf("fail %s %s\n", nodes::bus::to_string(r.outcome), r.error.c_str());
      } else {
        // The acknowledgement: the source hears that the latent is safe here.
        msgpack::sbuffer body;  // every message body is a map
        msgpack::packer<msgpack::sbuffer> pk(body);
        pk.pack_map(1);
        pk.pack(std::string("sha256"));
        pk.pack(sha);
        const uint64_t id = b.send(peer, "bench", ack_type, std::string_view(body.data(), body.size()));
        if (id == 0 || !acks.wait(id, std::chrono::seconds(10))) {
          std::printf("fail ack no answer to the acknowledgement\n");
        } else {
          const auto t_acked = steady::now();
          std::printf("ok %.3f %.3f\n", ms_between(t0, t_acked), ms_between(t0, t_fetched));
        }
      }
    } else {
      std::printf("error unknown command '%s'\n", cmd.c_str());
    }
    std::fflush(stdout);
  }
  b.stop();
  return 0;
}

} // namespace vidline::bench::handoff
