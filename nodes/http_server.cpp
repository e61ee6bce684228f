#include "nodes/http_server_impl.hpp"

#include <algorithm>
#include <cstdlib>
#include <regex>

#include <spdlog/spdlog.h>

#include "common/data_paths.hpp"
#include "common/metrics.hpp"
#include "common/text.hpp"
#include "nodes/verbs/exit_codes.hpp"
#include "vidline/dashboard_files.hpp"

namespace vidline::nodes {

using nlohmann::json;

namespace {

/// Compares without stopping at the first difference (a token must not leak by timing).
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

const char* code_name(int status) {
  switch (status) {
  case 400:
    return "bad_request";
  case 401:
    return "unauthorized";
  case 403:
    return "forbidden";
  case 404:
    return "not_found";
  case 409:
    return "conflict";
  case 413:
    return "too_large";
  case 415:
    return "unsupported_media_type";
  case 422:
    return "refused";
  case 501:
    return "not_implemented";
  case 502:
    return "bad_gateway";
  case 503:
    return "unavailable";
  default:
    return status >= 500 ? "internal" : "error";
  }
}

/// The HTTP status a coordinator_error means.
int status_of(const verbs::coordinator_error& e) {
  switch (e.exit_code()) {
  case verbs::exit_code::no_such_run:
    return 404;
  case verbs::exit_code::unreachable:
    return 503;
  case verbs::exit_code::usage:
    return 400;
  case verbs::exit_code::too_large:
    return 500;
  default:
    return 422;
  }
}

bool is_dashboard_path(const std::string& p) {
  return p == "/" || p == "/dashboard" || p.rfind("/dashboard/", 0) == 0;
}

} // namespace

void http_server::impl::send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void http_server::impl::send_error(httplib::Response& res, int status, const std::string& message) {
  send_json(res, status, {{"error", text::to_valid_utf8(message)}, {"code", code_name(status)}});
}

std::vector<http_server::impl::route> http_server::impl::routes() {
  using namespace std::placeholders;
  const std::string run = "/v1/runs/([A-Za-z0-9._-]+)";
  return {
    {"GET", "/metrics", false, [this](auto& q, auto& s) { metrics(q, s); }},
    {"POST", "/v1/runs", true, [this](auto& q, auto& s) { submit(q, s); }},
    {"GET", "/v1/runs", true, [this](auto& q, auto& s) { list_runs(q, s); }},
    {"GET", run, true, [this](auto& q, auto& s) { run_status(q, s); }},
    {"POST", run + "/resume", true, [this](auto& q, auto& s) { resume(q, s); }},
    {"POST", run + "/cancel", true, [this](auto& q, auto& s) { cancel(q, s, false); }},
    {"POST", run + "/jobs", true, [this](auto& q, auto& s) { add_jobs(q, s); }},
    {"POST", run + "/jobs/([0-9]{1,9})/cancel", true, [this](auto& q, auto& s) { cancel(q, s, true); }},
    {"GET", run + "/gantt\\.svg", true, [this](auto& q, auto& s) { gantt(q, s); }},
    {"GET", run + "/events", true, [this](auto& q, auto& s) { events(q, s, false); }},
    {"GET", run + "/jobs/([0-9]{1,9})/video", false, [this](auto& q, auto& s) { video(q, s); }},
    {"GET", run + "/jobs/([0-9]{1,9})/thumbnail", false, [this](auto& q, auto& s) { thumbnail(q, s); }},
    {"POST", run + "/jobs/([0-9]{1,9})/review", true, [this](auto& q, auto& s) { review(q, s); }},
    {"PUT", "/v1/inputs/([^/]*)", true, [this](auto& q, auto& s) { put_input(q, s); }},
    {"GET", "/v1/cluster", true, [this](auto& q, auto& s) { cluster_status(q, s); }},
    {"GET", "/v1/gpus", true, [this](auto& q, auto& s) { gpus(q, s); }},
    {"GET", "/v1/events", true, [this](auto& q, auto& s) { events(q, s, true); }},
    {"GET", "/", true, [](auto&, auto& s) { s.set_redirect("/dashboard/"); }},
    {"GET", "/dashboard/?([A-Za-z0-9._-]*)", true, [this](auto& q, auto& s) { dashboard(q, s); }},
  };
}

void http_server::impl::install() {
  for (auto& r : routes()) {
    if (r.coordinator_only && !coordinator)
      continue;
    // Nothing a request does may take the node down: every handler answers, at worst 500.
    auto guarded = [fn = r.fn](const httplib::Request& q, httplib::Response& s) {
      try {
        fn(q, s);
      } catch (const verbs::coordinator_error& e) {
        send_error(s, status_of(e), e.what());
      } catch (const std::exception& e) {
        send_error(s, 500, std::string("internal error: ") + e.what());
      } catch (...) {
        send_error(s, 500, "internal error");
      }
    };
    if (r.method == "GET")
      svr.Get(r.pattern, guarded);
    else if (r.method == "PUT")
      svr.Put(r.pattern, guarded);
    else
      svr.Post(r.pattern, guarded);
  }
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& s, std::exception_ptr) {
    send_error(s, 500, "internal error");
  });
  svr.set_pre_routing_handler([this](const httplib::Request& q, httplib::Response& s) {
    // Browsers on another origin are not let in (no CORS): a request that says it comes
    // from a page of another origin is refused whatever it asks.
    if (q.has_header("Origin")) {
      const std::string origin = q.get_header_value("Origin");
      const std::string own = "http://" + q.get_header_value("Host");
      if (origin != own) {
        metrics::global().add("vidline_refused_connections_total", {{"channel", "http"}});
        send_error(s, 403, "requests from another origin (" + origin + ") are refused");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    // The dashboard's files hold no data: the page asks for the token and sends it itself.
    if (!token.empty() && !is_dashboard_path(q.path)) {
      const std::string auth = q.get_header_value("Authorization");
      const std::string prefix = "Bearer ";
      // A <video> or <img> element sends no header: a video's or a thumbnail's GET may
      // give the token as ?token=.
      static const std::regex video_path("/v1/runs/[A-Za-z0-9._-]+/jobs/[0-9]{1,9}/(video|thumbnail)");
      const bool video_token = q.method == "GET" && q.has_param("token") &&
                               std::regex_match(q.path, video_path) &&
                               same_secret(q.get_param_value("token"), token);
      if (!video_token &&
          (auth.rfind(prefix, 0) != 0 || !same_secret(auth.substr(prefix.size()), token))) {
        metrics::global().add("vidline_refused_connections_total", {{"channel", "http"}});
        s.set_header("WWW-Authenticate", "Bearer");
        send_error(s, 401, auth.empty() ? "an Authorization: Bearer token is required"
                                        : "the bearer token is wrong");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    // Routing comes before the body is read: its headers say whether there is one.
    const bool has_body = q.get_header_value("Content-Length").find_first_not_of("0") != std::string::npos ||
                          q.has_header("Transfer-Encoding");
    // The server reads bodies up to the larger input limit (PUT /v1/inputs); every other
    // request is held to http.max_request_bytes before its body is read.
    const std::string length = q.get_header_value("Content-Length");
    const bool input_put = q.method == "PUT" && q.path.rfind("/v1/inputs/", 0) == 0;
    if (!input_put && !length.empty() && length.size() < 20 &&
        std::strtoull(length.c_str(), nullptr, 10) > self->http.max_request_bytes) {
      send_error(s, 413, "the request is over the limit of this endpoint (http.max_request_bytes)");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (input_put && !length.empty() && length.size() < 20 &&
        std::strtoull(length.c_str(), nullptr, 10) > data::max_input_bytes) {
      send_error(s, 413, "the image is " + length + " bytes, over the limit of " +
                             std::to_string(data::max_input_bytes) + " bytes for an input");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (q.method == "POST" && has_body) {
      const std::string type = q.get_header_value("Content-Type");
      if (type.rfind("application/json", 0) != 0) {
        send_error(s, 415, "a request body must be JSON (Content-Type: application/json), got '" +
                               type + "'");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.set_error_handler([](const httplib::Request& q, httplib::Response& s) {
    // Unmatched paths (404), bodies over the limit (413) and the like: a JSON answer that
    // says so, unless a handler wrote one already.
    if (!s.body.empty() || s.status < 400)
      return;
    if (s.status == 404)
      send_error(s, 404, "no such path: " + q.method + " " + q.path + " (docs/openapi.json)");
    else if (s.status == 413)
      send_error(s, 413, "the request is over the limit of this endpoint (http.max_request_bytes)");
    else
      send_error(s, s.status, "the request could not be served");
  });
  svr.set_post_routing_handler([](const httplib::Request&, httplib::Response& s) {
    s.set_header("Cache-Control", "no-store");
    s.set_header("X-Content-Type-Options", "nosniff");
  });
  svr.set_logger([](const httplib::Request&, const httplib::Response& s) {
    metrics::global().add("vidline_http_requests_total", {{"code", std::to_string(s.status)}});
  });
}

// -- handlers --------------------------------------------------------------------------------

void http_server::impl::metrics(const httplib::Request&, httplib::Response& res) {
  res.set_content(metrics::global().render(), "text/plain; version=0.0.4; charset=utf-8");
}

std::optional<json> http_server::impl::status_of_run(const std::string& run_id,
                                                     httplib::Response& res) {
  auto cl = client();
  auto st = cl.status(run_id == "latest" ? "" : run_id, 5000);
  if (!st) {
    send_error(res, 503, "no answer from the coordinator " + calls->where() + " within 5 s");
    return std::nullopt;
  }
  return st;
}

void http_server::impl::dashboard(const httplib::Request& req, httplib::Response& res) {
  std::string name = req.matches[1];
  if (name.empty())
    name = "index.html";
  for (auto& f : dashboard_files::all)
    if (name == f.path) {
      res.set_content(f.body, f.type);
      res.set_header("Content-Security-Policy",
                     "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                     "script-src 'self'; connect-src 'self'");
      return;
    }
  send_error(res, 404, "no dashboard file " + name);
}

// -- lifetime --------------------------------------------------------------------------------

http_server::http_server(std::shared_ptr<const config::cluster> cluster, const std::string& host,
                         std::shared_ptr<verbs::coordinator_calls> calls)
    : p_(std::make_unique<impl>()) {
  p_->cluster = std::move(cluster);
  p_->calls = calls ? std::move(calls) : verbs::bus_calls(*p_->cluster);
  p_->self = p_->cluster->find_host(host);
  if (p_->self == nullptr || p_->self->http.port == 0)
    throw std::runtime_error("host " + host + " has no http endpoint");
  p_->coordinator = p_->cluster->coordinator == host;
  const auto& e = p_->self->http;
  if (!e.token_file.empty())
    p_->token = read_token_file(e.token_file);
  p_->inputs = std::make_unique<data::input_store>(data_paths::input_dir(p_->self->data_dir));
  // PUT /v1/inputs takes up to max_input_bytes; the pre-routing handler holds every other
  // request to max_request_bytes by its Content-Length.
  p_->svr.set_payload_max_length(
      std::max<uint64_t>(e.max_request_bytes, p_->coordinator ? data::max_input_bytes : 0));
  p_->svr.set_read_timeout(10);
  p_->svr.set_write_timeout(10);
  p_->svr.set_keep_alive_max_count(100);
  p_->svr.new_task_queue = [] { return new httplib::ThreadPool(impl::max_streams + 8); };
  p_->install();
  if (!p_->svr.bind_to_port(e.address, e.port))
    throw std::runtime_error("cannot bind http " + e.address + ":" + std::to_string(e.port) +
                             " (in use, or not an address of this machine)");
  p_->bound = "http://" + (e.address.find(':') != std::string::npos ? "[" + e.address + "]"
                                                                    : e.address) +
              ":" + std::to_string(e.port);
  p_->thread = std::thread([p = p_.get()] { p->svr.listen_after_bind(); });
  spdlog::info("http: serving {} ({}{})", p_->bound,
               p_->coordinator ? "/metrics, /v1, /dashboard/" : "/metrics, videos",
               p_->token.empty() ? "" : ", bearer token required");
}

http_server::~http_server() { stop(); }

void http_server::stop() {
  if (!p_ || !p_->thread.joinable())
    return;
  {
    std::lock_guard<std::mutex> l(p_->m);
    p_->stopping = true;
  }
  p_->cv.notify_all();
  p_->svr.stop();
  p_->thread.join();
}

std::string http_server::url() const { return p_->bound; }

} // namespace vidline::nodes
