#pragma once
/// The coordinator asked inside its own process: each request is a CAF request to the
/// coordinator actor (the one the router names "coordinator": after a restart, its newest
/// incarnation), answered with the same reply the bus carries to the command line. The HTTP
/// API of the coordinator's node asks this way, so a request of the API never goes out
/// through a socket to come back in.

#include <memory>
#include <shared_mutex>

#include "nodes/verbs/coordinator_client.hpp"

namespace caf {
class actor_system;
}

namespace vidline::nodes {

class router;

class in_process_calls final : public verbs::calls_through<in_process_calls> {
public:
  /// Finds the coordinator through `rt` at every request.
  explicit in_process_calls(std::shared_ptr<const router> rt);
  /// Out of line, as the constructor: the calls (and get) are made in coordinator_calls.cpp.
  ~in_process_calls() override;

  /// The actor system requests are made in, once it runs; nullptr before it stops (waits
  /// for the requests in flight; every later request goes unanswered at once). A request
  /// made before the system runs waits for it, up to its timeout.
  void attach(caf::actor_system* sys);

  /// The reply to `req`: a CAF request to the coordinator actor.
  template <class Reply, class Request>
  std::optional<Reply> get(const Request& req, int timeout_ms);

  std::string where() const override { return "in this node's process"; }

private:
  std::shared_ptr<const router> rt_;
  std::shared_mutex m_;
  caf::actor_system* sys_ = nullptr;
  bool stopped_ = false;
};

} // namespace vidline::nodes
