/// Integration tests of the bus over loopback: two buses in one process on 127.0.0.1,
/// a raw ZeroMQ socket sending garbage, the CLI client, and latent transfers.
/// Every wait is on a condition variable with a generous deadline, never a bare sleep.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <zmq.hpp>

#include "common/files.hpp"
#include "common/sha256.hpp"
#include "messages/envelope.hpp"
#include "messages/messages.hpp"
#include "nodes/bus/bus.hpp"
#include "nodes/bus/bus_frame.hpp"
#include "nodes/verbs/client.hpp"
#include "nodes/data/inputs.hpp"
#include "nodes/bus/keys.hpp"

namespace fs = std::filesystem;
using namespace vidline;
using namespace vidline::nodes;
using namespace vidline::nodes::bus;
using namespace vidline::nodes::data;
using namespace vidline::nodes::verbs;
using namespace std::chrono_literals;

namespace {

constexpr auto generous = 10s;  ///< deadline for anything that should take milliseconds

/// A port nobody listens on right now (the kernel's choice; racy only against other
/// processes binding in the same instant).
int free_port() {
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::router);
  s.set(zmq::sockopt::linger, 0);
  s.bind("tcp://127.0.0.1:*");
  const std::string ep = s.get(zmq::sockopt::last_endpoint);
  return std::stoi(ep.substr(ep.rfind(':') + 1));
}

std::string endpoint_of(int port) { return "tcp://127.0.0.1:" + std::to_string(port); }

/// Knobs scaled down so liveness is observable in a test: down after 3 x 50 ms. Tests
/// that must not see a peer go down while the shared machine hiccups take 10 x 100 ms.
config::knobs test_knobs(bool tight_liveness = true) {
  config::knobs k;
  k.heartbeat_interval_ms = tight_liveness ? 50 : 100;
  k.heartbeat_misses = tight_liveness ? 3 : 10;
  k.reconnect_min_ms = 20;
  k.reconnect_max_ms = 200;
  return k;
}

/// A fresh directory under `base` (the system's temp dir by default), removed at the end.
struct temp_dir {
  fs::path path;
  explicit temp_dir(const fs::path& base = fs::temp_directory_path()) {
    std::string tmpl = (base / "vidline-bus-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

/// What one bus delivered, for the test thread to wait on.
struct recorder {
  std::mutex m;
  std::condition_variable cv;
  std::vector<inbound> messages;
  std::vector<msg::peer_event> events;
  std::function<void(const inbound&)> also;  ///< runs on the bus thread, e.g. to answer

  /// Sets `also`; through the mutex, so the bus thread sees it and what it captures.
  void set_also(std::function<void(const inbound&)> f) {
    std::lock_guard<std::mutex> lock(m);
    also = std::move(f);
  }
  bus::bus::message_handler message_handler() {
    return [this](const inbound& in) {
      std::function<void(const inbound&)> hook;
      {
        std::lock_guard<std::mutex> lock(m);
        hook = also;
      }
      if (hook)
        hook(in);
      std::lock_guard<std::mutex> lock(m);
      messages.push_back(in);
      cv.notify_all();
    };
  }
  bus::bus::peer_handler peer_handler() {
    return [this](const msg::peer_event& e) {
      std::lock_guard<std::mutex> lock(m);
      events.push_back(e);
      cv.notify_all();
    };
  }
  /// Waits until `pred` (called under the lock) holds; false at the deadline.
  template <class Pred>
  bool wait(Pred pred, std::chrono::milliseconds deadline = generous) {
    std::unique_lock<std::mutex> lock(m);
    return cv.wait_for(lock, deadline, [&] { return pred(); });
  }
  bool has_event(const std::string& host, bool up, uint64_t boot = 0) {
    return std::any_of(events.begin(), events.end(), [&](const msg::peer_event& e) {
      return e.host == host && e.up == up && (boot == 0 || e.boot_id == boot);
    });
  }
};

/// One bus with its recorder.
struct node {
  recorder rec;
  std::unique_ptr<bus::bus> b;
  node(bus_options o) {
    b = std::make_unique<bus::bus>(std::move(o), rec.message_handler(), rec.peer_handler());
    b->start();
  }
};

bus_options options_for(const std::string& self, int port,
                        std::map<std::string, std::string> peers,
                        const std::string& latent_dir = {}, bool tight_liveness = true) {
  bus_options o;
  o.self = self;
  o.bind_endpoint = endpoint_of(port);
  o.peers = std::move(peers);
  o.knobs = test_knobs(tight_liveness);
  o.latent_dir = latent_dir;
  return o;
}

/// A pair of buses, A and B, each the other's peer, both seen up by the other.
struct pair_fixture {
  int port_a = free_port();
  int port_b = free_port();
  temp_dir dir_a, dir_b;
  std::unique_ptr<node> a, b;
  bool tight;

  std::function<void(config::knobs&)> tweak;

  explicit pair_fixture(bool tight_liveness = true, uint32_t corrupt_every_nth_chunk_on_a = 0,
                        std::function<void(config::knobs&)> tweak_knobs = {})
      : tight(tight_liveness), tweak(std::move(tweak_knobs)) {
    auto oa = options_for("A", port_a, {{"B", endpoint_of(port_b)}}, dir_a.path.string(),
                          tight);
    if (tweak)
      tweak(oa.knobs);
    oa.corrupt_every_nth_chunk = corrupt_every_nth_chunk_on_a;
    a = std::make_unique<node>(oa);
    start_b();
    REQUIRE(a->rec.wait([&] { return a->rec.has_event("B", true); }));
    REQUIRE(b->rec.wait([&] { return b->rec.has_event("A", true); }));
  }
  void start_b(uint64_t boot = 0) {
    auto ob = options_for("B", port_b, {{"A", endpoint_of(port_a)}}, dir_b.path.string(),
                          tight);
    if (tweak)
      tweak(ob.knobs);
    ob.boot_id = boot;
    b = std::make_unique<node>(ob);
  }
};

/// Writes `n` random bytes as latent `<sha>.latent` in `dir`; returns the sha.
std::string make_latent(const fs::path& dir, std::size_t n, uint64_t seed) {
  std::string data(n, '\0');
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(&data[i], &v, 8);
  }
  const std::string sha = to_hex(sha256_of(data));
  files::write_atomic((dir / (sha + ".latent")).string(), data);
  return sha;
}

/// Runs one fetch and waits for its result.
fetch_result fetch(bus::bus& b, const std::string& host, const std::string& sha, uint64_t bytes,
                   const std::string& dest) {
  std::promise<fetch_result> p;
  auto f = p.get_future();
  b.fetch_latent(host, sha, bytes, dest, [&p](const fetch_result& r) { p.set_value(r); });
  REQUIRE(f.wait_for(generous) == std::future_status::ready);
  return f.get();
}

/// This process's resident set (VmRSS), in KiB.
long rss_kib() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  REQUIRE(f != nullptr);
  char line[256];
  long kib = -1;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, "VmRSS: %ld kB", &kib) == 1)
      break;
  std::fclose(f);
  return kib;
}

