// Two real node processes on loopback run the reference batch; the test checks every
// output against the sim contract, recomputing latents itself.
#include <catch2/catch.hpp>

#include <zmq.hpp>

#include "config/config.hpp"
#include "nodes/verbs/commands.hpp"
#include "tests/support/contract.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using testing_support::process;
using testing_support::temp_dir;
using nlohmann::json;
using testing_support::start_node;
using testing_support::coordinator_answers;
using testing_support::contract_problem;

TEST_CASE("two nodes run the reference batch, outputs match the contract, garbage is dropped") {
  temp_dir dir;
  auto config = testing_support::write_reference_config(dir.path(), 0.005, json::object(), false);
  auto cluster = config::load(config);
  auto a = start_node(dir.path(), config, "host_a");
  auto b = start_node(dir.path(), config, "host_b");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));

  // Garbage at host_b's bus port: random bytes, a truncated frame, a frame claiming a
  // huge array. The node must drop them and keep going.
  {
    zmq::context_t ctx;
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 5000);  // closing waits until the frames are out
    // A send never blocks for good: this socket has no key, so host_b's CURVE handshake
    // fails and libzmq drops the connection's pipe; a send that comes after that (the
    // test thread descheduled on a loaded machine) would wait for a pipe that never
    // comes (seen once: the test hung until CTest's 900 s timeout).
    s.set(zmq::sockopt::sndtimeo, 2000);
    s.connect("tcp://127.0.0.1:" + std::to_string(cluster.find_host("host_b")->port));
    const std::string frames[] = {std::string("\x00\x01garbage\xff", 11),
                                  std::string("\x98\xa7VIDLINE", 9),
                                  std::string("\xdd\xff\xff\xff\xff", 5),
                                  std::string(100000, '\xc1')};
    for (auto& f : frames)
      (void)s.send(zmq::buffer(f), zmq::send_flags::none);  // refused after the failure
  }

  msg::submit_run req;
  req.mode = "four_four_xtx_plus_one";
  req.prompt = "integration test prompt";
  req.width = 416;
  req.height = 736;
  req.seconds = 5;
  req.count = 6;
  req.seed = 987654321123ull;
  req.request_id = "line-two-nodes";
  auto run_id = cl.submit(req);
  REQUIRE(!run_id.empty());
  // A retried submit with the same request id returns the same run, not a second one.
  CHECK(cl.submit(req) == run_id);

  json st;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  for (;;) {
    auto s = cl.status(run_id, 2000);
    if (s && (*s)["state"] != "running") {
      st = *s;
      break;
    }
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    REQUIRE(a->running());
    REQUIRE(b->running());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // status polling pace
  }
  INFO(st.dump(2));
  CHECK(st["state"] == "succeeded");
  REQUIRE(st["jobs"].size() == 6);
  std::set<std::string> pools;
  for (auto& j : st["jobs"]) {
    CHECK(contract_problem(j) == "");
    CHECK(j["attempts"] == 1);  // nothing sampled twice
    CHECK(j["decode_attempts"] == 1);
    CHECK(j["error"].is_null());
    pools.insert(j["pool"].get<std::string>());
  }
  CHECK(pools == std::set<std::string>{"four_a", "four_b", "xtx"});
  CHECK(st["summary"]["succeeded"] == 6);
  CHECK(st["summary"]["makespan_s"].get<double>() > 0);
  CHECK(st["clock"]["simulated"] == true);

  // The line is keyed (CURVE): the garbage's socket, without a key, is refused at the
  // handshake, before any of its bytes are read as a frame; host_b logs it and keeps running.
  // (Garbage from a keyed peer is dropped frame by frame: hostile_peer_test.)
  CHECK(b->running());
  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  CHECK(b->wait(20) == 0);
  auto log_b = testing_support::read_file(dir.path() + "/host_b/logs/node.log");
  CHECK(log_b.find("security: a handshake failed") != std::string::npos);
  CHECK(log_b.find(" 0 bad frames") != std::string::npos);  // nothing of it read as a frame
}

TEST_CASE("vidline demo --json: 6/6 succeeded, every latent and file as the contract says") {
  temp_dir dir;
  process demo({VIDLINE_BINARY, "demo", "--json"}, dir.path() + "/demo.out");
  int code = demo.wait(150);
  INFO(demo.err());
  REQUIRE(code == 0);
  auto st = json::parse(demo.out());
  CHECK(st["state"] == "succeeded");
  REQUIRE(st["jobs"].size() == 6);
  for (auto& j : st["jobs"])
    CHECK(contract_problem(j) == "");
  CHECK(st["summary"]["succeeded"] == 6);
  CHECK(st["jobs"][0]["seed"] == 987654321123ull);
}

TEST_CASE("a malformed config is refused with exit code 2 and the field's path") {
  temp_dir dir;
  auto cfg = json::parse(testing_support::read_file(std::string(VIDLINE_SOURCE_DIR)
                                                    + "/config/examples/reference.json"));
  cfg["pools"][1]["host"] = "host_zz";
  std::ofstream(dir.path() + "/bad.json") << cfg.dump();
  process node({VIDLINE_BINARY, "node", "--config", dir.path() + "/bad.json", "--host", "host_a"},
               dir.path() + "/node.out");
  CHECK(node.wait(20) == 2);
  CHECK(node.err().find("/pools/1/host") != std::string::npos);

  std::ofstream(dir.path() + "/unknown_key.json") << R"({"cluster": "x", "hostz": []})";
  process run({VIDLINE_BINARY, "run", "--config", dir.path() + "/unknown_key.json", "--mode", "m",
               "--prompt-file", "/dev/null", "--width", "416", "--height", "736", "--seconds",
               "5", "--count", "1", "--seed", "1"},
              dir.path() + "/run.out");
  CHECK(run.wait(20) == 2);
  CHECK(run.err().find("hostz") != std::string::npos);
}

TEST_CASE("usage errors exit 2, --help exits 0 on every verb") {
  temp_dir dir;
  for (auto verb : {"node", "run", "wait", "status", "demo"}) {
    process help({VIDLINE_BINARY, verb, "--help"}, dir.path() + "/help.out");
    CHECK(help.wait(20) == 0);
    CHECK(help.out().find("Usage") != std::string::npos);
  }
  process missing({VIDLINE_BINARY, "run", "--mode", "x"}, dir.path() + "/m.out");
  CHECK(missing.wait(20) == 2);
  process bogus({VIDLINE_BINARY, "frobnicate"}, dir.path() + "/b.out");
  CHECK(bogus.wait(20) == 2);
  process range({VIDLINE_BINARY, "wait", "r", "--timeout", "-3"}, dir.path() + "/r.out");
  CHECK(range.wait(20) == 2);
}
