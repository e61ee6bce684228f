// The HTTP endpoint against two real nodes (sim backend, loopback) through a real HTTP
// client (cpp-httplib's): a run submitted and followed through the API, bad requests
// answered 4xx naming what is wrong, the server held to docs/openapi.json, /metrics in the
// Prometheus format with the decoder's pending maximum at 1; and the dashboard in headless
// Chromium watching a run finish, its screenshot saved.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <set>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <httplib.h>

#include "common/sha256.hpp"
#include "tests/support/cluster.hpp"

using namespace testing_support;

namespace {

const char* token = "test-token-0123456789";

struct line {
  temp_dir dir;
  std::string config;
  int http_a = 0, http_b = 0;
  std::unique_ptr<process> a, b;

  explicit line(double time_scale) {
    config = write_reference_config(dir.path(), time_scale);
    auto cfg = json::parse(read_file(config));
    auto ports = free_ports(2);
    http_a = ports[0];
    http_b = ports[1];
    std::ofstream(dir.path() + "/token") << token << "\n";
    cfg["hosts"][0]["http"] = {{"port", http_a}, {"token_file", dir.path() + "/token"},
                               {"max_request_bytes", 4096}};
    cfg["hosts"][1]["http"] = {{"port", http_b}, {"token_file", dir.path() + "/token"}};
    std::ofstream(config) << cfg.dump(2);
    a = start_node(dir.path(), config, "host_a");
    b = start_node(dir.path(), config, "host_b");
  }
};

httplib::Headers auth() { return {{"Authorization", std::string("Bearer ") + token}}; }

/// Waits until the coordinator's view has every pool and decoder alive.
bool cluster_ready(httplib::Client& c, double seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto r = c.Get("/v1/cluster", auth()); r && r->status == 200) {
      auto j = json::parse(r->body);
      bool all = !j["pools"].empty();
      for (auto& [n, p] : j["pools"].items())
        all = all && p["alive"].get<bool>();
      for (auto& [n, d] : j["decoders"].items())
        all = all && d["alive"].get<bool>();
      if (all)
        return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling pace
  }
  return false;
}

json submit_body(uint32_t count, uint64_t seed) {
  return {{"mode", "four_four_xtx_plus_one"}, {"prompt", "over http"}, {"width", 416},
          {"height", 736}, {"seconds", 5}, {"count", count}, {"seed", seed}};
}

/// The error JSON of a 4xx answer; checks it names `what`.
void expect_error(const httplib::Result& r, int status, const std::string& what) {
  REQUIRE(r);
  INFO(r->body);
  CHECK(r->status == status);
  auto j = json::parse(r->body, nullptr, false);
  REQUIRE(j.is_object());
  CHECK(j["error"].get<std::string>().find(what) != std::string::npos);
}

/// Samples of a Prometheus text exposition: "name{labels}" -> value. Fails on a line that
/// is not a comment or a sample.
std::map<std::string, double> parse_metrics(const std::string& text) {
  std::map<std::string, double> out;
  const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})?) (\S+)$)");
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l.empty() || l.rfind("# HELP ", 0) == 0 || l.rfind("# TYPE ", 0) == 0)
      continue;
    std::smatch m;
    INFO(l);
    REQUIRE(std::regex_match(l, m, sample));
    out[m[1]] = std::stod(m[3]);
  }
  return out;
}

/// Reads an event stream until it ends (or `stop_at` appears); its text.
std::string read_events(httplib::Client& c, const std::string& path, const std::string& stop_at = "") {
  std::string got;
  c.Get(path.c_str(), auth(), [&](const char* data, size_t n) {
    got.append(data, n);
    return stop_at.empty() || got.find(stop_at) == std::string::npos;
  });
  return got;
}

bool pool_busy(vidline::nodes::verbs::coordinator_client& cl, const std::string& pool) {
  auto c = cl.status("@cluster", 1000);
  return !c || (*c)["pools"][pool]["busy"].get<bool>();
}

const json& resolve(const json& doc, const json& schema) {
  if (schema.contains("$ref")) {
    auto ref = schema["$ref"].get<std::string>();  // "#/components/schemas/X"
    return doc["components"]["schemas"][ref.substr(ref.rfind('/') + 1)];
  }
  return schema;
}

} // namespace

