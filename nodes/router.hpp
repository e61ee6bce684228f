#pragma once
/// Joins the bus to the node's actors: turns inbound frames into typed messages for the
/// named local actor, and gives actors the outbox they send through. Keeps the registry
/// of local actors current (the supervisor updates it on every restart).

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "actors/outbox.hpp"
#include "nodes/bus/bus.hpp"

namespace vidline::nodes {

class router : public actors::outbox, public actors::registry {
public:
  router(std::string self_host, msg::decode_limits limits);

  /// The bus to send through; set once, before any actor runs.
  void attach(bus::bus* b) { bus_ = b; }

  // -- outbox --
  const std::string& self_host() const override { return self_; }
  void send_packed(const std::string& host, const std::string& target, const std::string& type,
                   std::string body) override;
  void reply_packed(const std::string& reply_to, uint64_t correlation, const std::string& type,
                    std::string body) override;
  caf::actor local(const std::string& name) const override;
  void fetch_latent(const std::string& host, const std::string& sha256, uint64_t bytes,
                    const std::string& dest_path,
                    std::function<void(actors::fetch_result)> done) override;
  void fetch_input(const std::string& host, const std::string& sha256, uint64_t bytes,
                   const std::string& dest_path,
                   std::function<void(actors::fetch_result)> done) override;

  // -- registry --
  void put(const std::string& name, caf::actor handle) override;
  void remove(const std::string& name, const caf::actor_addr& handle) override;

  // -- from the bus (I/O thread) --
  void deliver(const bus::inbound& in);
  void peer_changed(const msg::peer_event& e);

  /// Messages dropped here: unknown type, body that does not unpack, no such actor.
  uint64_t dropped() const { return dropped_; }

private:
  using handler = std::function<void(const bus::inbound&)>;
  template <class T>
  void route(const bus::inbound& in);
  template <class T>
  void route_client(const bus::inbound& in);
  void drop(const bus::inbound& in, const char* why);

  std::string self_;
  msg::decode_limits limits_;
  bus::bus* bus_ = nullptr;
  std::map<std::string, handler> handlers_;
  mutable std::mutex mtx_;
  std::map<std::string, caf::actor> actors_;
  std::atomic<uint64_t> dropped_{0};
};

} // namespace vidline::nodes
