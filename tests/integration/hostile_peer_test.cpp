// Hostile peers against real node processes with CURVE on (docs/security.md, "Hostile
// peers"): no key, an unlisted key, a wrong server key, bytes that are not ZMTP, a listed
// key sending garbage, replays and another host's name, and a flood of all of these during
// a batch. The nodes stay up, every job ends as the contract says, no message without a
// listed key reaches an actor, and each event is counted in the node's log.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <random>
#include <regex>
#include <thread>

#include <zmq.hpp>

#include "messages/envelope.hpp"
#include "nodes/bus/bus_frame.hpp"
#include "nodes/bus/keys.hpp"
#include "tests/support/cluster.hpp"

using namespace testing_support;
using namespace vidline;

namespace {

/// A DEALER to a node, without a key, or with the given pair and the node's key.
struct raw_peer {
  zmq::context_t ctx{1};
  zmq::socket_t s{ctx, zmq::socket_type::dealer};

  raw_peer(const std::string& endpoint, const std::string& server_key = "",
           const std::string& pub = "", const std::string& sec = "",
           const std::string& routing_id = "", const std::string& plain_user = "",
           const std::string& plain_password = "") {
    s.set(zmq::sockopt::linger, 0);
    if (!plain_user.empty()) {
      s.set(zmq::sockopt::plain_username, plain_user);
      s.set(zmq::sockopt::plain_password, plain_password);
    }
    s.set(zmq::sockopt::sndtimeo, 5000);  // a full queue waits (bounded), never drops
    if (!routing_id.empty())
      s.set(zmq::sockopt::routing_id, routing_id);
    if (!server_key.empty()) {
      s.set(zmq::sockopt::curve_serverkey, server_key);
      s.set(zmq::sockopt::curve_publickey, pub);
      s.set(zmq::sockopt::curve_secretkey, sec);
    }
    s.connect(endpoint);
  }

  void send_raw(const std::string& bytes) {
    (void)s.send(zmq::buffer(bytes), zmq::send_flags::none);
  }

  void send(const std::string& sender, uint64_t id, std::string_view type,
            const std::string& body, const std::string& target = "coordinator") {
    msg::envelope env;
    env.type = std::string(type);
    env.id = id;
    env.sender = sender;
    env.target = target;
    zmq::message_t m = nodes::bus::make_frame(env, body);
    (void)s.send(m, zmq::send_flags::none);
  }

  /// Envelopes received until one correlates to `marker` (or `seconds` pass): their
  /// correlations, the marker's included.
  std::vector<uint64_t> replies_until(uint64_t marker, double seconds) {
    std::vector<uint64_t> out;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
      zmq::message_t m;
      while (s.recv(m, zmq::recv_flags::dontwait)) {
        msg::frame f;
        if (msg::decode_frame(m.data<char>(), m.size(), msg::decode_limits{}, f) ==
            msg::decode_error::none) {
          out.push_back(f.env.correlation);
          if (f.env.correlation == marker)
            return out;
        }
      }
    }
    return out;
  }
};

std::string status_query_body(const std::string& run_id) {
  return msg::pack_body(msg::status_query{run_id});
}

std::string submit_body(const std::string& request_id) {
  msg::submit_run r;
  r.mode = "four_four_xtx_plus_one";
  r.prompt = "hostile prompt";
  r.width = 416;
  r.height = 736;
  r.seconds = 5;
  r.count = 1;
  r.seed = 1;
  r.request_id = request_id;
  return msg::pack_body(r);
}

/// Bytes that are not ZMTP, over plain TCP.
void send_tcp_garbage(int port, std::mt19937_64& rng) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    std::string junk(256, '\0');
    for (auto& c : junk)
      c = static_cast<char>(rng());
    junk[0] = '\xff';  // a ZMTP signature starts with 0xff; the rest is wrong
    [[maybe_unused]] auto n = ::write(fd, junk.data(), junk.size());
  }
  ::close(fd);
}