TEST_CASE("http: a run submitted and followed through the API, bad requests 4xx, metrics, the OpenAPI document holds") {
  line l(0.02);
  httplib::Client c("127.0.0.1", l.http_a);
  c.set_read_timeout(60);
  REQUIRE(cluster_ready(c, 60));

  // Access: the token, and nothing from another origin.
  expect_error(c.Get("/v1/cluster"), 401, "Bearer");
  expect_error(c.Get("/v1/cluster", {{"Authorization", "Bearer wrong"}}), 401, "wrong");
  auto cross = auth();
  cross.emplace("Origin", "http://evil.example");
  expect_error(c.Get("/v1/cluster", cross), 403, "another origin");

  // Bad submits, each named.
  expect_error(c.Post("/v1/runs", auth(), "{not json", "application/json"), 400, "not JSON");
  auto body = submit_body(1, 1);
  body["colour"] = "red";
  expect_error(c.Post("/v1/runs", auth(), body.dump(), "application/json"), 400, "unknown field 'colour'");
  body = submit_body(1, 1);
  body["width"] = "wide";
  expect_error(c.Post("/v1/runs", auth(), body.dump(), "application/json"), 400, "'width'");
  body = submit_body(1, 1);
  body.erase("seed");
  expect_error(c.Post("/v1/runs", auth(), body.dump(), "application/json"), 400, "missing field 'seed'");
  body = submit_body(1, 1);
  body["mode"] = "no_such_mode";
  expect_error(c.Post("/v1/runs", auth(), body.dump(), "application/json"), 422, "unknown mode");
  body = submit_body(1, 1);
  body["prompt"] = std::string(5000, 'x');  // over max_request_bytes (4096)
  expect_error(c.Post("/v1/runs", auth(), body.dump(), "application/json"), 413, "limit");
  expect_error(c.Post("/v1/runs", auth(), submit_body(1, 1).dump(), "text/plain"), 415, "JSON");
  expect_error(c.Get("/v1/runs/no-such-run", auth()), 404, "no run no-such-run");
  expect_error(c.Get("/v1/runs/no-such-run/events", auth()), 404, "no run");
  expect_error(c.Post("/v1/runs/no-such-run/resume", auth(), "", "application/json"), 404, "no run");

  // A run: submitted, followed on its event stream to its end.
  auto sub = c.Post("/v1/runs", auth(), submit_body(6, 100).dump(), "application/json");
  REQUIRE(sub);
  INFO(sub->body);
  REQUIRE(sub->status == 201);
  const auto run_id = json::parse(sub->body)["run_id"].get<std::string>();
  const auto stream = read_events(c, "/v1/runs/" + run_id + "/events");
  INFO(stream.substr(0, 4000));
  CHECK(stream.find("event: snapshot\n") != std::string::npos);
  CHECK(stream.find("event: plan\n") != std::string::npos);
  CHECK(stream.find("event: job\n") != std::string::npos);
  REQUIRE(stream.find("event: end\n") != std::string::npos);
  CHECK(stream.find("\"state\":\"succeeded\"") != std::string::npos);

  // Its status: the CLI's JSON, every job made by the sim contract.
  auto st = c.Get(("/v1/runs/" + run_id).c_str(), auth());
  REQUIRE(st);
  REQUIRE(st->status == 200);
  auto status = json::parse(st->body);
  REQUIRE(status["state"] == "succeeded");
  vidline::nodes::verbs::coordinator_client cl(vidline::config::load(l.config));
  auto cli = cl.status(run_id);
  REQUIRE(cli);
  CHECK((*cli)["jobs"] == status["jobs"]);
  for (auto& j : status["jobs"])
    CHECK(contract_problem(j) == "");

  // The Gantt chart and one job's video: on the decoder's host, pulled here over the bus
  // (no redirect: the token stays with the request), a range of it answered 206.
  auto svg = c.Get(("/v1/runs/" + run_id + "/gantt.svg").c_str(), auth());
  REQUIRE(svg);
  CHECK(svg->status == 200);
  CHECK(svg->body.find("<svg") != std::string::npos);
  auto video = c.Get(("/v1/runs/" + run_id + "/jobs/2/video").c_str(), auth());
  REQUIRE(video);
  CHECK(video->status == 200);
  const auto made = read_file(status["jobs"][2]["output"].get<std::string>());
  CHECK(video->body == made);
  auto headers = auth();
  headers.emplace("Range", "bytes=10-19");
  auto part = c.Get(("/v1/runs/" + run_id + "/jobs/2/video").c_str(), headers);
  REQUIRE(part);
  CHECK(part->status == 206);
  CHECK(part->body == made.substr(10, 10));
  auto by_query = c.Get(("/v1/runs/" + run_id + "/jobs/2/video?token=" + token).c_str());
  REQUIRE(by_query);
  CHECK(by_query->status == 200);
  expect_error(c.Get(("/v1/runs/" + run_id + "?token=" + token).c_str()), 401, "Bearer");
  expect_error(c.Get(("/v1/runs/" + run_id + "/jobs/99/video").c_str(), auth()), 404, "no job 99");
  auto resumed = c.Post(("/v1/runs/" + run_id + "/resume").c_str(), auth(), "", "application/json");
  REQUIRE(resumed);
  CHECK(resumed->status == 200);
  CHECK(json::parse(resumed->body)["reopened"] == 0);

  // The review: a reject asking for another take adds the shot's next take to the finished
  // run (opened again); asked again it adds none; a bad verdict or job is refused.
  const auto jobs_before = status["jobs"].size();
  const std::string review_path = "/v1/runs/" + run_id + "/jobs/2/review";
  auto rejected = c.Post(review_path.c_str(), auth(), R"({"verdict":"reject","another_take":true})",
                         "application/json");
  REQUIRE(rejected);
  INFO(rejected->body);
  REQUIRE(rejected->status == 200);
  auto rv = json::parse(rejected->body);
  CHECK(rv["verdict"] == "rejected");
  CHECK(rv["take"]["index"] == jobs_before);
  CHECK(rv["state"] == "running");
  auto again = c.Post(review_path.c_str(), auth(), R"({"verdict":"reject","another_take":true})",
                      "application/json");
  REQUIRE(again);
  CHECK(json::parse(again->body)["take"] == rv["take"]);
  expect_error(c.Post(review_path.c_str(), auth(), R"({"verdict":"maybe"})", "application/json"),
               400, "verdict");
  expect_error(c.Post(("/v1/runs/" + run_id + "/jobs/99/review").c_str(), auth(),
                      R"({"verdict":"accept"})", "application/json"),
               404, "no job 99");
  auto reviewed = json::parse(c.Get(("/v1/runs/" + run_id).c_str(), auth())->body);
  REQUIRE(reviewed["jobs"].size() == jobs_before + 1);
  CHECK(reviewed["jobs"][2]["review"]["verdict"] == "rejected");
  CHECK(reviewed["jobs"][2]["review"]["take_index"] == jobs_before);
  CHECK(reviewed["jobs"][jobs_before]["retake_of"] == 2);
  CHECK(reviewed["jobs"][jobs_before]["seed"] == rv["take"]["seed"]);

  // /metrics on both nodes: the format parses; the decoder's queue peaked at 1.
  httplib::Client cb("127.0.0.1", l.http_b);
  auto mb = cb.Get("/metrics", auth());
  REQUIRE(mb);
  REQUIRE(mb->status == 200);
  CHECK(mb->get_header_value("Content-Type").find("version=0.0.4") != std::string::npos);
  auto b = parse_metrics(mb->body);
  CHECK(b["vidline_decoder_pending_max{decoder=\"rtx3080ti\"}"] == 1);
  CHECK(b["vidline_handoff_bytes_total{decoder=\"rtx3080ti\"}"] > 0);
  CHECK(b.count("vidline_stage_duration_seconds_count{lane=\"rtx3080ti\",stage=\"decode\"}") == 1);
  auto ma = c.Get("/metrics", auth());
  REQUIRE(ma);
  auto a = parse_metrics(ma->body);
  CHECK(a["vidline_jobs{state=\"succeeded\"}"] >= 6);
  CHECK(a["vidline_refused_connections_total{channel=\"http\"}"] >= 3);
  CHECK(a.count("vidline_pool_busy_seconds_total{pool=\"four_a\"}") == 1);
  CHECK(a.count("vidline_data_dir_free_bytes{dir=\"" + l.dir.path() + "/host_a\"}") == 1);

  // The server answers every documented path and method as documented; others are 404.
  // The queue's requests go to open runs: jobs are added to `open` and its last job is
  // cancelled; `doomed` is cancelled whole (the finished run has nothing left to cancel).
  auto open_sub = c.Post("/v1/runs", auth(), submit_body(30, 600).dump(), "application/json");
  auto doomed_sub = c.Post("/v1/runs", auth(), submit_body(30, 700).dump(), "application/json");
  REQUIRE(open_sub);
  REQUIRE(doomed_sub);
  REQUIRE(open_sub->status == 201);
  REQUIRE(doomed_sub->status == 201);
  const auto open_run = json::parse(open_sub->body)["run_id"].get<std::string>();
  const auto doomed_run = json::parse(doomed_sub->body)["run_id"].get<std::string>();
  const json add_body = {{"prompt", "added over http"}, {"width", 416}, {"height", 736},
                         {"seconds", 5}, {"count", 1}, {"seed", 800}};
  std::set<std::string> sent;
  auto doc = json::parse(read_file(std::string(VIDLINE_SOURCE_DIR) + "/docs/openapi.json"));
  for (auto& [path, item] : doc["paths"].items())
    for (auto& [method, op] : item.items()) {
      if (method == "parameters")
        continue;
      const bool job_cancel = path == "/v1/runs/{run_id}/jobs/{index}/cancel";
      const std::string run = path == "/v1/runs/{run_id}/cancel" ? doomed_run
                              : job_cancel || path == "/v1/runs/{run_id}/jobs" ? open_run
                                                                                : run_id;
      std::string p = std::regex_replace(path, std::regex("\\{run_id\\}"), run);
      p = std::regex_replace(p, std::regex("\\{index\\}"), job_cancel ? "29" : "0");
      const std::string image = "an image over http";
      p = std::regex_replace(p, std::regex("\\{sha256\\}"), vidline::to_hex(vidline::sha256_of(image)));
      sent.insert(method + " " + path);
      INFO(method << " " << p);
      auto send = [&]() -> httplib::Result {
        if (method == "put")
          return c.Put(p.c_str(), auth(), image, "application/octet-stream");
        if (method == "post")
          return c.Post(p.c_str(), auth(),
                   path == "/v1/runs" ? submit_body(1, 500).dump()
                   : path == "/v1/runs/{run_id}/jobs" ? add_body.dump()
                   : path == "/v1/runs/{run_id}/jobs/{index}/review" ? R"({"verdict":"accept"})"
                                                                     : std::string("{}"),
                   "application/json");
        return c.Get(p.c_str(), auth());
      };
      if (p.size() > 7 && p.compare(p.size() - 7, 7, "/events") == 0) {
        std::string got;
        int code = 0;
        c.Get(p.c_str(), auth(), [&](const httplib::Response& res) {
          code = res.status;
          return true;
        }, [&](const char* d, size_t n) {
          got.append(d, n);
          return got.find("event: snapshot") == std::string::npos;
        });
        CHECK(code == 200);
        CHECK(op["responses"].contains("200"));
        continue;
      }
      auto r = send();
      REQUIRE(r);
      INFO(r->body.substr(0, 500));
      const auto code = std::to_string(r->status);
      REQUIRE(op["responses"].contains(code));
      CHECK(r->status < 400);
      auto& resp = op["responses"][code];
      if (resp.contains("content") && resp["content"].contains("application/json")) {
        const auto& schema = resolve(doc, resp["content"]["application/json"]["schema"]);
        auto j = json::parse(r->body);
        for (auto& field : schema.value("required", json::array())) {
          INFO("required field " << field);
          CHECK(j.contains(field.get<std::string>()));
        }
        // And the required fields of each element of an array of records (the runs' list).
        const json props = schema.value("properties", json::object());
        for (auto& [name, prop] : props.items()) {
          if (prop.value("type", "") != "array" || !prop.contains("items") || !j[name].is_array())
            continue;
          const auto& items = resolve(doc, prop["items"]);
          for (auto& e : j[name])
            for (auto& field : items.value("required", json::array())) {
              INFO(name << "[] required field " << field << ": " << e.dump());
              CHECK(e.contains(field.get<std::string>()));
            }
        }
      }
    }
  // The queue's requests are documented (and so were sent above).
  for (auto* q : {"put /v1/inputs/{sha256}", "get /v1/runs", "post /v1/runs/{run_id}/cancel", "post /v1/runs/{run_id}/jobs",
                  "post /v1/runs/{run_id}/jobs/{index}/cancel", "post /v1/runs/{run_id}/resume"}) {
    INFO(q);
    CHECK(sent.count(q) == 1);
  }
  for (auto* p : {"/v1", "/v2/runs", "/v1/runs/" "x/nothing", "/v1/metrics", "/secret"}) {
    INFO(p);
    expect_error(c.Get(p, auth()), 404, "no such path");
  }
}

