#pragma once
/// The inside of a node's HTTP endpoint (nodes/http_server.hpp), shared by the files that
/// answer its requests: http_server.cpp (the routes, the checks every request passes,
/// /metrics, the dashboard, the server's lifetime), http_runs.cpp (runs, the cluster, event
/// streams), http_jobs.cpp (a job's video, thumbnail and review) and http_inputs.cpp
/// (uploaded inputs).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "nodes/http_server.hpp"
#include "nodes/data/inputs.hpp"
#include "nodes/verbs/commands.hpp"

namespace vidline::nodes {

struct http_server::impl {
  std::shared_ptr<const config::cluster> cluster;
  const config::host* self = nullptr;
  bool coordinator = false;
  std::string token;
  httplib::Server svr;
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::mutex m;
  std::condition_variable cv;
  std::atomic<int> streams{0};
  static constexpr int max_streams = 8;
  std::string bound;
  int collector = 0;
  std::mutex inputs_mutex;
  std::unique_ptr<data::input_store> inputs;  ///< PUT /v1/inputs: <data_dir>/inputs

  using handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  /// One API request: its method, its path pattern (a regex; captures are the path's
  /// parameters), whether only the coordinator's node serves it, and its handler. A new
  /// request of the API is one more row (and its entry in docs/openapi.json).
  struct route {
    std::string method;
    std::string pattern;
    bool coordinator_only;
    handler fn;
  };

  std::shared_ptr<verbs::coordinator_calls> calls;  ///< how the API reaches the coordinator
  verbs::coordinator_client client() const { return verbs::coordinator_client(*cluster, calls); }

  /// Waits up to `d` or until the server stops; whether it is stopping.
  bool pause(std::chrono::milliseconds d) {
    std::unique_lock<std::mutex> l(m);
    return cv.wait_for(l, d, [this] { return stopping.load(); });
  }

  std::vector<route> routes();
  void install();

  /// Answers `body` as JSON with `status`.
  static void send_json(httplib::Response& res, int status, const nlohmann::json& body);
  /// Answers an error: {"error": message, "code": the status's name} (docs/http.md).
  static void send_error(httplib::Response& res, int status, const std::string& message);

  // Handlers.
  void metrics(const httplib::Request&, httplib::Response& res);
  void submit(const httplib::Request& req, httplib::Response& res);
  void list_runs(const httplib::Request& req, httplib::Response& res);
  void cancel(const httplib::Request& req, httplib::Response& res, bool one_job);
  void add_jobs(const httplib::Request& req, httplib::Response& res);
  void run_status(const httplib::Request& req, httplib::Response& res);
  void resume(const httplib::Request& req, httplib::Response& res);
  void gantt(const httplib::Request& req, httplib::Response& res);
  void cluster_status(const httplib::Request&, httplib::Response& res);
  void gpus(const httplib::Request&, httplib::Response& res);
  void video(const httplib::Request& req, httplib::Response& res);
  void thumbnail(const httplib::Request& req, httplib::Response& res);
  /// Job {i} of run {id} (the request's path) and a local path of its video, or nullopt
  /// when answered with an error (no such job, not made, not fetched).
  std::optional<std::pair<nlohmann::json, std::string>> job_video(const httplib::Request& req,
                                                        httplib::Response& res);
  void review(const httplib::Request& req, httplib::Response& res);
  void events(const httplib::Request& req, httplib::Response& res, bool follow_latest);
  void dashboard(const httplib::Request& req, httplib::Response& res);
  void put_input(const httplib::Request& req, httplib::Response& res);

  /// A run's status or an error answer; nullopt when answered with an error.
  std::optional<nlohmann::json> status_of_run(const std::string& run_id, httplib::Response& res);
};

} // namespace vidline::nodes