bool log_has(const std::string& log, const std::string& what, double seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (read_file(log).find(what) != std::string::npos)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a log file
  }
  return false;
}

/// The counters of the "security totals" line a CURVE bus logs when it stops.
struct totals {
  uint64_t admitted = 0, refused = 0, handshakes = 0, impersonations = 0, bad = 0, dups = 0;
  bool found = false;
};

totals totals_of(const std::string& log) {
  static const std::regex re(
      R"(security totals: (\d+) keys admitted, (\d+) keys refused, (\d+) handshakes failed, )"
      R"((\d+) frames refused as impersonation, (\d+) bad frames, (\d+) duplicates)");
  totals t;
  std::smatch m;
  std::string text = read_file(log);
  if (std::regex_search(text, m, re)) {
    t.found = true;
    t.admitted = std::stoull(m[1]);
    t.refused = std::stoull(m[2]);
    t.handshakes = std::stoull(m[3]);
    t.impersonations = std::stoull(m[4]);
    t.bad = std::stoull(m[5]);
    t.dups = std::stoull(m[6]);
  }
  return t;
}

bool no_runs(nodes::verbs::coordinator_client& cl) {
  try {
    cl.status("", 2000);
  } catch (const std::exception& e) {
    return std::string(e.what()) == "no runs yet";
  }
  return false;
}

} // namespace