/// CURVE keys for hosts A and B, and `o` (one of them) set to use them.
struct ab_keys {
  curve_keypair a = make_curve_keypair(), b = make_curve_keypair();
  void apply(bus_options& o) const {
    o.security.plaintext = false;
    const curve_keypair& mine = o.self == "A" ? a : b;
    o.security.public_z85 = mine.public_z85;
    o.security.secret_z85 = mine.secret_z85;
    o.security.host_keys = {{"A", a.public_z85}, {"B", b.public_z85}};
  }
};

/// A latent_fetch frame as `sender` would send it.
zmq::message_t fetch_frame(const std::string& sender, uint64_t id, const msg::latent_fetch& req) {
  msg::envelope env;
  env.type = msg::latent_fetch::wire_name;
  env.id = id;
  env.sender = sender;
  return make_frame(env, msg::pack_body(req));
}

/// Waits until `pred` holds (polling a counter against a deadline); false at the deadline.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds deadline = generous) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= until)
      return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

TEST_CASE("two buses exchange messages both ways, locally too, with a low round trip",
          "[bus]") {
  pair_fixture p;

  SECTION("A to B, B to A, and each to itself") {
    const uint64_t id = p.a->b->send("B", "coordinator", msg::result_ack{"t10x8", 7});
    REQUIRE(id != 0);
    REQUIRE(p.b->rec.wait([&] { return !p.b->rec.messages.empty(); }));
    {
      const inbound& in = p.b->rec.messages.front();
      CHECK(in.env.type == "result_ack");
      CHECK(in.env.sender == "A");
      CHECK(in.env.target == "coordinator");
      CHECK(in.env.id == id);
      CHECK(in.reply_to == "A");  // came in on B's ROUTER from A's DEALER
      msg::result_ack ack;
      REQUIRE(msg::unpack_body_as(in.body, msg::decode_limits{}, ack));
      CHECK(ack.target == "t10x8");
      CHECK(ack.attempt == 7);
    }
    REQUIRE(p.b->b->send("A", "pool:t10x8", msg::result_ack{"t10x8", 8}, id) != 0);
    REQUIRE(p.a->rec.wait([&] { return !p.a->rec.messages.empty(); }));
    CHECK(p.a->rec.messages.front().env.correlation == id);
    CHECK(p.a->rec.messages.front().env.target == "pool:t10x8");

    REQUIRE(p.a->b->send("A", "decoder:x", msg::status_query{"run-1"}) != 0);
    REQUIRE(p.a->rec.wait([&] { return p.a->rec.messages.size() == 2; }));
    CHECK(p.a->rec.messages.back().env.sender == "A");
    CHECK(p.a->rec.messages.back().reply_to.empty());
    CHECK(p.a->b->send("nowhere", "x", msg::status_query{}) == 0);
    CHECK(p.a->b->stats().unroutable == 1);
  }

  SECTION("round trips: B answers on its I/O thread, by send and by reply") {
    bool by_reply = GENERATE(false, true);
    p.b->rec.set_also([&](const inbound& in) {
      if (by_reply)
        p.b->b->reply(in.reply_to, msg::status_reply{"{}", ""}, in.env.id);
      else
        p.b->b->send(in.env.sender, "cli", msg::status_reply{"{}", ""}, in.env.id);
    });
    constexpr int rounds = 300;
    std::vector<double> rtt_us;
    for (int i = 0; i < rounds; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      const uint64_t id = p.a->b->send("B", "coordinator", msg::status_query{""});
      REQUIRE(id != 0);
      REQUIRE(p.a->rec.wait([&] {
        return !p.a->rec.messages.empty() && p.a->rec.messages.back().env.correlation == id;
      }));
      rtt_us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
              .count());
    }
    std::printf("bus round trip A->B->A (%s), median of %d: %.0f us\n",
                by_reply ? "reply on ROUTER" : "send on DEALER", rounds, median(rtt_us));
    // No tight bound (shared machines); a poll-timeout wake-up would show as >= 50 ms.
    CHECK(median(rtt_us) < 20000);
    CHECK(p.a->b->stats().decode_errors_total() == 0);
    CHECK(p.b->b->stats().duplicates == 0);
  }
}

