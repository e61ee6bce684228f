#pragma once
/// How actors reach other actors by (host, name), on this node or another, and answer
/// command-line clients. Implemented by the node (nodes/router); actors never see sockets.

#include <cstdint>
#include <functional>
#include <string>

#include <caf/actor.hpp>

#include "messages/envelope.hpp"

namespace vidline::actors {

/// Result of pulling a latent from another host into a local file.
struct fetch_result {
  std::string outcome;   ///< msg::outcome::ok | corrupt | transient, or "not_found"
  std::string error;
  uint64_t bytes = 0;
  double elapsed_ms = 0;
};

class outbox {
public:
  virtual ~outbox() = default;

  /// This node's host name.
  virtual const std::string& self_host() const = 0;

  /// Sends a packed message to actor `target` on `host` (this host included).
  virtual void send_packed(const std::string& host, const std::string& target,
                           const std::string& type, std::string body) = 0;

  /// Answers a command-line client.
  virtual void reply_packed(const std::string& reply_to, uint64_t correlation,
                            const std::string& type, std::string body) = 0;

  /// The local actor registered under `name` (invalid handle when none).
  virtual caf::actor local(const std::string& name) const = 0;

  /// Pulls latent `sha256` (`bytes` long) from `host` into `dest_path`, verified; calls
  /// `done` from another thread when it ends.
  virtual void fetch_latent(const std::string& host, const std::string& sha256,
                            uint64_t bytes, const std::string& dest_path,
                            std::function<void(fetch_result)> done) = 0;

  /// Pulls input `sha256` (a reference image, `bytes` long) from `host`'s
  /// <data_dir>/inputs/ into `dest_path`, verified as a latent is; calls `done` from
  /// another thread when it ends.
  virtual void fetch_input(const std::string& host, const std::string& sha256,
                           uint64_t bytes, const std::string& dest_path,
                           std::function<void(fetch_result)> done) = 0;

  template <class T>
  void send(const std::string& host, const std::string& target, const T& m) {
    send_packed(host, target, T::wire_name, msg::pack_body(m));
  }

  template <class T>
  void reply(const std::string& reply_to, uint64_t correlation, const T& m) {
    reply_packed(reply_to, correlation, T::wire_name, msg::pack_body(m));
  }
};

/// Where actors register so inbound messages find them (the supervisor keeps it current
/// across restarts).
class registry {
public:
  virtual ~registry() = default;
  virtual void put(const std::string& name, caf::actor handle) = 0;
  virtual void remove(const std::string& name, const caf::actor_addr& handle) = 0;
};

} // namespace vidline::actors