TEST_CASE("hostile peers: nothing without a listed key reaches an actor, the line stays whole") {
  temp_dir dir;
  auto config = write_reference_config(dir.path(), 0.01);
  auto cluster = config::load(config);
  const auto* ha = cluster.find_host("host_a");
  const auto* hb = cluster.find_host("host_b");
  const std::string ep = "tcp://127.0.0.1:" + std::to_string(ha->port);
  const std::string log_a = ha->data_dir + "/logs/node.log";
  auto a = start_node(dir.path(), config, "host_a");
  auto b = start_node(dir.path(), config, "host_b");
  nodes::verbs::coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));
  std::mt19937_64 rng(7);
  uint64_t id = 1000000;

  // 1. No key: plaintext to a CURVE port. 2. An unlisted key. 3. A wrong server key.
  // 4. Not ZMTP at all. Each sends a submit that must never become a run.
  {
    raw_peer nokey(ep);
    nokey.send("cli:1", ++id, msg::submit_run::wire_name, submit_body("hostile-nokey"));
    REQUIRE(log_has(log_a, "security: a handshake failed", 10));

    const auto stranger = nodes::bus::make_curve_keypair();
    raw_peer unlisted(ep, ha->public_key, stranger.public_z85, stranger.secret_z85);
    unlisted.send("cli:2", ++id, msg::submit_run::wire_name, submit_body("hostile-unlisted"));
    REQUIRE(log_has(log_a, "security: refused a key", 10));
    CHECK(unlisted.replies_until(0, 0.2).empty());

    const auto other = nodes::bus::make_curve_keypair();
    raw_peer wrong_server(ep, other.public_z85, stranger.public_z85, stranger.secret_z85);
    wrong_server.send("cli:3", ++id, msg::submit_run::wire_name, submit_body("hostile-wrongsrv"));
    send_tcp_garbage(ha->port, rng);
    CHECK(no_runs(cl));
  }

  // A listed key (host_b's, as a stolen-key insider or a buggy peer would hold it).
  const std::string b_secret = nodes::bus::read_secret_key(hb->secret_key_file);
  {
    raw_peer insider(ep, ha->public_key, hb->public_key, b_secret);
    // Garbage frames of every size, and a multipart message.
    for (int i = 0; i < 300; ++i) {
      std::string junk(static_cast<std::size_t>(rng() % 512), '\0');
      for (auto& c : junk)
        c = static_cast<char>(rng());
      insider.send_raw(junk);
    }
    (void)insider.s.send(zmq::buffer(std::string("a")), zmq::send_flags::sndmore);
    (void)insider.s.send(zmq::buffer(std::string("b")), zmq::send_flags::none);
    // Another host's name: as the sender, and as the routing id.
    insider.send("host_a", ++id, msg::submit_run::wire_name, submit_body("hostile-as-host-a"));
    raw_peer named(ep, ha->public_key, hb->public_key, b_secret, "host_a");
    named.send("host_a", ++id, msg::submit_run::wire_name, submit_body("hostile-routing-id"));
    REQUIRE(log_has(log_a, "security: refused a frame", 10));

    // Replays: the same frame twice, and an id far below the last, each answered at most
    // once; the marker's reply comes after any reply to them (one connection, in order).
    const uint64_t first = ++id;
    insider.send("cli:9", first, msg::status_query::wire_name, status_query_body(""));
    insider.send("cli:9", first, msg::status_query::wire_name, status_query_body(""));
    const uint64_t old = first - 100000;
    insider.send("cli:9", old, msg::status_query::wire_name, status_query_body(""));
    const uint64_t marker = ++id;
    insider.send("cli:9", marker, msg::status_query::wire_name, status_query_body(""));
    auto replies = insider.replies_until(marker, 10);
    REQUIRE(!replies.empty());
    CHECK(replies.back() == marker);
    CHECK(std::count(replies.begin(), replies.end(), first) == 1);
    CHECK(std::count(replies.begin(), replies.end(), old) == 0);
    CHECK(no_runs(cl));  // neither stolen name made a run
  }

  // The bulk channel (no encryption; admitted from a listed host's address with the secret
  // that host sent over CURVE). Parties on host_b's address (this test's peers are all on
  // loopback) under host_b's name: one without a mechanism (what was enough before the
  // secret), one with PLAIN and a guessed secret. Both are refused, counted and logged;
  // their frames (a submit, garbage, a latent request) never get in, and host_b keeps its
  // bulk routing id: the batch below still moves its latents on the bulk channel.
  std::vector<std::unique_ptr<raw_peer>> bulk_impostors;  // kept open: they retry
  {
    const std::string bulk_ep = "tcp://127.0.0.1:" + std::to_string(ha->bulk_port);
    auto null_peer = std::make_unique<raw_peer>(bulk_ep, "", "", "", "host_b");
    auto guessing = std::make_unique<raw_peer>(bulk_ep, "", "", "", "host_b", "host_b",
                                               std::string(64, 'f'));
    for (auto* p : {null_peer.get(), guessing.get()}) {
      p->s.set(zmq::sockopt::sndtimeo, 0);  // queued until a handshake that never ends
      p->send("host_b", ++id, msg::submit_run::wire_name, submit_body("hostile-bulk-as-b"));
      p->send_raw(std::string(100, '\x17'));
      msg::latent_fetch lf{1, std::string(64, 'a'), 0, 1024};
      p->send("host_b", ++id, msg::latent_fetch::wire_name, msg::pack_body(lf), "");
    }
    REQUIRE(log_has(log_a, "security: refused a bulk connection: handshake failed", 10));
    REQUIRE(log_has(log_a, "without its host's secret: from 127.0.0.1 as 'host_b': not the secret",
                    10));
    CHECK(null_peer->replies_until(0, 0.2).empty());  // nothing answered
    CHECK(guessing->replies_until(0, 0.2).empty());
    CHECK(no_runs(cl));
    bulk_impostors.push_back(std::move(null_peer));
    bulk_impostors.push_back(std::move(guessing));
  }

  // A batch under a flood of all of the above.
  msg::submit_run req;
  req.mode = "four_four_xtx_plus_one";
  req.prompt = "hostile peers test prompt";
  req.width = 416;
  req.height = 736;
  req.seconds = 5;
  req.count = 6;
  req.seed = 987654321123ull;
  req.request_id = "hostile-batch";
  const auto run_id = cl.submit(req);
  std::atomic<bool> stop{false};
  std::atomic<int> rounds{0};
  std::atomic<bool> flood_drained{false};
  std::thread flood([&] {
    std::mt19937_64 r(11);
    raw_peer insider(ep, ha->public_key, hb->public_key, b_secret);
    const auto stranger = nodes::bus::make_curve_keypair();
    uint64_t fid = 5000000;
    std::vector<std::unique_ptr<raw_peer>> strangers;  // kept open: they retry and are refused
    while (!stop.load() && rounds.load() < 40) {
      for (int i = 0; i < 250; ++i) {
        std::string junk(static_cast<std::size_t>(r() % 256), '\0');
        for (auto& c : junk)
          c = static_cast<char>(r());
        insider.send_raw(junk);
      }
      insider.send("host_a", ++fid, msg::submit_run::wire_name, submit_body("flood-as-a"));
      strangers.push_back(std::make_unique<raw_peer>(ep));
      strangers.back()->send("cli:1", ++fid, msg::submit_run::wire_name,
                             submit_body("flood-nokey"));
      strangers.push_back(std::make_unique<raw_peer>(ep, ha->public_key, stranger.public_z85,
                                                     stranger.secret_z85));
      strangers.back()->send("cli:2", ++fid, msg::submit_run::wire_name,
                             submit_body("flood-unlisted"));
      send_tcp_garbage(ha->port, r);
      ++rounds;
    }
    // Everything the insider sent has been through the bus once this is answered.
    insider.send("cli:9", ++fid, msg::status_query::wire_name, status_query_body(""));
    flood_drained = !insider.replies_until(fid, 20).empty();
  });
  auto st = wait_status(cl, run_id, 120, [](const json& s) { return s["state"] != "running"; });
  stop = true;
  flood.join();
  INFO(st.dump(2));
  REQUIRE(st["state"] == "succeeded");
  REQUIRE(st["jobs"].size() == 6);
  for (auto& j : st["jobs"])
    CHECK(contract_problem(j) == "");
  // Still one run: no flooded submit became one.
  CHECK(cl.status(run_id, 2000).has_value());
  auto latest = cl.status("", 2000);
  REQUIRE(latest);
  CHECK((*latest)["run_id"] == run_id);
  CHECK(rounds.load() > 0);
  CHECK(flood_drained.load());

  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  CHECK(b->wait(20) == 0);
  const totals t = totals_of(log_a);
  INFO(read_file(log_a).substr(0, 4000));
  REQUIRE(t.found);
  CHECK(t.admitted >= 3);  // host_b, the CLI, the insiders
  CHECK(t.refused >= 2);   // connections closed before their handshake are no event
  CHECK(t.handshakes >= 2);
  CHECK(t.impersonations >= 2 + static_cast<uint64_t>(rounds.load()));
  CHECK(t.bad >= 300 + 250 * static_cast<uint64_t>(rounds.load()));
  CHECK(t.dups >= 2);
  // The batch's latents went over the bulk channel (host_b decodes what host_a sampled).
  static const std::regex bulk_re(
      R"(bulk channel totals: (\d+) connections admitted, (\d+) refused, (\d+) frames )"
      R"(refused, (\d+) chunks served on it; (\d+) of the refused without their host's secret)");
  std::smatch m;
  const std::string text_a = read_file(log_a);
  REQUIRE(std::regex_search(text_a, m, bulk_re));
  CHECK(std::stoull(m[1]) >= 1);  // host_b's bulk DEALER
  CHECK(std::stoull(m[2]) >= 2);  // the two impostors (and their retries)
  CHECK(std::stoull(m[3]) == 0);  // no frame of theirs got in to be refused
  CHECK(std::stoull(m[4]) >= 1);  // the latents host_a sampled, fetched by host_b
  CHECK(std::stoull(m[5]) >= 2);
}