TEST_CASE("a peer that stops is declared down, and restarted when it comes back", "[bus]") {
  pair_fixture p;
  const uint64_t first_boot = p.b->b->boot_id();
  const auto stopped_at = std::chrono::steady_clock::now();
  p.b->b->stop();
  REQUIRE(p.a->rec.wait([&] { return p.a->rec.has_event("B", false); }));
  const double down_ms = std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - stopped_at).count();
  std::printf("peer down detected after %.0f ms (limit 3 x 50 ms)\n", down_ms);
  CHECK(down_ms >= 50.0);  // not before at least some beats were missed

  p.b.reset();
  const uint64_t second_boot = first_boot + 1;
  p.start_b(second_boot);
  REQUIRE(p.a->rec.wait([&] {
    const auto& ev = p.a->rec.events;
    return std::any_of(ev.begin(), ev.end(), [&](const msg::peer_event& e) {
      return e.host == "B" && e.up && !e.restarted && e.boot_id == second_boot;
    });
  }));
  std::lock_guard<std::mutex> lock(p.a->rec.m);
  const auto& ev = p.a->rec.events;
  // In order: up (first boot), down (first boot), restarted (second), up (second). A
  // loaded machine may add down/up pairs of one boot in between; the order must hold.
  auto next = [&](std::size_t from, auto pred) {
    for (std::size_t i = from; i < ev.size(); ++i)
      if (pred(ev[i]))
        return i + 1;
    return std::size_t{0};
  };
  std::size_t i = next(0, [&](auto& e) { return e.up && e.boot_id == first_boot; });
  REQUIRE(i != 0);
  i = next(i, [&](auto& e) { return !e.up && e.boot_id == first_boot; });
  REQUIRE(i != 0);
  i = next(i, [&](auto& e) { return e.up && e.restarted && e.boot_id == second_boot; });
  REQUIRE(i != 0);
  i = next(i, [&](auto& e) { return e.up && !e.restarted && e.boot_id == second_boot; });
  REQUIRE(i != 0);
  for (const auto& e : ev)
    CHECK((e.boot_id == first_boot || e.boot_id == second_boot));
}

TEST_CASE("a down peer is dialled afresh at once and every window while down and no more once up",
          "[bus]") {
  pair_fixture p;
  CHECK(p.a->b->stats().redials == 0);
  p.b->b->stop();
  REQUIRE(p.a->rec.wait([&] { return p.a->rec.has_event("B", false); }));
  // The redial comes with the down, before the peer handler hears of it.
  CHECK(p.a->b->stats().redials >= 1);
  // Every liveness window (3 x 50 ms) again while B stays down.
  REQUIRE(eventually([&] { return p.a->b->stats().redials >= 4; }));

  p.b.reset();
  p.start_b(p.a->b->boot_id() + 7);
  REQUIRE(p.a->rec.wait([&] {
    const auto& ev = p.a->rec.events;
    return std::any_of(ev.begin(), ev.end(), [&](const msg::peer_event& e) {
      return e.host == "B" && e.up && !e.restarted;
    });
  }));
  // Up again: the redials stop. Twenty beats from B (seven windows) and no new redial,
  // unless the machine stalled so long that A declared B down again meanwhile.
  const uint64_t redials = p.a->b->stats().redials;
  const uint64_t beats = p.a->b->stats().heartbeats_received;
  const std::size_t events = [&] {
    std::lock_guard<std::mutex> lock(p.a->rec.m);
    return p.a->rec.events.size();
  }();
  REQUIRE(eventually([&] { return p.a->b->stats().heartbeats_received >= beats + 20; }));
  std::lock_guard<std::mutex> lock(p.a->rec.m);
  if (p.a->rec.events.size() == events)
    CHECK(p.a->b->stats().redials == redials);
}

TEST_CASE("garbage from a raw socket is counted and dropped, the bus keeps delivering",
          "[bus]") {
  const int port = free_port();
  node a(options_for("A", port, {}));
  zmq::context_t ctx;
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(endpoint_of(port));
  auto send_raw = [&](const std::string& bytes) {
    REQUIRE(raw.send(zmq::buffer(bytes), zmq::send_flags::none));
  };

  msg::envelope env;
  env.type = "status_query";
  env.id = 1000;
  env.sender = "mallory";
  env.target = "coordinator";
  const std::string body = msg::pack_body(msg::status_query{"r"});

  send_raw("hello, is this the bus?");                              // malformed
  send_raw(std::string("\xdd\xff\xff\xff\xff", 5) + std::string(13, '\0'));  // limit
  send_raw(msg::pack_body(msg::status_query{"r"}));                 // a map: bad shape
  {
    msgpack::sbuffer b;
    msgpack::packer<msgpack::sbuffer> pk(b);
    pk.pack_array(2);
    pk.pack(std::string("VIDLINX"));
    pk.pack(1);
    send_raw(std::string(b.data(), b.size()));                      // bad magic
  }
  {
    msg::envelope v2 = env;
    v2.version = 2;
    send_raw(msg::encode_frame(v2, body));                          // unknown version
  }
  send_raw(msg::encode_frame(env, "\x01\x02"));                     // body not a map
  {
    REQUIRE(raw.send(zmq::buffer(std::string("part1")), zmq::send_flags::sndmore));
    send_raw(msg::encode_frame(env, body));                         // multipart: malformed
  }
  send_raw("");                                                     // empty: malformed
  // Then a valid message, twice: taken once.
  env.id = 1001;
  send_raw(msg::encode_frame(env, body));
  send_raw(msg::encode_frame(env, body));
  env.id = 1002;
  send_raw(msg::encode_frame(env, body));
  REQUIRE(a.rec.wait([&] { return a.rec.messages.size() == 2; }));
  CHECK(a.rec.messages[0].env.id == 1001);
  CHECK(a.rec.messages[1].env.id == 1002);
  CHECK(a.rec.messages[0].env.sender == "mallory");

  const bus_stats s = a.b->stats();
  using e = msg::decode_error;
  CHECK(s.decode_error_count(e::malformed) == 3);
  CHECK(s.decode_error_count(e::limit_exceeded) == 1);
  CHECK(s.decode_error_count(e::bad_shape) == 1);
  CHECK(s.decode_error_count(e::bad_magic) == 1);
  CHECK(s.decode_error_count(e::unknown_version) == 1);
  CHECK(s.decode_error_count(e::bad_body) == 1);
  CHECK(s.decode_errors_total() == 8);
  CHECK(s.duplicates == 1);
  CHECK(s.delivered == 2);
}

