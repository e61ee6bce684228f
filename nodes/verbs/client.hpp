#pragma once
/// A small synchronous client of a node's bus, for the command line: one DEALER connected
/// to the node's ROUTER, one request at a time, the reply matched by correlation.
///
/// Lazy Pirate (zguide ch. 4): a request that times out resets the socket, so a reply or
/// a queued request left over from it can never be mistaken for the next one's. Requests
/// are not retried here: the caller decides, with an idempotency key where it matters
/// (submit_run.request_id).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "config/knobs.hpp"
#include "messages/envelope.hpp"
#include "nodes/bus/bus.hpp"
#include "nodes/bus/keys.hpp"

namespace vidline::nodes::verbs {

/// A synchronous request/reply client of one node. Not thread-safe.
class client {
public:
  /// Connects (lazily, in the background) to the node's bus at `endpoint`
  /// ("tcp://ADDR:PORT"). Frame limits and reconnect backoff come from `knobs`. Throws
  /// std::invalid_argument for plaintext to an endpoint that is not loopback.
  explicit client(std::string endpoint, const config::knobs& knobs = {},
                  bus::client_security security = {});
  ~client();
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  /// Sends a message to actor `target` on the node and waits up to `timeout_ms` for the
  /// reply whose correlation is this request's id. None on timeout or when the node is
  /// unreachable; replies to earlier requests and bad frames are skipped.
  std::optional<bus::inbound> request(const std::string& target, std::string_view type,
                                 std::string_view body, int timeout_ms);

  template <class T>
  std::optional<bus::inbound> request(const std::string& target, const T& m, int timeout_ms) {
    return request(target, T::wire_name, msg::pack_body(m), timeout_ms);
  }

  /// "cli:<pid>": the sender name this client's envelopes carry.
  const std::string& sender() const { return sender_; }

  /// The envelope id of the last request sent (0 before the first).
  uint64_t last_request_id() const { return last_id_; }

private:
  struct sockets;
  void reset();

  std::string endpoint_;
  config::knobs knobs_;
  bus::client_security security_;
  msg::decode_limits limits_;
  std::string sender_;
  uint64_t next_id_;
  uint64_t last_id_ = 0;
  std::unique_ptr<sockets> s_;
};

/// Uploads the file at `path`, whose contents hash to `sha256`, to the node `cl` talks to
/// (input_put, chunks of knobs.chunk_bytes). "" when the node holds it verified (`already`
/// set when it did before), else why not (the file changed, unreadable, too large, the node
/// refused or did not answer).
std::string upload_input(client& cl, const config::knobs& k, const std::string& path,
                         const std::string& sha256, bool* already = nullptr);

} // namespace vidline::nodes::verbs
