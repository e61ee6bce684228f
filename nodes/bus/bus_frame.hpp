#pragma once
/// Building a frame straight into a ZeroMQ message (shared by the bus and the client).

#include <cstring>
#include <string>
#include <string_view>

#include <zmq.hpp>

#include "messages/envelope.hpp"

namespace vidline::nodes::bus {

/// One ZeroMQ message holding encode_frame(env, body), with the body copied once.
inline zmq::message_t make_frame(const msg::envelope& env, std::string_view body) {
  const std::string head = msg::encode_frame_head(env, body.size());
  zmq::message_t m(head.size() + body.size());
  std::memcpy(m.data(), head.data(), head.size());
  if (!body.empty())
    std::memcpy(static_cast<char*>(m.data()) + head.size(), body.data(), body.size());
  return m;
}

} // namespace vidline::nodes::bus
