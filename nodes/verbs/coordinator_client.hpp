#pragma once
/// The coordinator's requests as the command line and the HTTP API make them: submit a run,
/// read its status, list runs, cancel, add jobs, resume, drain, review a take.
///
/// One client, two ways to reach the coordinator (`coordinator_calls`): over its node's bus
/// from any host (the command line: bus_calls below), or by a CAF request inside the
/// coordinator's own process (the HTTP API: nodes/coordinator_calls.hpp). Both give the
/// same replies, and the client turns them into the same results and errors.

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "messages/gpu.hpp"
#include "messages/messages.hpp"
#include "messages/review.hpp"
#include "nodes/verbs/client.hpp"

namespace vidline::nodes::verbs {

/// A request to the coordinator that did not succeed: what to print, and the exit code
/// (nodes/exit_codes.hpp) it means: unreachable, no_such_run, refused, too_large.
class coordinator_error : public std::runtime_error {
public:
  coordinator_error(int exit_code, const std::string& what)
      : std::runtime_error(what), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

private:
  int exit_code_;
};

/// How a coordinator_client reaches the coordinator. Each call is one request and its
/// reply: none when no reply came within `timeout_ms` (the coordinator is down, busy or
/// unreachable); throws coordinator_error (refused) when the answer was not of the reply's
/// kind. The reply's own error is the client's to read.
class coordinator_calls {
public:
  virtual ~coordinator_calls() = default;
  virtual std::optional<msg::submit_reply> ask(const msg::submit_run& r, int timeout_ms) = 0;
  virtual std::optional<msg::status_reply> ask(const msg::status_query& r, int timeout_ms) = 0;
  virtual std::optional<msg::runs_reply> ask(const msg::runs_query& r, int timeout_ms) = 0;
  virtual std::optional<msg::resume_reply> ask(const msg::resume_run& r, int timeout_ms) = 0;
  virtual std::optional<msg::cancel_reply> ask(const msg::cancel_run& r, int timeout_ms) = 0;
  virtual std::optional<msg::submit_jobs_reply> ask(const msg::submit_jobs& r,
                                                    int timeout_ms) = 0;
  virtual std::optional<msg::drain_reply> ask(const msg::drain_request& r, int timeout_ms) = 0;
  virtual std::optional<msg::review_reply> ask(const msg::review_take& r, int timeout_ms) = 0;
  /// The coordinator as messages name it: "at tcp://ADDR:PORT", "in this process".
  virtual std::string where() const = 0;
};

/// The calls of coordinator_calls, each answered by `Way::get<Reply>(request, timeout_ms)`:
/// a way to reach the coordinator writes that one template (and where()), and which reply
/// answers which request is said here only.
template <class Way>
class calls_through : public coordinator_calls {
public:
  std::optional<msg::submit_reply> ask(const msg::submit_run& r, int t) override {
    return way().template get<msg::submit_reply>(r, t);
  }
  std::optional<msg::status_reply> ask(const msg::status_query& r, int t) override {
    return way().template get<msg::status_reply>(r, t);
  }
  std::optional<msg::runs_reply> ask(const msg::runs_query& r, int t) override {
    return way().template get<msg::runs_reply>(r, t);
  }
  std::optional<msg::resume_reply> ask(const msg::resume_run& r, int t) override {
    return way().template get<msg::resume_reply>(r, t);
  }
  std::optional<msg::cancel_reply> ask(const msg::cancel_run& r, int t) override {
    return way().template get<msg::cancel_reply>(r, t);
  }
  std::optional<msg::submit_jobs_reply> ask(const msg::submit_jobs& r, int t) override {
    return way().template get<msg::submit_jobs_reply>(r, t);
  }
  std::optional<msg::drain_reply> ask(const msg::drain_request& r, int t) override {
    return way().template get<msg::drain_reply>(r, t);
  }
  std::optional<msg::review_reply> ask(const msg::review_take& r, int t) override {
    return way().template get<msg::review_reply>(r, t);
  }

private:
  Way& way() { return static_cast<Way&>(*this); }
};

/// The bus way: requests to the coordinator's node from a client of its bus (one DEALER,
/// nodes/client.hpp), authenticated as the config says (docs/security.md).
std::shared_ptr<coordinator_calls> bus_calls(const config::cluster& c);

/// The CLI's exit code for an error reply's `code` (no_such_run, too_large, else refused).
int exit_code_of_reply(const std::string& code);

/// The coordinator of a cluster, as the command line and the HTTP API ask it.
class coordinator_client {
public:
  /// Over the bus to the coordinator's node (the command line).
  explicit coordinator_client(const config::cluster& c);
  /// Through `calls` (the HTTP API: in the coordinator's own process).
  coordinator_client(const config::cluster& c, std::shared_ptr<coordinator_calls> calls);

