#pragma once
/// A node's HTTP endpoint (docs/http.md): `/metrics` on every node; on the coordinator's
/// node also the API (`/v1/...`, docs/openapi.json) and the dashboard (`/dashboard/`).
/// The API asks the coordinator through the same client the CLI uses
/// (nodes/verbs/coordinator_client.hpp), so it can do what the CLI can; on the coordinator's
/// node the client's requests are CAF requests in the node's own process
/// (nodes/coordinator_calls.hpp), not messages through its bus.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "messages/messages.hpp"
#include "nodes/http_requests.hpp"
#include "nodes/verbs/coordinator_client.hpp"

namespace vidline::nodes {

class http_server {
public:
  /// Binds host `host`'s http endpoint (the config's `hosts[].http`; must have a port) and
  /// starts serving on a thread of its own. The API asks the coordinator through `calls`
  /// (none: over the bus). Throws std::runtime_error naming what failed (token file, bind).
  http_server(std::shared_ptr<const config::cluster> cluster, const std::string& host,
              std::shared_ptr<verbs::coordinator_calls> calls = nullptr);
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// Ends open event streams and stops serving (also done by the destructor).
  void stop();
  /// "http://ADDRESS:PORT".
  std::string url() const;

private:
  struct impl;
  std::unique_ptr<impl> p_;
};

} // namespace vidline::nodes
