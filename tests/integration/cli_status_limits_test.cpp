// The command-line client reads replies under the same limits as the node that sends
// them (nodes/bus/bus_options.cpp wire_limits): the status of a large run (~600 bytes of JSON per
// job) fits a frame of max_frame_bytes, so it must unpack, not only up to msgpack's
// default 1 MiB string. A fake coordinator (a ROUTER socket) answers with such a status.

#include <catch2/catch.hpp>

#include <algorithm>
#include <thread>

#include <zmq.hpp>

#include "config/config.hpp"
#include "messages/envelope.hpp"
#include "messages/messages.hpp"
#include "nodes/verbs/commands.hpp"
#include "nodes/verbs/exit_codes.hpp"
#include "tests/support/cluster.hpp"

using namespace vidline;

TEST_CASE("vidline status reads a status reply larger than 1 MiB", "[cli][limits]") {
  auto c = config::load(std::string(VIDLINE_SOURCE_DIR) + "/config/examples/two_hosts_small.json");
  const int port = testing_support::free_ports(1).front();
  for (auto& h : c.hosts)
    if (h.name == c.coordinator) {
      h.address = "127.0.0.1";
      h.port = port;
    }
  // 3 MiB of status: some 5000 jobs' worth, well inside max_frame_bytes (8 MiB).
  const std::string pad(3u << 20, 'j');
  REQUIRE(pad.size() + 4096 < c.knobs.max_frame_bytes);

  zmq::context_t ctx;
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind("tcp://127.0.0.1:" + std::to_string(port));
  std::thread coordinator([&] {
    zmq::message_t id, frame;
    if (!router.recv(id) || !router.recv(frame))
      return;
    msg::frame f;
    if (msg::decode_frame(frame.data<char>(), frame.size(), msg::decode_limits{}, f) !=
        msg::decode_error::none)
      return;
    msg::envelope env;
    env.type = msg::status_reply::wire_name;
    env.id = 1;
    env.sender = c.coordinator;
    env.correlation = f.env.id;
    const std::string out =
        msg::encode_frame(env, msg::pack_body(msg::status_reply{"{\"pad\":\"" + pad + "\"}", ""}));
    router.send(id, zmq::send_flags::sndmore);
    router.send(zmq::buffer(out));
  });

  nodes::verbs::coordinator_client cl(c);
  std::optional<nlohmann::json> st;
  CHECK_NOTHROW(st = cl.status("20240101-120000-beef", 10000));
  coordinator.join();
  REQUIRE(st);
  CHECK((*st)["pad"].get<std::string>().size() == pad.size());
}

