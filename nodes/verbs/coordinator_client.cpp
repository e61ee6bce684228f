/// The coordinator's requests (coordinator_client.hpp): the client, and the bus way to
/// reach the coordinator.

#include "nodes/verbs/coordinator_client.hpp"

#include <algorithm>
#include <chrono>

#include "nodes/bus/bus.hpp"
#include "nodes/verbs/exit_codes.hpp"
#include "nodes/bus/keys.hpp"

namespace vidline::nodes::verbs {

using nlohmann::json;

namespace {

/// Room for the envelope around a request's body in one frame.
constexpr std::size_t request_frame_headroom = 4096;

std::string endpoint_of_coordinator(const config::cluster& c) {
  const auto* h = c.find_host(c.coordinator);
  if (h == nullptr)
    throw config::config_error("/coordinator", "names no host of the config");
  return "tcp://" + h->address + ":" + std::to_string(h->port);
}

/// Requests over the coordinator node's bus: one client (one DEALER socket), made at the
/// first request and kept, so a run's status read in pages uses one connection.
class bus_way final : public calls_through<bus_way> {
public:
  explicit bus_way(const config::cluster& c)
      : endpoint_(endpoint_of_coordinator(c)),
        knobs_(c.knobs),
        security_(bus::client_security_for(c, c.coordinator)) {}

  std::string where() const override { return "at " + endpoint_; }