  /// Submits a run; the run id, or throws coordinator_error with the coordinator's reason
  /// (refused) or "no answer" (unreachable). Throws coordinator_error (usage) up front for
  /// a prompt that cannot fit a frame of max_frame_bytes.
  std::string submit(const msg::submit_run& req, int timeout_ms = 10000);

  /// A run's status JSON ("" = the latest run); nullopt when the coordinator does not answer
  /// within `timeout_ms`; throws coordinator_error with the coordinator's error otherwise
  /// (no_such_run, too_large, refused).
  /// The whole status, read in pages of `page_jobs()` jobs (each page is the coordinator's
  /// view at its own moment; a run of any size is read whole this way).
  std::optional<nlohmann::json> status(const std::string& run_id, int timeout_ms = 5000);

  /// One page: the jobs from index `offset`, at most `limit` (0 = all the rest), with the
  /// run's `page`, `states` and `summary`; same answers and errors as status().
  std::optional<nlohmann::json> status_page(const std::string& run_id, uint32_t offset,
                                            uint32_t limit, int timeout_ms = 5000);

  /// Jobs per page: as many as surely fit max_frame_bytes.
  uint32_t page_jobs() const;

  /// Asks the coordinator to finish a run's failed jobs; throws coordinator_error with the
  /// coordinator's reason (no_such_run, refused) or "no answer" (unreachable).
  msg::resume_reply resume(const std::string& run_id, int timeout_ms = 10000);

  /// The queue (nodes/verbs/queue_verbs.cpp): the runs' list JSON; cancel a run or one job; add
  /// jobs to an open run. Each throws coordinator_error as resume does.
  nlohmann::json runs(bool all, int timeout_ms = 5000);
  msg::cancel_reply cancel(const msg::cancel_run& req, int timeout_ms = 10000);
  msg::submit_jobs_reply submit_jobs(const msg::submit_jobs& req, int timeout_ms = 10000);
  /// `vidline drain` / `undrain` (nodes/verbs/gpu_verbs.cpp); throws as cancel does.
  msg::drain_reply drain(const msg::drain_request& req, int timeout_ms = 10000);
  /// A verdict on a take (docs/review.md). The reply's own error (no such job, a take that
  /// cannot be judged) is in the reply, not thrown; throws coordinator_error (unreachable)
  /// when there is no answer.
  msg::review_reply review(const msg::review_take& req, int timeout_ms = 10000);

  /// Uploads the reference image at `path` (contents of SHA-256 `sha256`) to the
  /// coordinator's node (nodes/inputs.hpp): "" when it holds it (`already`: it did
  /// before), else why not. `unreachable` is set when the node did not answer. Always over
  /// the bus: the file goes to the node's input store.
  std::string upload_input(const std::string& path, const std::string& sha256,
                           bool* already = nullptr, bool* unreachable = nullptr);

  const std::string& endpoint() const { return endpoint_; }

private:
  /// The reply to `req`; throws coordinator_error: unreachable without one, else the
  /// reply's own error when `throw_reply_error`.
  template <class Reply, class Request>
  Reply ask(const Request& req, int timeout_ms, bool throw_reply_error = true);

  std::string endpoint_;
  config::knobs knobs_;
  bus::client_security security_;
  std::shared_ptr<coordinator_calls> calls_;
};

} // namespace vidline::nodes::verbs
