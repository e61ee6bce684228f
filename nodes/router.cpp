#include "nodes/router.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "messages/actor_types.hpp"
#include "messages/gpu_actor_types.hpp"
#include "messages/review_actor_types.hpp"

namespace vidline::nodes {

router::router(std::string self_host, msg::decode_limits limits)
    : self_(std::move(self_host)), limits_(limits) {
  // Node-to-node messages, to the actor the envelope names.
  handlers_[msg::sample_order::wire_name] = [this](const bus::inbound& in) { route<msg::sample_order>(in); };
  handlers_[msg::sample_result::wire_name] = [this](const bus::inbound& in) { route<msg::sample_result>(in); };
  handlers_[msg::pool_status::wire_name] = [this](const bus::inbound& in) { route<msg::pool_status>(in); };
  handlers_[msg::result_ack::wire_name] = [this](const bus::inbound& in) { route<msg::result_ack>(in); };
  handlers_[msg::lease_grant::wire_name] = [this](const bus::inbound& in) { route<msg::lease_grant>(in); };
  handlers_[msg::decode_order::wire_name] = [this](const bus::inbound& in) { route<msg::decode_order>(in); };
  handlers_[msg::decode_result::wire_name] = [this](const bus::inbound& in) { route<msg::decode_result>(in); };
  handlers_[msg::decoder_status::wire_name] = [this](const bus::inbound& in) { route<msg::decoder_status>(in); };
  handlers_[msg::latent_holdings::wire_name] = [this](const bus::inbound& in) { route<msg::latent_holdings>(in); };
  handlers_[msg::latent_release::wire_name] = [this](const bus::inbound& in) { route<msg::latent_release>(in); };
  handlers_[msg::gpu_report::wire_name] = [this](const bus::inbound& in) { route<msg::gpu_report>(in); };
  handlers_[msg::verdict_index::wire_name] = [this](const bus::inbound& in) { route<msg::verdict_index>(in); };
  handlers_[msg::verdict_indexed::wire_name] = [this](const bus::inbound& in) { route<msg::verdict_indexed>(in); };
  // Requests from command-line clients, answered on the ROUTER.
  handlers_[msg::submit_run::wire_name] = [this](const bus::inbound& in) { route_client<msg::submit_run>(in); };
  handlers_[msg::status_query::wire_name] = [this](const bus::inbound& in) { route_client<msg::status_query>(in); };
  handlers_[msg::resume_run::wire_name] = [this](const bus::inbound& in) { route_client<msg::resume_run>(in); };
  handlers_[msg::runs_query::wire_name] = [this](const bus::inbound& in) { route_client<msg::runs_query>(in); };
  handlers_[msg::cancel_run::wire_name] = [this](const bus::inbound& in) { route_client<msg::cancel_run>(in); };
  handlers_[msg::submit_jobs::wire_name] = [this](const bus::inbound& in) { route_client<msg::submit_jobs>(in); };
  handlers_[msg::drain_request::wire_name] = [this](const bus::inbound& in) { route_client<msg::drain_request>(in); };
  handlers_[msg::review_take::wire_name] = [this](const bus::inbound& in) { route_client<msg::review_take>(in); };
}

void router::drop(const bus::inbound& in, const char* why) {
  auto n = ++dropped_;
  // Bounded logging: the first few, then every 1000th.
  if (n <= 10 || n % 1000 == 0)
    spdlog::warn("router: dropped {} from {} to '{}': {} ({} dropped so far)", in.env.type,
                 in.env.sender, in.env.target, why, n);
}

template <class T>
void router::route(const bus::inbound& in) {
  T m;
  if (!msg::unpack_body_as(in.body, limits_, m))
    return drop(in, "body does not unpack");
  auto a = local(in.env.target);
  if (!a)
    return drop(in, "no such actor here");
  caf::anon_send(a, std::move(m));
}

template <class T>
void router::route_client(const bus::inbound& in) {
  if (in.reply_to.empty())
    return drop(in, "a client request with nowhere to answer");
  T m;
  if (!msg::unpack_body_as(in.body, limits_, m))
    return drop(in, "body does not unpack");
  auto a = local("coordinator");
  if (!a)
    return drop(in, "the coordinator does not run on this host");
  caf::anon_send(a, msg::client_call<T>{std::move(m), in.reply_to, in.env.id});
}

void router::deliver(const bus::inbound& in) {
  auto it = handlers_.find(in.env.type);
  if (it == handlers_.end())
    return drop(in, "unknown message type");
  it->second(in);
}

void router::peer_changed(const msg::peer_event& e) {
  spdlog::log(e.up ? spdlog::level::info : spdlog::level::warn, "peer {} is {}", e.host,
              e.up ? "up" : "down");
  if (auto a = local("coordinator"))
    caf::anon_send(a, e);
}

void router::send_packed(const std::string& host, const std::string& target,
                         const std::string& type, std::string body) {
  if (bus_ != nullptr && bus_->send(host, target, type, body) == 0)
    spdlog::debug("router: {} to {}/{} refused by the bus", type, host, target);
}

void router::reply_packed(const std::string& reply_to, uint64_t correlation,
                          const std::string& type, std::string body) {
  if (bus_ != nullptr)
    bus_->reply(reply_to, type, body, correlation);
}

caf::actor router::local(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mtx_);
  auto it = actors_.find(name);
  return it == actors_.end() ? caf::actor{} : it->second;
}

void router::fetch_latent(const std::string& host, const std::string& sha256, uint64_t bytes,
                          const std::string& dest_path,
                          std::function<void(actors::fetch_result)> done) {
  auto adapt = [done](const data::fetch_result& r) {
    done(actors::fetch_result{to_string(r.outcome), r.error, r.bytes, r.elapsed_ms});
  };
  try {
    bus_->fetch_latent(host, sha256, bytes, dest_path, adapt);
  } catch (const std::exception& e) {
    done(actors::fetch_result{"fatal", e.what(), 0, 0});
  }
}

void router::fetch_input(const std::string& host, const std::string& sha256, uint64_t bytes,
                         const std::string& dest_path,
                         std::function<void(actors::fetch_result)> done) {
  auto adapt = [done](const data::fetch_result& r) {
    done(actors::fetch_result{to_string(r.outcome), r.error, r.bytes, r.elapsed_ms});
  };
  try {
    bus_->fetch_latent(host, sha256, bytes, dest_path, adapt, "input");
  } catch (const std::exception& e) {
    done(actors::fetch_result{"fatal", e.what(), 0, 0});
  }
}

void router::put(const std::string& name, caf::actor handle) {
  std::lock_guard<std::mutex> lock(mtx_);
  actors_[name] = std::move(handle);
}

void router::remove(const std::string& name, const caf::actor_addr& handle) {
  std::lock_guard<std::mutex> lock(mtx_);
  auto it = actors_.find(name);
  if (it != actors_.end() && it->second.address() == handle)
    actors_.erase(it);
}

} // namespace vidline::nodes