TEST_CASE("the CLI client gets its reply by correlation, and times out cleanly", "[bus]") {
  const int port = free_port();
  node a(options_for("A", port, {}));
  std::atomic<bool> answer{true};
  a.rec.set_also([&](const inbound& in) {
    if (answer && in.env.type == msg::status_query::wire_name)
      a.b->reply(in.reply_to, msg::status_reply{"{\"run\":\"" + in.env.target + "\"}", ""},
                 in.env.id);
  });
  client c(endpoint_of(port), test_knobs());
  CHECK(c.sender().rfind("cli:", 0) == 0);
  auto r = c.request("coordinator", msg::status_query{""}, 5000);
  REQUIRE(r);
  CHECK(r->env.type == "status_reply");
  CHECK(r->env.correlation == c.last_request_id());
  msg::status_reply sr;
  REQUIRE(msg::unpack_body_as(r->body, msg::decode_limits{}, sr));
  CHECK(sr.json == "{\"run\":\"coordinator\"}");

  answer = false;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(c.request("coordinator", msg::status_query{""}, 200));
  CHECK(std::chrono::steady_clock::now() - t0 < generous);
  answer = true;
  CHECK(c.request("coordinator", msg::status_query{""}, 5000));  // usable after a timeout

  client nobody(endpoint_of(free_port()), test_knobs());
  CHECK_FALSE(nobody.request("coordinator", msg::status_query{""}, 200));
}

/// Fetches a latent `rounds` times into `dest_dir`, checks each copy, returns the median ms.
double fetch_rounds(bus::bus& b, const std::string& sha, std::size_t size, const fs::path& dest_dir,
                    int rounds) {
  std::vector<double> ms;
  for (int i = 0; i < rounds; ++i) {
    const std::string dest = (dest_dir / ("got-" + std::to_string(i) + ".latent")).string();
    const fetch_result r = fetch(b, "A", sha, size, dest);
    INFO(r.error);
    REQUIRE(r.outcome == fetch_outcome::ok);
    CHECK(r.bytes == size);
    CHECK(sha256_file_hex(dest) == sha);
    CHECK_FALSE(fs::exists(dest + ".part"));
    ms.push_back(r.elapsed_ms);
  }
  return median(ms);
}

TEST_CASE("a 13 MB latent moves between hosts, verified and renamed", "[bus][transfer]") {
  pair_fixture p(/*tight_liveness=*/false);
  constexpr std::size_t size = 13'000'000;
  const std::string sha = make_latent(p.dir_a.path, size, 42);
  std::vector<double> ms;
  for (int i = 0; i < 5; ++i) {
    const std::string dest = (p.dir_b.path / ("got-" + std::to_string(i) + ".latent")).string();
    const fetch_result r = fetch(*p.b->b, "A", sha, size, dest);
    INFO(r.error);
    REQUIRE(r.outcome == fetch_outcome::ok);
    CHECK(r.bytes == size);
    uint64_t got = 0;
    CHECK(sha256_file_hex(dest, &got) == sha);
    CHECK(got == size);
    CHECK_FALSE(fs::exists(dest + ".part"));
    ms.push_back(r.elapsed_ms);
  }
  std::printf("13 MB latent A->B (1 MiB chunks, window 4, sha256, fsync, rename): "
              "median of 5: %.1f ms\n", median(ms));
  CHECK(p.a->b->stats().chunks_served == 5 * 13);
  CHECK(p.b->b->stats().chunks_received == 5 * 13);

  SECTION("into tmpfs: the bus and SHA-256 without the disk") {
    if (fs::is_directory("/dev/shm")) {
      temp_dir shm("/dev/shm");
      std::printf("13 MB latent A->B into tmpfs (no disk write or fsync cost): "
                  "median of 5: %.1f ms\n", fetch_rounds(*p.b->b, sha, size, shm.path, 5));
    }
  }
  SECTION("from this host itself") {
    const std::string dest = (p.dir_a.path / "self.latent").string();
    const fetch_result r = fetch(*p.a->b, "A", sha, size, dest);
    CHECK(r.outcome == fetch_outcome::ok);
    CHECK(sha256_file_hex(dest) == sha);
  }
  SECTION("an empty latent") {
    const std::string empty = make_latent(p.dir_a.path, 0, 1);
    const std::string dest = (p.dir_b.path / "empty.latent").string();
    const fetch_result r = fetch(*p.b->b, "A", empty, 0, dest);
    CHECK(r.outcome == fetch_outcome::ok);
    CHECK(fs::file_size(dest) == 0);
  }
}

TEST_CASE("a latent corrupted in transit is refused and leaves no file", "[bus][transfer]") {
  pair_fixture p(/*tight_liveness=*/false, /*corrupt_every_nth_chunk_on_a=*/3);
  constexpr std::size_t size = 13'000'000;
  const std::string sha = make_latent(p.dir_a.path, size, 43);
  const std::string dest = (p.dir_b.path / "bad.latent").string();
  const fetch_result r = fetch(*p.b->b, "A", sha, size, dest);
  CHECK(r.outcome == fetch_outcome::corrupt);
  CHECK(r.error.find("sha256 mismatch") != std::string::npos);
  CHECK_FALSE(fs::exists(dest));
  CHECK_FALSE(fs::exists(dest + ".part"));
}

TEST_CASE("fetches that cannot succeed end with the right outcome", "[bus][transfer]") {
  pair_fixture p(/*tight_liveness=*/false);
  const std::string dest = (p.dir_b.path / "x.latent").string();

  SECTION("not found on the source") {
    const fetch_result r = fetch(*p.b->b, "A", std::string(64, 'a'), 100, dest);
    CHECK(r.outcome == fetch_outcome::not_found);
  }
  SECTION("the source holds a different size than expected") {
    const std::string sha = make_latent(p.dir_a.path, 1000, 44);
    const fetch_result r = fetch(*p.b->b, "A", sha, 2000, dest);
    CHECK(r.outcome == fetch_outcome::corrupt);
  }
  SECTION("the source goes down mid-way or was never there") {
    p.a->b->stop();
    const std::string sha = make_latent(p.dir_a.path, 1000, 45);
    const fetch_result r = fetch(*p.b->b, "A", sha, 1000, dest);
    CHECK(r.outcome == fetch_outcome::transient);
  }
  SECTION("malformed requests are refused at the call") {
    CHECK_THROWS_AS(p.b->b->fetch_latent("A", "../../etc/passwd", 1, dest, {}),
                    std::invalid_argument);
    CHECK_THROWS_AS(p.b->b->fetch_latent("Z", std::string(64, 'a'), 1, dest, {}),
                    std::invalid_argument);
  }
  CHECK_FALSE(fs::exists(dest));
  CHECK_FALSE(fs::exists(dest + ".part"));
}