  template <class Reply, class Request>
  std::optional<Reply> get(const Request& req, int timeout_ms) {
    if (!cl_)
      cl_ = std::make_unique<client>(endpoint_, knobs_, security_);
    auto reply = cl_->request("coordinator", req, timeout_ms);
    if (!reply)
      return std::nullopt;
    Reply r;
    if (reply->env.type != Reply::wire_name
        || !msg::unpack_body_as(reply->body, bus::wire_limits(knobs_), r))
      throw coordinator_error(exit_code::refused,
                              std::string("the coordinator answered something else than a ")
                                + Reply::wire_name);
    return r;
  }

private:
  std::string endpoint_;
  config::knobs knobs_;
  bus::client_security security_;
  std::unique_ptr<client> cl_;
};

} // namespace

std::shared_ptr<coordinator_calls> bus_calls(const config::cluster& c) {
  return std::make_shared<bus_way>(c);
}

int exit_code_of_reply(const std::string& code) {
  if (code == msg::reply_code::no_such_run)
    return exit_code::no_such_run;
  if (code == msg::reply_code::too_large)
    return exit_code::too_large;
  return exit_code::refused;
}

coordinator_client::coordinator_client(const config::cluster& c)
    : coordinator_client(c, bus_calls(c)) {}

coordinator_client::coordinator_client(const config::cluster& c,
                                       std::shared_ptr<coordinator_calls> calls)
    : endpoint_(endpoint_of_coordinator(c)),
      knobs_(c.knobs),
      security_(bus::client_security_for(c, c.coordinator)),
      calls_(std::move(calls)) {}

template <class Reply, class Request>
Reply coordinator_client::ask(const Request& req, int timeout_ms, bool throw_reply_error) {
  auto r = calls_->ask(req, timeout_ms);
  if (!r)
    throw coordinator_error(exit_code::unreachable,
                            "no answer from the coordinator " + calls_->where() + " within "
                              + std::to_string((timeout_ms + 999) / 1000) + " s");
  if constexpr (std::is_same_v<Reply, msg::submit_reply>) {
    if (throw_reply_error && !r->error.empty())
      throw coordinator_error(exit_code::refused, "run refused: " + r->error);
  } else {
    if (throw_reply_error && !r->error.empty())
      throw coordinator_error(exit_code_of_reply(r->code), r->error);
  }
  return std::move(*r);
}

std::string coordinator_client::upload_input(const std::string& path, const std::string& sha,
                                             bool* already, bool* unreachable) {
  client cl(endpoint_, knobs_, security_);
  auto why = nodes::verbs::upload_input(cl, knobs_, path, sha, already);
  if (unreachable)
    *unreachable = why.rfind("the coordinator's node did not answer", 0) == 0;
  return why;
}

std::string coordinator_client::submit(const msg::submit_run& req, int timeout_ms) {
  // A frame over max_frame_bytes is dropped by the node's socket: the client would only
  // time out. Refuse it here, naming the limits (the same limits whichever way it goes).
  if (req.prompt.size() > knobs_.max_prompt_bytes)
    throw coordinator_error(exit_code::usage,
                            "the prompt is " + std::to_string(req.prompt.size())
                              + " bytes, over knobs.max_prompt_bytes ("
                              + std::to_string(knobs_.max_prompt_bytes) + ")");
  const auto body = msg::pack_body(req);
  if (body.size() + request_frame_headroom > knobs_.max_frame_bytes)
    throw coordinator_error(exit_code::usage,
                            "the request is " + std::to_string(body.size())
                              + " bytes, over knobs.max_frame_bytes ("
                              + std::to_string(knobs_.max_frame_bytes) + ") less 4096");
  // The request id makes a retried submit return the run the first one made: retried while
  // there is no answer.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline)
    if (auto r = calls_->ask(req, 2000)) {
      if (!r->error.empty())
        throw coordinator_error(exit_code::refused, "run refused: " + r->error);
      return r->run_id;
    }
  throw coordinator_error(exit_code::unreachable,
                          "no answer from the coordinator " + calls_->where() + " within "
                            + std::to_string((timeout_ms + 999) / 1000) + " s");
}

msg::resume_reply coordinator_client::resume(const std::string& run_id, int timeout_ms) {
  return ask<msg::resume_reply>(msg::resume_run{run_id}, timeout_ms);
}

uint32_t coordinator_client::page_jobs() const {
  // A job's record is ~1.3 KB, more with failed attempts (up to 8 kept): 4 KiB each is safe.
  const std::size_t room = knobs_.max_frame_bytes > (64u << 10) ? knobs_.max_frame_bytes - (64u << 10) : 0;
  return static_cast<uint32_t>(std::max<std::size_t>(16, room / 4096));
}

std::optional<json> coordinator_client::status(const std::string& run_id, int timeout_ms) {
  if (run_id == "@cluster")
    return status_page(run_id, 0, 0, timeout_ms);
  uint32_t limit = page_jobs();
  // A page answered too_large (records larger than assumed) is asked again, halved.
  auto fetch = [&](const std::string& id, uint32_t offset) -> std::optional<json> {
    for (;;) {
      try {
        return status_page(id, offset, limit, timeout_ms);
      } catch (const coordinator_error& e) {
        if (e.exit_code() != exit_code::too_large || limit == 1)
          throw;
        limit = std::max<uint32_t>(1, limit / 2);
      }
    }
  };
  auto st = fetch(run_id, 0);
  if (!st || !st->contains("page"))
    return st;  // unreachable, or a coordinator that answers whole
  // The run by its id from here on: "" (the latest) could change between pages.
  const std::string id = (*st)["run_id"].get<std::string>();
  const std::size_t total = (*st)["page"]["jobs_total"].get<std::size_t>();
  auto& jobs = (*st)["jobs"];
  while (jobs.size() < total) {
    auto more = fetch(id, static_cast<uint32_t>(jobs.size()));
    if (!more)
      return std::nullopt;  // the coordinator went away mid-read
    if ((*more)["jobs"].empty())
      break;  // runs do not shrink; never loop on an empty page
    for (auto& j : (*more)["jobs"])
      jobs.push_back(std::move(j));
    // The run-wide fields of the newest page are the freshest.
    for (const char* k : {"state", "now_s", "states", "summary", "outages"})
      if (more->contains(k))
        (*st)[k] = (*more)[k];
  }
  (*st)["page"] = {{"offset", 0}, {"jobs", jobs.size()}, {"jobs_total", total}};
  return st;
}

std::optional<json> coordinator_client::status_page(const std::string& run_id, uint32_t offset,
                                                    uint32_t limit, int timeout_ms) {
  msg::status_query q;
  q.run_id = run_id;
  q.offset = offset;
  q.limit = limit;
  auto r = calls_->ask(q, timeout_ms);
  if (!r)
    return std::nullopt;
  if (!r->error.empty())
    throw coordinator_error(exit_code_of_reply(r->code), r->error);
  return json::parse(r->json);
}

json coordinator_client::runs(bool all, int timeout_ms) {
  return json::parse(ask<msg::runs_reply>(msg::runs_query{all}, timeout_ms).json);
}

msg::cancel_reply coordinator_client::cancel(const msg::cancel_run& req, int timeout_ms) {
  return ask<msg::cancel_reply>(req, timeout_ms);
}

msg::submit_jobs_reply coordinator_client::submit_jobs(const msg::submit_jobs& req,
                                                       int timeout_ms) {
  if (req.prompt.size() > knobs_.max_prompt_bytes)
    throw coordinator_error(exit_code::usage,
                            "the prompt is " + std::to_string(req.prompt.size())
                              + " bytes, over knobs.max_prompt_bytes ("
                              + std::to_string(knobs_.max_prompt_bytes) + ")");
  // The request id makes a retry add nothing twice: retried while there is no answer.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    try {
      return ask<msg::submit_jobs_reply>(req, 2000);
    } catch (const coordinator_error& e) {
      if (e.exit_code() != exit_code::unreachable || std::chrono::steady_clock::now() >= deadline)
        throw;
    }
  }
}

msg::drain_reply coordinator_client::drain(const msg::drain_request& req, int timeout_ms) {
  return ask<msg::drain_reply>(req, timeout_ms);
}

msg::review_reply coordinator_client::review(const msg::review_take& req, int timeout_ms) {
  return ask<msg::review_reply>(req, timeout_ms, false);
}

} // namespace vidline::nodes::verbs
