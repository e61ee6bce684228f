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
#include "tests/support/processes.hpp"

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