TEST_CASE("many small chunks through a window of one", "[bus][transfer]") {
  pair_fixture p(/*tight_liveness=*/false, 0, [](config::knobs& k) {
    k.chunk_bytes = 64 * 1024;
    k.chunk_window = 1;
  });
  constexpr std::size_t size = 3'000'001;  // not a multiple of the chunk
  const std::string sha = make_latent(p.dir_a.path, size, 46);
  const std::string dest = (p.dir_b.path / "small.latent").string();
  const fetch_result r = fetch(*p.b->b, "A", sha, size, dest);
  INFO(r.error);
  REQUIRE(r.outcome == fetch_outcome::ok);
  CHECK(sha256_file_hex(dest) == sha);
  CHECK(p.b->b->stats().chunks_received == (size + 65535) / 65536);
}

namespace {

/// A fake source host "A": a raw ROUTER that answers heartbeats (so the bus sees it up)
/// and latent_fetch requests as the test says, or not at all.
struct fake_source {
  int port = free_port();
  zmq::context_t ctx;
  zmq::socket_t router{ctx, zmq::socket_type::router};
  uint64_t next_id = first_envelope_id();

  fake_source() {
    router.set(zmq::sockopt::linger, 0);
    router.set(zmq::sockopt::rcvtimeo, 100);
    router.bind(endpoint_of(port));
  }
  template <class T>
  void send_to(const std::string& to, const T& body, uint64_t correlation) {
    msg::envelope env;
    env.type = T::wire_name;
    env.id = next_id++;
    env.sender = "A";
    env.correlation = correlation;
    env.target = "bus";
    const std::string wire = msg::encode_frame(env, msg::pack_body(body));
    REQUIRE(router.send(zmq::buffer(to), zmq::send_flags::sndmore));
    REQUIRE(router.send(zmq::buffer(wire), zmq::send_flags::none));
  }
  using request = std::pair<std::string, std::pair<msg::envelope, msg::latent_fetch>>;

  /// Waits up to 100 ms for one frame: answers a heartbeat, returns a latent_fetch (and
  /// the routing id it came from).
  std::optional<request> serve_once() {
    zmq::message_t id, frame;
    if (!router.recv(id))
      return std::nullopt;
    REQUIRE(router.recv(frame));
    msg::frame f;
    REQUIRE(msg::decode_frame(frame.data<char>(), frame.size(), msg::decode_limits{}, f) ==
            msg::decode_error::none);
    if (f.env.type == msg::heartbeat::wire_name)
      send_to(id.to_string(), msg::heartbeat{"A", 1, next_id, 0}, 0);
    if (f.env.type != msg::latent_fetch::wire_name)
      return std::nullopt;
    msg::latent_fetch req;
    REQUIRE(msg::unpack_body_as(f.body, msg::decode_limits{}, req));
    return request{id.to_string(), {f.env, req}};
  }
  /// Serves heartbeats until a latent_fetch comes.
  request next_request() {
    const auto deadline = std::chrono::steady_clock::now() + generous;
    for (;;) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      if (auto r = serve_once())
        return *r;
    }
  }
  void answer(const std::string& to, const msg::envelope& req_env, const msg::latent_chunk& c) {
    send_to(to, c, req_env.id);
  }
};

} // namespace

TEST_CASE("the receiver holds a source to the protocol", "[bus][transfer]") {
  std::promise<fetch_result> done;  // before the bus: it must outlive any callback
  auto result = done.get_future();
  fake_source a;
  temp_dir dir;
  auto ob = options_for("B", free_port(), {{"A", endpoint_of(a.port)}}, dir.path.string(),
                        /*tight_liveness=*/false);
  ob.knobs.transfer_timeout_ms = 300;
  node b(ob);
  const std::string dest = (dir.path / "x.latent").string();
  const std::string data(100, 'z');
  const std::string sha = to_hex(sha256_of(data));

  // Until B's DEALER is connected a fetch fails at once ("cannot reach A"): wait for A up.
  const auto deadline = std::chrono::steady_clock::now() + generous;
  while (!b.rec.wait([&] { return b.rec.has_event("A", true); }, 0ms)) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    a.serve_once();
  }
  b.b->fetch_latent("A", sha, data.size(), dest,
                    [&done](const fetch_result& r) { done.set_value(r); });
  auto [to, req] = a.next_request();
  CHECK(req.second.sha256 == sha);
  CHECK(req.second.offset == 0);
  CHECK(req.second.length == data.size());

  msg::latent_chunk c;
  c.transfer_id = req.second.transfer_id;
  c.sha256 = sha;
  c.total = data.size();
  SECTION("silence ends the fetch as transient after transfer_timeout_ms") {
    REQUIRE(result.wait_for(generous) == std::future_status::ready);
    const fetch_result r = result.get();
    CHECK(r.outcome == fetch_outcome::transient);
    CHECK(r.error.find("no chunk") != std::string::npos);
    CHECK(r.elapsed_ms >= 300 - 1);  // the bus's timers count whole milliseconds
  }
  SECTION("a short chunk is corrupt") {
    c.data = msgpack::type::raw_ref(data.data(), 99);
    a.answer(to, req.first, c);
    REQUIRE(result.wait_for(generous) == std::future_status::ready);
    CHECK(result.get().outcome == fetch_outcome::corrupt);
  }
  SECTION("a chunk at the wrong offset is transient") {
    c.offset = 50;
    c.data = msgpack::type::raw_ref(data.data(), 50);
    a.answer(to, req.first, c);
    REQUIRE(result.wait_for(generous) == std::future_status::ready);
    CHECK(result.get().outcome == fetch_outcome::transient);
  }
  SECTION("a chunk for another transfer is ignored; the right one is taken") {
    msg::latent_chunk other = c;
    other.transfer_id += 1000;
    other.data = msgpack::type::raw_ref(data.data(), static_cast<uint32_t>(data.size()));
    a.answer(to, req.first, other);
    c.data = msgpack::type::raw_ref(data.data(), static_cast<uint32_t>(data.size()));
    a.answer(to, req.first, c);
    REQUIRE(result.wait_for(generous) == std::future_status::ready);
    CHECK(result.get().outcome == fetch_outcome::ok);
    CHECK(b.b->stats().stale_chunks == 1);
    CHECK(files::read_all(dest) == data);
  }
  SECTION("a source error other than not found is transient") {
    c.error = "cannot read";
    a.answer(to, req.first, c);
    REQUIRE(result.wait_for(generous) == std::future_status::ready);
    const fetch_result r = result.get();
    CHECK(r.outcome == fetch_outcome::transient);
    CHECK(r.error.find("cannot read") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(dest + ".part"));
}

