#include "nodes/http_server_impl.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>

#include "actors/planner/gantt.hpp"
#include "nodes/verbs/exit_codes.hpp"
#include "nodes/http_events.hpp"
#include "nodes/verbs/line_text.hpp"

// The runs of the HTTP API (docs/http.md): submit, list, status, cancel, add jobs, resume,
// the Gantt chart, the cluster's status and cards, and the Server-Sent Events streams.

namespace vidline::nodes {

using nlohmann::json;

namespace {

std::string random_request_id() {
  std::random_device rd;
  char buf[48];
  std::snprintf(buf, sizeof(buf), "http-%08x%08x%08x", rd(), rd(), rd());
  return buf;
}

/// Why a reference given as a path (no digest) cannot be used, naming `what` (the shot), or
/// "": the path must be a file on the coordinator's host, which reads it (docs/http.md).
std::string reference_problem(const std::string& path, const std::string& digest,
                              const std::string& what, const std::string& host) {
  if (path.empty() || !digest.empty())
    return "";
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec))
    return "";
  return what + ": reference '" + path + "' is not a file on the coordinator's host (" + host +
         "); give a path that exists there, or upload the image (PUT /v1/inputs/{sha256}) and "
         "give its reference_sha256";
}

} // namespace

void http_server::impl::submit(const httplib::Request& req, httplib::Response& res) {
  api_error err;
  auto r = parse_submit(req.body, err);
  if (!r) {
    send_error(res, err.status, err.message);
    return;
  }
  std::string why = reference_problem(r->reference, r->reference_sha256, "field 'reference'",
                                      self->name);
  for (std::size_t i = 0; i < r->shots.size() && why.empty(); ++i) {
    const auto& sh = r->shots[i];
    why = reference_problem(sh.reference, sh.reference_sha256,
                            "shots[" + std::to_string(i) + "]" +
                              (sh.name.empty() ? std::string() : " ('" + sh.name + "')"),
                            self->name);
  }
  if (!why.empty()) {
    send_error(res, 400, why);
    return;
  }
  if (r->request_id.empty())
    r->request_id = random_request_id();
  auto cl = client();
  auto id = cl.submit(*r);
  res.set_header("Location", "/v1/runs/" + id);
  // Hosts down now: the run waits for them; the answer says so.
  json down = json::array();
  try {
    if (auto view = cl.status("@cluster", 2000))
      down = verbs::hosts_down(*view, *cluster);
  } catch (const std::exception&) {
  }
  send_json(res, 201, {{"run_id", id}, {"request_id", r->request_id}, {"hosts_down", down}});
}

void http_server::impl::list_runs(const httplib::Request& req, httplib::Response& res) {
  // `vidline runs [--all]`: the coordinator's list, as it sends it.
  bool all = false;
  for (auto& [key, value] : req.params) {
    if (key != "all") {
      send_error(res, 400, "unknown query parameter '" + key + "' (known: all)");
      return;
    }
    if (value != "true" && value != "false" && value != "1" && value != "0") {
      send_error(res, 400, "query parameter 'all' must be true or false, got '" + value + "'");
      return;
    }
    all = value == "true" || value == "1";
  }
  json runs = client().runs(all);
  if (!runs.is_array())
    throw std::runtime_error("the coordinator's list of runs is not a JSON array");
  const json latest = runs.empty() ? json(nullptr) : runs.back()["run_id"];
  send_json(res, 200, {{"runs", std::move(runs)}, {"latest", latest}});
}

void http_server::impl::cancel(const httplib::Request& req, httplib::Response& res, bool one_job) {
  api_error err;
  if (!parse_empty_body(req.body, "cancel", err)) {
    send_error(res, err.status, err.message);
    return;
  }
  msg::cancel_run c;
  c.run_id = req.matches[1];
  if (one_job) {
    c.one_job = true;
    c.index = static_cast<uint32_t>(std::stoul(std::string(req.matches[2])));
  }
  auto cl = client();
  auto r = cl.cancel(c);
  if (r.cancelled == 0) {
    // Nothing was left to stop: the run (or the job) had finished. Said as a conflict, so a
    // program learns its cancel changed nothing.
    std::string what = "run " + r.run_id + " is " + r.state;
    if (one_job) {
      std::string job_state = "finished";
      try {
        if (auto st = cl.status_page(c.run_id, c.index, 1, 2000); st && !(*st)["jobs"].empty())
          job_state = (*st)["jobs"][0].value("state", job_state);
      } catch (const verbs::coordinator_error&) {
      }
      what = "job " + std::to_string(c.index) + " of run " + r.run_id + " is " + job_state;
    }
    send_error(res, 409, what + ": nothing left to cancel");
    return;
  }
  send_json(res, 200, {{"run_id", r.run_id}, {"cancelled", r.cancelled},
                       {"in_flight", r.in_flight}, {"state", r.state}});
}

void http_server::impl::add_jobs(const httplib::Request& req, httplib::Response& res) {
  api_error err;
  auto r = parse_add_jobs(req.matches[1], req.body, err);
  if (!r) {
    send_error(res, err.status, err.message);
    return;
  }
  if (auto why = reference_problem(r->reference, r->reference_sha256, "field 'reference'",
                                   self->name);
      !why.empty()) {
    send_error(res, 400, why);
    return;
  }
  if (r->request_id.empty())
    r->request_id = random_request_id();
  auto a = client().submit_jobs(*r);
  send_json(res, 201, {{"run_id", a.run_id}, {"first_index", a.first_index},
                       {"count", a.count}, {"request_id", r->request_id}});
}

