// The command-line client reads replies under the same limits as the node that sends
// them (nodes/bus.cpp wire_limits): the status of a large run (~600 bytes of JSON per
// job) fits a frame of max_frame_bytes, so it must unpack, not only up to msgpack's
// default 1 MiB string. A fake coordinator (a ROUTER socket) answers with such a status.

#include <catch2/catch.hpp>

#include <thread>

#include <zmq.hpp>

#include "config/config.hpp"
#include "messages/envelope.hpp"
#include "messages/messages.hpp"
#include "nodes/commands.hpp"
#include "nodes/exit_codes.hpp"
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

  nodes::coordinator_client cl(c);
  std::optional<nlohmann::json> st;
  CHECK_NOTHROW(st = cl.status("20240101-120000-beef", 10000));
  coordinator.join();
  REQUIRE(st);
  CHECK((*st)["pad"].get<std::string>().size() == pad.size());
}

// A status too large for a frame: the coordinator answers with an error naming both sizes,
// and `status` and `wait` print it and exit too_large (9). Before, the frame was dropped by
// the client's socket and the CLI said only "no answer from the coordinator" (exit 6).
TEST_CASE("status and wait of a run whose status exceeds max_frame_bytes say so", "[cli][limits]") {
  using namespace testing_support;
  temp_dir dir;
  // 128 KiB frames: the status of 300 jobs (~950 bytes each) is more than twice that.
  auto config = write_reference_config(
    dir.path(), 0.05,
    json{{"chunk_bytes", 65536}, {"max_frame_bytes", 131072}, {"max_prompt_bytes", 65536}});
  auto cluster = config::load(config);
  auto a = start_node(dir.path(), config, "host_a");
  auto b = start_node(dir.path(), config, "host_b");
  nodes::coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));
  msg::submit_run req;
  req.mode = "four_four_plus_one";
  req.prompt = "status limits prompt";
  req.width = 416;
  req.height = 736;
  req.seconds = 5;
  req.count = 300;
  req.seed = 11;
  req.request_id = "status-limits-too-large";
  auto run_id = cl.submit(req);

  try {
    cl.status(run_id, 5000);
    FAIL("a status over max_frame_bytes came back");
  } catch (const nodes::coordinator_error& e) {
    INFO(e.what());
    CHECK(e.exit_code() == nodes::exit_code::too_large);
    CHECK(std::string(e.what()).find("over max_frame_bytes 131072") != std::string::npos);
  }
  for (const char* verb : {"status", "wait"}) {
    auto started = std::chrono::steady_clock::now();
    process p({VIDLINE_BINARY, verb, run_id, "--config", config},
              dir.path() + "/" + verb + ".out");
    int code = p.wait(30);
    INFO(verb << ": " << p.err());
    CHECK(code == nodes::exit_code::too_large);
    CHECK(p.err().find("run " + run_id + " (300 jobs) is ") != std::string::npos);
    CHECK(p.err().find("over max_frame_bytes 131072") != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(4));  // no timeout
  }
  // The coordinator keeps working: the cluster's view still comes back.
  CHECK(cl.status("@cluster", 5000).has_value());
  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  CHECK(b->wait(20) == 0);
}