TEST_CASE("the bulk channel carries latents, a requester that does not read is bounded",
          "[bus][transfer][bulk]") {
  temp_dir dir_a, dir_b;
  const int port_a = free_port(), port_b = free_port();
  const int bulk_a = free_port(), bulk_b = free_port();
  auto oa = options_for("A", port_a, {{"B", endpoint_of(port_b)}}, dir_a.path.string(), false);
  oa.bulk_bind_endpoint = endpoint_of(bulk_a);
  oa.bulk_peers["B"] = endpoint_of(bulk_b);
  oa.bulk_admit_addresses = {"127.0.0.1"};
  oa.bulk_hwm = 8;
  auto ob = options_for("B", port_b, {{"A", endpoint_of(port_a)}}, dir_b.path.string(), false);
  ob.bulk_bind_endpoint = endpoint_of(bulk_b);
  ob.bulk_peers["A"] = endpoint_of(bulk_a);
  ob.bulk_admit_addresses = {"127.0.0.1"};
  ob.bulk_secret_for_tests = "secret-of-b";  // so the greedy requester below can be B
  node a(oa);
  auto b = std::make_unique<node>(ob);
  REQUIRE(a.rec.wait([&] { return a.rec.has_event("B", true); }));

  constexpr std::size_t size = 13'000'000;
  const std::string sha = make_latent(dir_a.path, size, 7);
  const std::string dest = (dir_b.path / "got.latent").string();
  const fetch_result r = fetch(*b->b, "A", sha, size, dest);
  INFO(r.error);
  REQUIRE(r.outcome == fetch_outcome::ok);
  CHECK(sha256_file_hex(dest) == sha);
  CHECK(a.b->stats().bulk_chunks_served == 13);  // every chunk on the bulk channel
  CHECK(a.b->stats().chunks_served == 13);
  b.reset();

  // A requester under B's name (with B's secret) asks for 300 chunks of 1 MiB and reads
  // none: A queues at most bulk_hwm of them (plus what the kernel buffers) and drops the rest.
  zmq::context_t ctx;
  zmq::socket_t greedy(ctx, zmq::socket_type::dealer);
  greedy.set(zmq::sockopt::linger, 0);
  greedy.set(zmq::sockopt::routing_id, "B");
  greedy.set(zmq::sockopt::plain_username, "B");
  greedy.set(zmq::sockopt::plain_password, "secret-of-b");
  greedy.set(zmq::sockopt::rcvhwm, 1);
  greedy.set(zmq::sockopt::rcvbuf, 65536);
  greedy.connect(endpoint_of(bulk_a));
  const uint64_t dropped_before = a.b->stats().send_dropped;
  constexpr int asks = 300;
  const uint64_t first_id = first_envelope_id();  // above B's, or they count as replays
  for (int i = 0; i < asks; ++i) {
    msg::envelope env;
    env.type = msg::latent_fetch::wire_name;
    env.id = first_id + static_cast<uint64_t>(i);
    env.sender = "B";
    const msg::latent_fetch req{static_cast<uint64_t>(i + 1), sha,
                                static_cast<uint64_t>(i % 12) * (1u << 20), 1u << 20};
    zmq::message_t m = make_frame(env, msg::pack_body(req));
    REQUIRE(greedy.send(m, zmq::send_flags::none));
  }
  // Served (read and handed to ZeroMQ, or dropped) once A's I/O thread has seen them all.
  const auto deadline = std::chrono::steady_clock::now() + generous;
  while (a.b->stats().chunks_served < 13 + asks && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();  // polling a counter against a deadline
  REQUIRE(a.b->stats().chunks_served == 13 + asks);
  const uint64_t dropped = a.b->stats().send_dropped - dropped_before;
  INFO("dropped " << dropped << " of " << asks);
  // 8 queued by ZeroMQ, and the kernel's buffers on both ends: far fewer than 300 MiB.
  CHECK(dropped >= static_cast<uint64_t>(asks) - 100);
}

TEST_CASE("a bulk channel that cannot connect: latents travel on the main link instead",
          "[bus][transfer][bulk]") {
  temp_dir dir_a, dir_b;
  const int port_a = free_port(), port_b = free_port();
  const int nobody = free_port(), bulk_b = free_port();
  node a(options_for("A", port_a, {{"B", endpoint_of(port_b)}}, dir_a.path.string(), false));
  auto ob = options_for("B", port_b, {{"A", endpoint_of(port_a)}}, dir_b.path.string(), false);
  ob.bulk_bind_endpoint = endpoint_of(bulk_b);
  ob.bulk_peers["A"] = endpoint_of(nobody);  // A has no bulk channel: nothing listens there
  ob.bulk_admit_addresses = {"127.0.0.1"};
  node b(ob);
  REQUIRE(b.rec.wait([&] { return b.rec.has_event("A", true); }));
  constexpr std::size_t size = 3'000'000;
  const std::string sha = make_latent(dir_a.path, size, 9);
  const std::string dest = (dir_b.path / "got.latent").string();
  const fetch_result r = fetch(*b.b, "A", sha, size, dest);
  INFO(r.error);
  REQUIRE(r.outcome == fetch_outcome::ok);
  CHECK(sha256_file_hex(dest) == sha);
  CHECK(a.b->stats().chunks_served == 3);
  CHECK(a.b->stats().bulk_chunks_served == 0);
}

TEST_CASE("latents served on CURVE are bounded per requester: a listed peer that asks and "
          "does not read holds at most router_hwm chunks",
          "[bus][transfer][curve]") {
  temp_dir dir_a;
  const ab_keys keys;
  const int port_a = free_port(), port_b = free_port();
  auto oa = options_for("A", port_a, {{"B", endpoint_of(port_b)}}, dir_a.path.string(), false);
  keys.apply(oa);
  oa.router_hwm = 8;
  node a(oa);
  constexpr std::size_t size = 12u << 20;
  const std::string sha = make_latent(dir_a.path, size, 5);

  // B's key (listed), a client routing id, asks for 300 chunks of 1 MiB and reads none.
  zmq::context_t ctx;
  zmq::socket_t greedy(ctx, zmq::socket_type::dealer);
  greedy.set(zmq::sockopt::linger, 0);
  greedy.set(zmq::sockopt::routing_id, "greedy");
  greedy.set(zmq::sockopt::rcvhwm, 1);
  greedy.set(zmq::sockopt::rcvbuf, 65536);
  greedy.set(zmq::sockopt::curve_serverkey, keys.a.public_z85);
  greedy.set(zmq::sockopt::curve_publickey, keys.b.public_z85);
  greedy.set(zmq::sockopt::curve_secretkey, keys.b.secret_z85);
  greedy.connect(endpoint_of(port_a));
  REQUIRE(eventually([&] { return a.b->stats().keys_admitted >= 1; }));
  const long rss_before = rss_kib();
  constexpr int asks = 300;
  const uint64_t first_id = first_envelope_id();
  for (int i = 0; i < asks; ++i) {
    const msg::latent_fetch req{static_cast<uint64_t>(i + 1), sha,
                                static_cast<uint64_t>(i % 12) * (1u << 20), 1u << 20};
    zmq::message_t m = fetch_frame("B", first_id + static_cast<uint64_t>(i), req);
    REQUIRE(greedy.send(m, zmq::send_flags::none));
  }
  REQUIRE(eventually([&] { return a.b->stats().chunks_served == asks; }));
  const bus_stats st = a.b->stats();
  const long rss_after = rss_kib();
  CHECK(st.impersonations == 0);

  // Reading now: what was queued arrives (ZeroMQ's queue, what CURVE's engine and the
  // kernel's buffers hold); the rest was dropped. Before the bound, the ROUTER's HWM (1000)
  // queued all 300.
  int got = 0;
  zmq::message_t m;
  zmq::pollitem_t item{greedy.handle(), 0, ZMQ_POLLIN, 0};
  while (zmq::poll(&item, 1, std::chrono::milliseconds(300)) > 0)
    while (greedy.recv(m, zmq::recv_flags::dontwait))
      ++got;
  INFO("received " << got << " of " << asks << " chunks asked; VmRSS " << rss_before
                   << " -> " << rss_after << " KiB");
  CHECK(got > 0);
  CHECK(got <= 40);
  CHECK(rss_after - rss_before < 120 * 1024);  // 300 queued would be 300 MiB
}

TEST_CASE("a bulk connection must prove its host's per-boot secret: a party on the host's "
          "address cannot take its routing id over",
          "[bus][transfer][bulk][curve]") {
  temp_dir dir_a, dir_b;
  const ab_keys keys;
  const int port_a = free_port(), port_b = free_port();
  const int bulk_a = free_port(), bulk_b = free_port();
  auto oa = options_for("A", port_a, {{"B", endpoint_of(port_b)}}, dir_a.path.string(), false);
  keys.apply(oa);
  oa.bulk_bind_endpoint = endpoint_of(bulk_a);
  oa.bulk_peers["B"] = endpoint_of(bulk_b);
  oa.bulk_admit_addresses = {"127.0.0.1"};
  auto ob = options_for("B", port_b, {{"A", endpoint_of(port_a)}}, dir_b.path.string(), false);
  keys.apply(ob);
  ob.bulk_bind_endpoint = endpoint_of(bulk_b);
  ob.bulk_peers["A"] = endpoint_of(bulk_a);
  ob.bulk_admit_addresses = {"127.0.0.1"};
  node a(oa);
  auto b = std::make_unique<node>(ob);
  REQUIRE(a.rec.wait([&] { return a.rec.has_event("B", true); }));
  REQUIRE(eventually([&] { return a.b->stats().bulk_admitted >= 1; }));

  constexpr std::size_t size = 3'000'000;
  const std::string sha = make_latent(dir_a.path, size, 11);
  auto fetch_on_bulk = [&](const char* name) {
    const uint64_t before = a.b->stats().bulk_chunks_served;
    const std::string dest = (dir_b.path / name).string();
    const fetch_result r = fetch(*b->b, "A", sha, size, dest);
    INFO(name << ": " << r.error);
    REQUIRE(r.outcome == fetch_outcome::ok);
    CHECK(sha256_file_hex(dest) == sha);
    CHECK(a.b->stats().bulk_chunks_served - before == 3);  // on the bulk channel
  };
  // A admits B's bulk connection (the ZAP answer) a moment before B's end of it is ready:
  // a fetch in that moment travels on the CURVE link (the fallback). Once B's end is up,
  // fetches go on the bulk channel; wait for that, one fetch at a time.
  auto bulk_carries_fetches = [&](const char* name) {
    int n = 0;
    return eventually([&] {
      const uint64_t before = a.b->stats().bulk_chunks_served;
      const std::string dest = (dir_b.path / (name + std::to_string(n++))).string();
      const fetch_result r = fetch(*b->b, "A", sha, size, dest);
      return r.outcome == fetch_outcome::ok && a.b->stats().bulk_chunks_served - before == 3;
    });
  };
  REQUIRE(bulk_carries_fetches("warmup"));
  fetch_on_bulk("first.latent");
  CHECK(a.b->stats().bulk_secrets_refused == 0);

  // Two parties on B's address under B's name: one without a mechanism (what was enough
  // before), one with PLAIN and a guessed secret. Both refused; neither gets B's id.
  zmq::context_t ctx;
  auto impostor = [&](const char* password) {
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::routing_id, "B");
    if (password != nullptr) {
      s.set(zmq::sockopt::plain_username, "B");
      s.set(zmq::sockopt::plain_password, password);
    }
    s.connect(endpoint_of(bulk_a));
    const msg::latent_fetch req{77, sha, 0, 1u << 20};
    zmq::message_t m = fetch_frame("B", first_envelope_id(), req);
    (void)s.send(m, zmq::send_flags::dontwait);  // queued until a handshake that never ends
    return s;
  };
  zmq::socket_t null_peer = impostor(nullptr);
  zmq::socket_t guessing = impostor("0123456789abcdef0123456789abcdef");
  REQUIRE(eventually([&] { return a.b->stats().bulk_secrets_refused >= 2; }));
  CHECK(a.b->stats().bulk_refused >= 2);
  CHECK(a.b->stats().bulk_misuse == 0);  // no frame of theirs got in
  // The real B still has its routing id: its latents still come on the bulk channel.
  fetch_on_bulk("second.latent");
  zmq::message_t m;
  CHECK_FALSE(null_peer.recv(m, zmq::recv_flags::dontwait));
  CHECK_FALSE(guessing.recv(m, zmq::recv_flags::dontwait));

  // B restarts with a new secret: its new bulk connection waits for the heartbeat that
  // brings it, and is admitted.
  const uint64_t admitted = a.b->stats().bulk_admitted;
  const uint64_t refused = a.b->stats().bulk_secrets_refused;
  b.reset();
  ob.boot_id = 0;
  b = std::make_unique<node>(ob);
  REQUIRE(eventually([&] { return a.b->stats().bulk_admitted > admitted; }));
  REQUIRE(bulk_carries_fetches("rewarm"));
  fetch_on_bulk("third.latent");
  // The impostors keep retrying and are refused; the real B never was.
  CHECK(a.b->stats().bulk_secrets_refused >= refused);
}

