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

class in_process_calls final : public coordinator_calls {
public:
  /// Finds the coordinator through `rt` at every request.
  explicit in_process_calls(std::shared_ptr<const router> rt);

  /// The actor system requests are made in, once it runs; nullptr before it stops (waits
  /// for the requests in flight; every later request goes unanswered at once). A request
  /// made before the system runs waits for it, up to its timeout.
  void attach(caf::actor_system* sys);

  std::optional<msg::submit_reply> ask(const msg::submit_run& r, int timeout_ms) override;
  std::optional<msg::status_reply> ask(const msg::status_query& r, int timeout_ms) override;
  std::optional<msg::runs_reply> ask(const msg::runs_query& r, int timeout_ms) override;
  std::optional<msg::resume_reply> ask(const msg::resume_run& r, int timeout_ms) override;
  std::optional<msg::cancel_reply> ask(const msg::cancel_run& r, int timeout_ms) override;
  std::optional<msg::submit_jobs_reply> ask(const msg::submit_jobs& r, int timeout_ms) override;
  std::optional<msg::drain_reply> ask(const msg::drain_request& r, int timeout_ms) override;
  std::optional<msg::review_reply> ask(const msg::review_take& r, int timeout_ms) override;
  std::string where() const override { return "in this node's process"; }

private:
  template <class Reply, class Request>
  std::optional<Reply> get(const Request& req, int timeout_ms);

  std::shared_ptr<const router> rt_;
  std::shared_mutex m_;
  caf::actor_system* sys_ = nullptr;
  bool stopped_ = false;
};

} // namespace vidline::nodes