// A status too large for one frame is read in pages (docs/design.md, "Status pages"):
// `status` and `wait` of a run whose whole status is several times max_frame_bytes show
// every job. Before pages the coordinator answered too_large and the CLI exited 9. A page
// asked whole (limit 0) still answers too_large, naming both sizes.
TEST_CASE("status and wait of a run whose status exceeds max_frame_bytes read it in pages",
          "[cli][limits][pages]") {
  using namespace testing_support;
  temp_dir dir;
  // 128 KiB frames: the status of 300 jobs (~950 bytes each) is more than twice that; the
  // client's pages are 16 jobs. A fast clock: the run ends within seconds.
  auto config = write_reference_config(
    dir.path(), 0.002,
    json{{"chunk_bytes", 65536}, {"max_frame_bytes", 131072}, {"max_prompt_bytes", 65536}});
  auto cluster = config::load(config);
  auto a = start_node(dir.path(), config, "host_a");
  auto b = start_node(dir.path(), config, "host_b");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(cl.page_jobs() == 16);
  REQUIRE(coordinator_answers(cl, 30));
  msg::submit_run req;
  req.mode = "four_four_plus_one";
  req.prompt = "status limits prompt";
  req.width = 416;
  req.height = 736;
  req.seconds = 5;
  req.count = 300;
  req.seed = 11;
  req.request_id = "status-limits-pages";
  auto run_id = cl.submit(req);

  try {
    cl.status_page(run_id, 0, 0, 5000);
    FAIL("a status over max_frame_bytes came back");
  } catch (const nodes::verbs::coordinator_error& e) {
    INFO(e.what());
    CHECK(e.exit_code() == nodes::verbs::exit_code::too_large);
    CHECK(std::string(e.what()).find("run " + run_id + " (300 jobs) is ") != std::string::npos);
    CHECK(std::string(e.what()).find("over max_frame_bytes 131072") != std::string::npos);
  }
  auto check_all_jobs = [&](const json& st) {
    REQUIRE(st["jobs"].size() == 300);
    for (int i = 0; i < 300; ++i)
      REQUIRE(st["jobs"][i]["index"].get<int>() == i);
    CHECK(st["page"]["jobs_total"].get<int>() == 300);
    std::size_t counted = 0;
    for (auto& [state, n] : st["states"].items())
      counted += n.get<std::size_t>();
    CHECK(counted == 300);
  };
  auto st = cl.status(run_id, 5000);
  REQUIRE(st);
  check_all_jobs(*st);

  {
    process p({VIDLINE_BINARY, "status", run_id, "--json", "--config", config},
              dir.path() + "/status.out");
    REQUIRE(p.wait(60) == 0);
    check_all_jobs(json::parse(p.out()));
  }
  {
    process p({VIDLINE_BINARY, "wait", run_id, "--json", "--timeout", "300", "--config", config},
              dir.path() + "/wait.out");
    int code = p.wait(320);
    INFO(p.err());
    REQUIRE(code == 0);
    auto done = json::parse(p.out());
    check_all_jobs(done);
    CHECK(done["summary"]["succeeded"].get<int>() == 300);
  }
  {
    // The table: one line per job, all 300.
    process p({VIDLINE_BINARY, "status", run_id, "--config", config}, dir.path() + "/table.out");
    REQUIRE(p.wait(60) == 0);
    auto text = p.out();
    CHECK(std::count(text.begin(), text.end(), '\n') >= 300);
  }
  // The cluster's view still comes back.
  CHECK(cl.status("@cluster", 5000).has_value());
  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  CHECK(b->wait(20) == 0);
}

// A run of 100,000 jobs (max_jobs_per_run) can be followed: `wait` polls one job's page
// and shows the run's progress from its state counts, `status` lists every job, read in
// pages of default frames. Before pages its status (~130 MB) answered too_large.
TEST_CASE("a run of 100,000 jobs can be followed with wait and status", "[cli][pages][big]") {
  using namespace testing_support;
  temp_dir dir;
  auto config = write_reference_config(dir.path(), 0.05);
  auto cluster = config::load(config);
  REQUIRE(cluster.knobs.max_jobs_per_run >= 100000);
  auto a = start_node(dir.path(), config, "host_a");
  auto b = start_node(dir.path(), config, "host_b");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));
  msg::submit_run req;
  req.mode = "four_four_plus_one";
  req.prompt = "a big run";
  req.width = 416;
  req.height = 736;
  req.seconds = 5;
  req.count = 100000;
  req.seed = 1;
  req.request_id = "big-run";
  const auto run_id = cl.submit(req, 60000);

  {
    auto started = std::chrono::steady_clock::now();
    process p({VIDLINE_BINARY, "wait", run_id, "--timeout", "4", "--config", config},
              dir.path() + "/wait.out");
    int code = p.wait(60);
    INFO(p.out() << p.err());
    CHECK(code == nodes::verbs::exit_code::timeout);
    CHECK(p.out().find("run " + run_id + " has 100000 jobs: progress only") != std::string::npos);
    CHECK(p.out().find("/100000 done") != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(30));
  }
  {
    process p({VIDLINE_BINARY, "status", run_id, "--timeout", "30", "--config", config},
              dir.path() + "/status.out");
    int code = p.wait(300);
    INFO(p.err());
    REQUIRE(code == 0);
    auto text = p.out();
    // A line per job, the header and the summary.
    CHECK(std::count(text.begin(), text.end(), '\n') >= 100002);
    const auto at = text.find("\n  job 99999 ");
    REQUIRE(at != std::string::npos);
    CHECK(text.substr(at, text.find('\n', at + 1) - at).find("  seed 100000 ") != std::string::npos);
  }
  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(60) == 0);
  CHECK(b->wait(60) == 0);
}