TEST_CASE("an input uploaded to A in chunks is stored once, verified, and pulled by B",
          "[bus][transfer][inputs]") {
  const int port_a = free_port(), port_b = free_port();
  temp_dir dir_a, dir_b, cli;
  auto oa = options_for("A", port_a, {{"B", endpoint_of(port_b)}},
                        (dir_a.path / "latents").string(), false);
  oa.knobs.chunk_bytes = 64 * 1024;
  oa.input_dir = (dir_a.path / "inputs").string();
  auto ob = options_for("B", port_b, {{"A", endpoint_of(port_a)}},
                        (dir_b.path / "latents").string(), false);
  ob.knobs.chunk_bytes = oa.knobs.chunk_bytes;
  ob.input_dir = (dir_b.path / "inputs").string();
  node a(oa), b(ob);
  REQUIRE(b.rec.wait([&] { return b.rec.has_event("A", true); }));

  // 3.5 chunks of an "image", in a folder only the client sees.
  std::string image(oa.knobs.chunk_bytes * 7 / 2, '\0');
  std::mt19937_64 rng(5);
  for (auto& ch : image)
    ch = static_cast<char>(rng());
  const std::string sha = to_hex(sha256_of(image));
  const std::string path = (cli.path / "ref.png").string();
  files::write_atomic(path, image);

  client c(endpoint_of(port_a), oa.knobs);
  bool already = true;
  CHECK(upload_input(c, oa.knobs, path, sha, &already) == "");
  CHECK_FALSE(already);
  const std::string stored = oa.input_dir + "/" + sha;
  CHECK(sha256_file_hex(stored) == sha);
  auto names = [](const std::string& dir) {
    std::vector<std::string> v;
    for (auto& e : fs::directory_iterator(dir))
      v.push_back(e.path().filename().string());
    return v;
  };
  CHECK(names(oa.input_dir) == std::vector<std::string>{sha});  // no part file left
  const auto mtime = fs::last_write_time(stored);

  // Again: the node has it; nothing is sent or rewritten.
  CHECK(upload_input(c, oa.knobs, path, sha, &already) == "");
  CHECK(already);
  CHECK(fs::last_write_time(stored) == mtime);

  // Bytes that are not the digest named: refused at the end, nothing kept.
  const std::string other = to_hex(sha256_of("another image"));
  const auto why = upload_input(c, oa.knobs, path, other);
  CHECK(why.find("hash to") != std::string::npos);
  CHECK(names(oa.input_dir) == std::vector<std::string>{sha});
  // A file that is not there, and one over the limit, never leave the client.
  CHECK(upload_input(c, oa.knobs, (cli.path / "missing.png").string(), sha).find("cannot open") == 0);

  // B pulls it as an input (kind "input"), verified as a latent is; not as a latent.
  fs::create_directories(ob.input_dir);
  const std::string dest = ob.input_dir + "/" + sha;
  std::promise<fetch_result> p;
  auto f = p.get_future();
  b.b->fetch_latent("A", sha, image.size(), dest,
                    [&p](const fetch_result& r) { p.set_value(r); }, "input");
  REQUIRE(f.wait_for(generous) == std::future_status::ready);
  auto r = f.get();
  INFO(r.error);
  CHECK(r.outcome == fetch_outcome::ok);
  CHECK(sha256_file_hex(dest) == sha);
  const fetch_result as_latent = fetch(*b.b, "A", sha, image.size(), dest + ".latent");
  CHECK(as_latent.outcome == fetch_outcome::not_found);
}