void http_server::impl::run_status(const httplib::Request& req, httplib::Response& res) {
  if (auto st = status_of_run(req.matches[1], res))
    send_json(res, 200, *st);
}

void http_server::impl::resume(const httplib::Request& req, httplib::Response& res) {
  api_error err;
  if (!parse_empty_body(req.body, "resume", err)) {
    send_error(res, err.status, err.message);
    return;
  }
  auto r = client().resume(req.matches[1]);
  send_json(res, 200, {{"run_id", r.run_id}, {"reopened", r.reopened}, {"state", r.state}});
}

void http_server::impl::gantt(const httplib::Request& req, httplib::Response& res) {
  auto st = status_of_run(req.matches[1], res);
  if (!st)
    return;
  std::string svg;
  try {
    svg = actors::planner::gantt_svg({verbs::run_gantt(*st)});
  } catch (const json::exception& e) {
    send_error(res, 502, std::string("the run's status has no stage times for a chart: ") + e.what());
    return;
  }
  res.set_content(svg, "image/svg+xml");
}

void http_server::impl::cluster_status(const httplib::Request&, httplib::Response& res) {
  if (auto st = status_of_run("@cluster", res))
    send_json(res, 200, *st);
}

// Every host's cards (`vidline gpus --json`), with the drains beside them.
void http_server::impl::gpus(const httplib::Request&, httplib::Response& res) {
  if (auto st = status_of_run("@cluster", res))
    send_json(res, 200, json{{"gpus", st->value("gpus", json::array())},
                             {"drains", st->value("drains", json::object())}});
}

void http_server::impl::events(const httplib::Request& req, httplib::Response& res,
                               bool follow_latest) {
  std::string run_id = follow_latest ? "" : std::string(req.matches[1]);
  if (!follow_latest) {
    // An unknown run is a 404 now, not an empty stream; "latest" is the run it is now.
    auto st = status_of_run(run_id, res);
    if (!st)
      return;
    run_id = (*st)["run_id"].get<std::string>();
  }
  if (streams.fetch_add(1) >= max_streams) {
    streams.fetch_sub(1);
    send_error(res, 503, "too many event streams open (" + std::to_string(max_streams) + ")");
    return;
  }
  struct stream {
    json last_run, last_cluster;
    std::vector<double> plan;
    uint64_t id = 0;
    bool ended = false;
    bool started = false;
    std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
  };
  auto s = std::make_shared<stream>();
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
    "text/event-stream",
    [this, s, run_id, follow_latest](size_t, httplib::DataSink& sink) {
      if (stopping) {
        sink.done();
        return true;
      }
      std::string out;
      if (!s->started) {
        s->started = true;
        out += "retry: 2000\n\n";
      }
      auto emit = [&](const events::event& e) { out += events::sse_text(e, ++s->id); };
      auto cl = client();
      try {
        if (follow_latest)
          if (auto c = cl.status("@cluster", 2000)) {
            auto view = [](json j) {
              for (auto& [name, d] : j["decoders"].items())
                d.erase("seq");
              return j;
            };
            if (view(*c) != view(s->last_cluster))
              emit({"cluster", *c});
            s->last_cluster = *c;
          }
        std::optional<json> st;
        try {
          st = cl.status(run_id, 2000);
        } catch (const verbs::coordinator_error& e) {
          if (e.exit_code() != verbs::exit_code::no_such_run || !follow_latest)
            throw;
        }
        if (st) {
          const bool fresh = s->last_run.is_null() || s->last_run["run_id"] != (*st)["run_id"];
          for (auto& e : events::run_events(s->last_run, *st)) {
            if (e.name == "end" && !follow_latest)
              s->ended = true;
            if (e.name == "run" && !s->plan.empty()) {
              // Against the plan: how many jobs it would have finished by now, and the ETA
              // at the pace kept so far (as `vidline wait` shows it).
              const double now_s = (*st).value("now_s", 0.0);
              const auto done = e.data.value("done", std::size_t{0});
              e.data["planned_done"] =
                std::upper_bound(s->plan.begin(), s->plan.end(), now_s) - s->plan.begin();
              if (done < s->plan.size()) {
                const double at = done == 0 ? 0 : s->plan[done - 1];
                double left = s->plan.back() - at;
                if (done > 0 && at > 0)
                  left *= std::max(1.0, now_s / at);
                e.data["eta_s"] = left;
              }
            }
            emit(e);
          }
          if (fresh) {
            s->plan = verbs::planned_finish_times(*cluster, *st);
            emit({"plan", {{"run_id", (*st)["run_id"]},
                           {"planned_finish_s", s->plan},
                           {"makespan_s", s->plan.empty() ? json(nullptr) : json(s->plan.back())}}});
            emit({"run", events::run_summary(*st)});
          }
          s->last_run = *st;
        }
      } catch (const verbs::coordinator_error& e) {
        emit({"error", {{"error", e.what()}}});
        if (!follow_latest)
          s->ended = true;
      }
      const auto now = std::chrono::steady_clock::now();
      if (out.empty() && now - s->last_write > std::chrono::seconds(10))
        out = ": keepalive\n\n";
      if (!out.empty()) {
        s->last_write = now;
        if (!sink.write(out.data(), out.size()))
          return false;
      }
      if (s->ended) {
        sink.done();
        return true;
      }
      pause(std::chrono::milliseconds(250));
      return true;
    },
    [this](bool) { streams.fetch_sub(1); });
}

} // namespace vidline::nodes