TEST_CASE("http: an input uploaded with PUT is named by digest in a shot, pulled by the sampling host") {
  line l(0.005);
  httplib::Client c("127.0.0.1", l.http_a);
  c.set_read_timeout(30);
  REQUIRE(cluster_ready(c, 60));
  auto cluster = vidline::config::load(l.config);
  vidline::nodes::verbs::coordinator_client cl(cluster);
  // Larger than host_a's http.max_request_bytes (4096): inputs have their own limit.
  std::string image(10000, '\0');
  for (std::size_t i = 0; i < image.size(); ++i)
    image[i] = static_cast<char>(i * 7919 % 251);
  const std::string sha = vidline::to_hex(vidline::sha256_of(image));
  const std::string path = "/v1/inputs/" + sha;

  // Bad uploads: 400 naming what is wrong, 413 over the limit; nothing kept.
  expect_error(c.Put(path.c_str(), auth(), image.substr(1), "application/octet-stream"), 400,
               "hashes to");
  expect_error(c.Put("/v1/inputs/NOT-A-DIGEST", auth(), image, "application/octet-stream"), 400,
               "64 lowercase hex");
  expect_error(c.Put(path.c_str(), auth(), "", "application/octet-stream"), 400, "empty");
  {
    // Over 64 MiB: refused by its Content-Length before the body is read (so the answer
    // comes while a client would still be sending: read it off a raw socket).
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(l.http_a));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const std::string head = "PUT /v1/inputs/" + sha + " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             "Authorization: Bearer " + std::string(token) + "\r\n"
                             "Content-Type: application/octet-stream\r\n"
                             "Content-Length: " + std::to_string((64u << 20) + 1) + "\r\n\r\n";
    REQUIRE(::send(fd, head.data(), head.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(head.size()));
    std::string answer;
    char buf[4096];
    for (ssize_t n; answer.find("}") == std::string::npos &&
                    (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
      answer.append(buf, static_cast<std::size_t>(n));
    ::close(fd);
    INFO(answer);
    CHECK(answer.rfind("HTTP/1.1 413", 0) == 0);
    CHECK(answer.find("over the limit of 67108864 bytes for an input") != std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists(l.dir.path() + "/host_a/inputs/" + sha));
  // A shot naming an input the coordinator does not hold: refused, naming the shot and field.
  const json shot = {{"prompt", "a shot by digest"}, {"width", 736}, {"height", 1280},
                     {"seconds", 10}, {"seed", 5}, {"reference_sha256", sha}};
  const json body = {{"mode", "four_four_xtx_plus_one"}, {"shots", json::array({shot})}};
  expect_error(c.Post("/v1/runs", auth(), body.dump(), "application/json"), 422,
               "shot 1: reference_sha256 " + sha + " names no input the coordinator holds");
  json bad_shot = shot;
  bad_shot["reference_sha256"] = "abc";
  expect_error(c.Post("/v1/runs", auth(), json{{"mode", "four_four_xtx_plus_one"},
                                                {"shots", json::array({bad_shot})}}.dump(),
                      "application/json"),
               400, "shots[0].reference_sha256");

  auto up = c.Put(path.c_str(), auth(), image, "application/octet-stream");
  REQUIRE(up);
  INFO(up->body);
  CHECK(up->status == 201);
  CHECK(json::parse(up->body)["stored"] == "now");
  auto again = c.Put(path.c_str(), auth(), image, "application/octet-stream");
  REQUIRE(again);
  CHECK(again->status == 200);
  CHECK(json::parse(again->body)["stored"] == "before");
  CHECK(vidline::sha256_file_hex(l.dir.path() + "/host_a/inputs/" + sha) == sha);

  // Now the shot runs: 736x1280x10 fits only xtx, on host_b, which pulls the input.
  auto sub = c.Post("/v1/runs", auth(), body.dump(), "application/json");
  REQUIRE(sub);
  INFO(sub->body);
  REQUIRE(sub->status == 201);
  const auto run_id = json::parse(sub->body)["run_id"].get<std::string>();
  auto st = wait_status(cl, run_id, 120, [](const json& s) { return s["state"] != "running"; });
  INFO(st.dump());
  REQUIRE(st["state"] == "succeeded");
  CHECK(st["jobs"][0]["pool"] == "xtx");
  CHECK(st["jobs"][0]["reference_sha256"] == sha);
  const std::string copy = l.dir.path() + "/host_b/inputs/" + sha;
  CHECK(vidline::sha256_file_hex(copy) == sha);

  // The sampling host's copy damaged at rest: found before use, removed, pulled again.
  std::ofstream(copy, std::ios::trunc) << "not the image";
  json again_body = body;
  again_body["shots"][0]["seed"] = 6;
  auto sub2 = c.Post("/v1/runs", auth(), again_body.dump(), "application/json");
  REQUIRE(sub2);
  REQUIRE(sub2->status == 201);
  const auto run2 = json::parse(sub2->body)["run_id"].get<std::string>();
  auto st2 = wait_status(cl, run2, 120, [](const json& s) { return s["state"] != "running"; });
  INFO(st2.dump());
  CHECK(st2["state"] == "succeeded");
  CHECK(vidline::sha256_file_hex(copy) == sha);
  CHECK(read_file(l.dir.path() + "/host_b/logs/node.log").find("removed, pulled again from host_a") !=
        std::string::npos);
}

TEST_CASE("http: the queue through the API: runs listed, jobs added to an open run, cancel frees the pool") {
  // A slow clock (1 simulated s = 50 ms): a sampling job runs for seconds.
  line l(0.05);
  httplib::Client c("127.0.0.1", l.http_a);
  c.set_read_timeout(30);
  REQUIRE(cluster_ready(c, 60));
  auto cluster = vidline::config::load(l.config);
  const double interval_s = cluster.knobs.status_interval_ms / 1000.0;
  vidline::nodes::verbs::coordinator_client cl(cluster);
  auto post = [&](const std::string& path, const json& body) {
    return c.Post(path.c_str(), auth(), body.dump(), "application/json");
  };
  auto get_json = [&](const std::string& path) {
    auto r = c.Get(path.c_str(), auth());
    REQUIRE(r);
    INFO(path << ": " << r->body);
    REQUIRE(r->status == 200);
    return json::parse(r->body);
  };
  auto listed = [&](const std::string& id, const std::string& query = "") {
    auto list = get_json("/v1/runs" + query);
    for (auto& r : list["runs"])
      if (r["run_id"] == id)
        return r;
    FAIL("run " << id << " is not in the list: " << list.dump());
    return json();
  };

  // Priority in the submit body: out of range is named.
  auto body = submit_body(1, 1);
  body["priority"] = 1000001;
  expect_error(post("/v1/runs", body), 400, "'priority' must be from -1000000 to 1000000");
  body["priority"] = "high";
  expect_error(post("/v1/runs", body), 400, "'priority'");
  expect_error(c.Get("/v1/runs?all=maybe", auth()), 400, "'all'");
  expect_error(c.Get("/v1/runs?colour=red", auth()), 400, "unknown query parameter 'colour'");

  // A 3-job run: one job on each pool, xtx sampling job 2.
  body = submit_body(3, 1000);
  body["priority"] = 3;
  auto sub = post("/v1/runs", body);
  REQUIRE(sub);
  REQUIRE(sub->status == 201);
  const auto run_id = json::parse(sub->body)["run_id"].get<std::string>();
  const std::string run = "/v1/runs/" + run_id;
  // Its event stream, followed to its end (a cancelled run ends it too).
  std::string stream;
  std::thread follower([&] {
    httplib::Client f("127.0.0.1", l.http_a);
    f.set_read_timeout(60);
    stream = read_events(f, run + "/events");
  });
  // The list: what `vidline runs --json` shows, with the run's priority.
  auto entry = listed(run_id);
  CHECK(entry["state"] == "running");
  CHECK(entry["priority"] == 3);
  CHECK(entry["total"] == 3);
  CHECK(entry["done"] == 0);
  CHECK(entry.contains("eta_s"));
  CHECK(get_json("/v1/runs")["latest"] == run_id);
  CHECK(get_json("/v1/runs?all=true")["runs"].size() == 1);
  auto [rc, out] = [&] {
    process p({VIDLINE_BINARY, "runs", "--config", l.config, "--json"}, l.dir.path() + "/runs.out");
    int code = p.wait(60);
    return std::make_pair(code, p.out());
  }();
  REQUIRE(rc == 0);
  // The CLI prints the API's shape: {runs, latest}.
  auto cli_doc = json::parse(out);
  CHECK(cli_doc["latest"] == run_id);
  auto cli_list = cli_doc["runs"];
  REQUIRE(cli_list.size() == 1);
  for (auto* k : {"run_id", "state", "mode", "priority", "total", "queued"})
    CHECK(cli_list[0][k] == entry[k]);

  // Jobs added to the open run (`vidline submit`): a retry with the same request id adds
  // nothing twice; bad bodies and unknown runs are named.
  const json add = {{"prompt", "added over http"}, {"width", 416}, {"height", 736},
                    {"seconds", 5}, {"count", 2}, {"seed", 2000}, {"request_id", "http-add-1"}};
  auto added = post(run + "/jobs", add);
  REQUIRE(added);
  INFO(added->body);
  REQUIRE(added->status == 201);
  CHECK(json::parse(added->body)["first_index"] == 3);
  CHECK(json::parse(added->body)["count"] == 2);
  auto again = post(run + "/jobs", add);
  REQUIRE(again);
  CHECK(again->status == 201);
  CHECK(json::parse(again->body)["first_index"] == 3);
  CHECK(listed(run_id)["total"] == 5);
  auto wrong = add;
  wrong["mode"] = "four_four_xtx_plus_one";
  expect_error(post(run + "/jobs", wrong), 400, "unknown field 'mode'");
  wrong = add;
  wrong.erase("seed");
  expect_error(post(run + "/jobs", wrong), 400, "missing field 'seed'");
  expect_error(post("/v1/runs/no-such-run/jobs", add), 404, "no run no-such-run");
  wrong = add;
  wrong["request_id"] = "http-add-huge";
  wrong["width"] = 8192;
  wrong["height"] = 8192;
  wrong["seconds"] = 3600;
  auto huge = post(run + "/jobs", wrong);
  REQUIRE(huge);
  INFO(huge->body);
  CHECK(huge->status == 422);

  // One job cancelled (job 4, queued), then the whole run while xtx samples job 2: the
  // pool is free within one status interval.
  auto one = post(run + "/jobs/4/cancel", json::object());
  REQUIRE(one);
  INFO(one->body);
  REQUIRE(one->status == 200);
  CHECK(json::parse(one->body)["cancelled"] == 1);
  CHECK(json::parse(one->body)["state"] == "running");
  expect_error(post(run + "/jobs/4/cancel", json::object()), 409, "job 4 of run " + run_id + " is cancelled");
  expect_error(post(run + "/jobs/99/cancel", json::object()), 404, "no job 99");
  expect_error(post(run + "/cancel", {{"job", 1}}), 400, "unknown field 'job'");
  expect_error(post("/v1/runs/no-such-run/cancel", json::object()), 404, "no run no-such-run");

  auto sampling = wait_status(cl, run_id, 30, [](const json& s) {
    return s["jobs"][2]["state"] == "sampling" && s["jobs"][2]["pool"] == "xtx";
  });
  REQUIRE(sampling["jobs"][2]["pool"] == "xtx");
  REQUIRE(pool_busy(cl, "xtx"));

  auto whole = c.Post((run + "/cancel").c_str(), auth(), "", "application/json");
  const auto cancelled_at = std::chrono::steady_clock::now();
  REQUIRE(whole);
  INFO(whole->body);
  REQUIRE(whole->status == 200);
  auto answer = json::parse(whole->body);
  // Jobs 0..3 unless one finished first (job 2 on xtx did not).
  CHECK(answer["cancelled"] >= 2);
  CHECK(answer["cancelled"] <= 4);
  CHECK(answer["in_flight"] >= 1);
  CHECK(answer["state"] == "cancelled");
  while (pool_busy(cl, "xtx")
         && std::chrono::steady_clock::now() - cancelled_at < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling the status
  const double freed_after =
    std::chrono::duration<double>(std::chrono::steady_clock::now() - cancelled_at).count();
  std::printf("http cancel: xtx free %.3f s after the cancel (status interval %.3f s)\n",
              freed_after, interval_s);
  CHECK(freed_after <= interval_s);

  // A finished run has nothing to cancel and takes no jobs.
  expect_error(post(run + "/cancel", json::object()), 409, "run " + run_id + " is cancelled");
  auto late = add;
  late["request_id"] = "http-add-late";
  expect_error(post(run + "/jobs", late), 422, "cancelled");
  entry = listed(run_id);
  CHECK(entry["state"] == "cancelled");
  CHECK(entry["cancelled"] == answer["cancelled"].get<int>() + 1);
  CHECK(entry["done"] == 5);
  CHECK(entry["eta_s"] == 0);

  // The stream told the added jobs and the cancel, and ended with the run.
  follower.join();
  INFO(stream.substr(0, 4000));
  CHECK(stream.find("\"index\":4") != std::string::npos);
  CHECK(stream.find("\"state\":\"cancelled\"") != std::string::npos);
  const auto end_at = stream.find("event: end\n");
  REQUIRE(end_at != std::string::npos);
  CHECK(stream.find("\"state\":\"cancelled\"", end_at) != std::string::npos);

  // The line goes on: a shot list (`vidline run --jobs`) of higher priority, submitted after
  // it, finishes with its names and takes.
  const json shots = {
    {"mode", "four_four_xtx_plus_one"}, {"priority", 7}, {"request_id", "http-shots-1"},
    {"shots", {{{"prompt", "shot one"}, {"width", 416}, {"height", 736}, {"seconds", 5},
                {"seed", 3000}, {"takes", 2}, {"name", "one"}},
               {{"prompt", "shot two"}, {"width", 416}, {"height", 736}, {"seconds", 5},
                {"seed", 4000}, {"name", "two"}, {"priority", 1}}}}};
  auto bad_shots = shots;
  bad_shots["shots"][1]["width"] = 4;
  expect_error(post("/v1/runs", bad_shots), 400, "'shots[1].width'");
  bad_shots = shots;
  bad_shots["shots"][1]["name"] = "one";  // the coordinator's check: names unique
  bad_shots["request_id"] = "http-shots-bad";
  auto dup = post("/v1/runs", bad_shots);
  REQUIRE(dup);
  INFO(dup->body);
  CHECK(dup->status == 422);
  auto next = post("/v1/runs", shots);
  REQUIRE(next);
  INFO(next->body);
  REQUIRE(next->status == 201);
  const auto next_id = json::parse(next->body)["run_id"].get<std::string>();
  CHECK(listed(next_id)["priority"] == 7);
  CHECK(listed(next_id)["total"] == 3);
  auto done = wait_status(cl, next_id, 90, [](const json& s) { return s["state"] != "running"; });
  INFO(done.dump(2).substr(0, 3000));
  CHECK(done["state"] == "succeeded");
  std::set<std::string> names;
  for (auto& j : done["jobs"]) {
    CHECK(contract_problem(j) == "");
    if (j["name"].is_string())
      names.insert(j["name"].get<std::string>());
  }
  CHECK(names == std::set<std::string>{"one-take-1", "one-take-2", "two"});
  CHECK(done["jobs"][0]["name"] == "two");  // the shot of higher priority is job 0
}

TEST_CASE("http: the dashboard in headless Chromium follows a run to its end") {
  const char* chromium = "/usr/bin/chromium";
  INFO("Debian's chromium is needed (launch/test installs it)");
  REQUIRE(std::filesystem::exists(chromium));
  line l(0.05);
  httplib::Client c("127.0.0.1", l.http_a);
  REQUIRE(cluster_ready(c, 60));
  auto sub = c.Post("/v1/runs", auth(), submit_body(6, 900).dump(), "application/json");
  REQUIRE(sub);
  REQUIRE(sub->status == 201);
  const auto run_id = json::parse(sub->body)["run_id"].get<std::string>();
  // A job added to the run and cancelled before it starts: the page shows it cancelled.
  const json add = {{"prompt", "added, then cancelled"}, {"width", 416}, {"height", 736},
                    {"seconds", 5}, {"count", 1}, {"seed", 990}};
  auto added = c.Post(("/v1/runs/" + run_id + "/jobs").c_str(), auth(), add.dump(), "application/json");
  REQUIRE(added);
  REQUIRE(added->status == 201);
  REQUIRE(json::parse(added->body)["first_index"] == 6);
  auto cancelled = c.Post(("/v1/runs/" + run_id + "/jobs/6/cancel").c_str(), auth(), "", "application/json");
  REQUIRE(cancelled);
  INFO(cancelled->body);
  REQUIRE(cancelled->status == 200);

  const std::string out_dir = std::string(VIDLINE_BUILD_DIR) + "/test-output/http_dashboard";
  std::filesystem::create_directories(out_dir);
  const std::string url = "http://127.0.0.1:" + std::to_string(l.http_a) + "/dashboard/#token=" + token;
  auto browse = [&](const std::vector<std::string>& extra, const std::string& out) {
    std::vector<std::string> args{chromium, "--headless", "--no-sandbox", "--disable-gpu",
                                  "--user-data-dir=" + l.dir.path() + "/chromium",
                                  "--virtual-time-budget=3000", "--window-size=1400,1000"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back(url);
    process p(args, out);
    REQUIRE(p.wait(60) == 0);
    return read_file(out);
  };
  // Load the page until it says the run finished: each load is one look (a condition wait
  // with a deadline). On the way it must have shown the run at work.
  bool seen_running = false, finished = false;
  std::string dom;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (int n = 0; !finished && std::chrono::steady_clock::now() < deadline; ++n) {
    dom = browse({"--dump-dom"}, l.dir.path() + "/dom." + std::to_string(n) + ".html");
    seen_running = seen_running || dom.find("data-run-state=\"running\"") != std::string::npos;
    finished = dom.find("data-run-finished=\"" + run_id + "\"") != std::string::npos;
  }
  INFO(dom.substr(0, 3000));
  CHECK(seen_running);
  REQUIRE(finished);
  CHECK(dom.find("data-run-state=\"succeeded\"") != std::string::npos);
  CHECK(dom.find("data-connected=\"yes\"") != std::string::npos);
  CHECK(dom.find("data-host=\"host_b\"") != std::string::npos);
  // A tile per card (GET /v1/gpus): the sim line's cards, without telemetry here.
  CHECK(dom.find("data-gpu=\"host_a/t10-0\"") != std::string::npos);
  CHECK(dom.find("data-gpu=\"host_b/xtx\"") != std::string::npos);
  // Six jobs succeeded: a row of the job table and a review card each.
  auto count = [&dom](const std::string& what) {
    std::size_t n = 0;
    for (auto at = dom.find(what); at != std::string::npos; at = dom.find(what, at + 1))
      ++n;
    return n;
  };
  // The job table's rows (they carry more attributes after their state).
  const std::regex succeeded_row("<tr[^>]*data-state=\"succeeded\"");
  CHECK(std::distance(std::sregex_iterator(dom.begin(), dom.end(), succeeded_row),
                      std::sregex_iterator()) == 6);
  CHECK(count("class=\"card\" data-index=") == 7);
  CHECK(dom.find("data-state=\"cancelled\"") != std::string::npos);
  CHECK(dom.find("class=\"state-cancelled\"") != std::string::npos);
  CHECK(dom.find(">rtx3080ti</text>") != std::string::npos);  // its lane in the Gantt
  // Each job named by its shot (the prompt's words for a batch), in the table and the Gantt.
  CHECK(dom.find("<td class=\"shot\">\"over http\"</td>") != std::string::npos);
  CHECK(dom.find("<title>job 0 \"over http\" · sampling</title>") != std::string::npos);
  CHECK(dom.find("data-decoder=\"rtx3080ti\" data-alive=\"yes\"") != std::string::npos);
  // The review: a card per job with its prompt; sim videos (text files) get a placeholder.
  CHECK(dom.find("<article class=\"card\" data-index=\"0\" data-state=\"succeeded\">") != std::string::npos);
  CHECK(dom.find("<div class=\"prompt\">over http</div>") != std::string::npos);
  CHECK(dom.find("no preview (not an MP4)") != std::string::npos);
  const std::string shot = out_dir + "/dashboard.png";
  std::filesystem::remove(shot);
  browse({"--screenshot=" + shot}, l.dir.path() + "/shot.out");
  CHECK(std::filesystem::file_size(shot) > 10000);
}
