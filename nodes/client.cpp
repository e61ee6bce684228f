/// The command-line client of a node's bus (client.hpp).

#include "nodes/client.hpp"

#include <algorithm>
#include <chrono>

#include <unistd.h>

#include <zmq.hpp>

#include "nodes/bus_frame.hpp"

namespace vidline::nodes {

struct client::sockets {
  zmq::context_t ctx{1};
  zmq::socket_t dealer;
};

client::client(std::string endpoint, const config::knobs& knobs, client_security security)
    : endpoint_(std::move(endpoint)),
      knobs_(knobs),
      security_(std::move(security)),
      limits_(wire_limits(knobs)),
      sender_("cli:" + std::to_string(::getpid())),
      next_id_(first_envelope_id()),
      s_(std::make_unique<sockets>()) {
  if (security_.plaintext && !is_loopback_endpoint(endpoint_))
    throw std::invalid_argument("client: plaintext to " + endpoint_ +
                                " refused: it is not loopback (use CURVE keys)");
  reset();
}

client::~client() = default;

void client::reset() {
  if (s_->dealer)
    s_->dealer.close();
  s_->dealer = zmq::socket_t(s_->ctx, zmq::socket_type::dealer);
  auto& d = s_->dealer;
  d.set(zmq::sockopt::linger, 0);
  d.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(knobs_.max_frame_bytes));
  d.set(zmq::sockopt::reconnect_ivl, knobs_.reconnect_min_ms);
  d.set(zmq::sockopt::reconnect_ivl_max, knobs_.reconnect_max_ms);
  // Queue nothing for a node that is not connected: a request then fails within its
  // timeout instead of being delivered whenever the node comes back.
  d.set(zmq::sockopt::immediate, true);
  if (!security_.plaintext) {
    d.set(zmq::sockopt::curve_serverkey, security_.server_public_z85);
    d.set(zmq::sockopt::curve_publickey, security_.public_z85);
    d.set(zmq::sockopt::curve_secretkey, security_.secret_z85);
  }
  d.connect(endpoint_);
}

std::optional<inbound> client::request(const std::string& target, std::string_view type,
                                       std::string_view body, int timeout_ms) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::milliseconds(std::max(0, timeout_ms));
  auto left_ms = [&] {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    return std::max<int64_t>(0, left.count());
  };

  msg::envelope env;
  env.type = std::string(type);
  env.id = next_id_++;
  env.sender = sender_;
  env.target = target;
  last_id_ = env.id;
  zmq::message_t frame = make_frame(env, body);

  auto& d = s_->dealer;
  // With ZMQ_IMMEDIATE a blocking send waits for the connection, up to the timeout.
  d.set(zmq::sockopt::sndtimeo, static_cast<int>(left_ms()));
  bool sent = false;
  try {
    sent = d.send(frame, zmq::send_flags::none).has_value();
  } catch (const zmq::error_t&) {
  }
  if (!sent) {
    reset();
    return std::nullopt;
  }
  for (;;) {
    zmq::pollitem_t item{d.handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(left_ms()));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR)
        continue;
      break;
    }
    if (!(item.revents & ZMQ_POLLIN)) {
      if (left_ms() == 0)
        break;
      continue;
    }
    zmq::message_t reply;
    if (!d.recv(reply, zmq::recv_flags::dontwait))
      continue;
    bool multipart = reply.more();
    while (reply.more() && d.recv(reply, zmq::recv_flags::dontwait)) {
    }
    if (multipart)
      continue;
    msg::frame f;
    if (msg::decode_frame(reply.data<char>(), reply.size(), limits_, f) != msg::decode_error::none)
      continue;
    if (f.env.correlation != env.id)
      continue;  // a late reply to an earlier request
    return inbound{f.env, std::string(f.body), ""};
  }
  reset();  // Lazy Pirate: nothing from this request may leak into the next
  return std::nullopt;
}

} // namespace vidline::nodes
