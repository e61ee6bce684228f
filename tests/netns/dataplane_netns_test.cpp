// The data plane between two real hosts: node processes in two network namespaces joined
// by a veth pair (tests/support/netns.hpp), faults injected on the link, the processes
// and the files. After each: every job's output matches the sim contract (or, where the
// fault is meant to exhaust the retries, the job failed with the reason and nothing was
// decoded), nothing was decoded twice, no latent was lost. Tagged [netns], ctest label
// `netns`; root only (CI runs as root), skipped with a warning otherwise.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <regex>

#include "common/sha256.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/netns.hpp"

using namespace testing_support;
using vidline::nodes::verbs::coordinator_client;
namespace fs = std::filesystem;

namespace {

/// The reference example on the pair: host_a (coordinator, the pools of mode
/// four_four_plus_one) in namespace A, host_b (the decoder) in B, fast liveness knobs.
std::string write_pair_config(const std::string& dir, double time_scale, json knobs,
                              bool bulk = false) {
  auto cfg = json::parse(read_file(std::string(VIDLINE_SOURCE_DIR) + "/config/examples/reference.json"));
  cfg["hosts"][0]["address"] = netns_pair::address_a();
  cfg["hosts"][1]["address"] = netns_pair::address_b();
  for (std::size_t i = 0; i < 2; ++i) {
    cfg["hosts"][i]["data_dir"] = dir + "/" + cfg["hosts"][i]["name"].get<std::string>();
    if (bulk)  // the namespaces are fresh: any port is free there
      cfg["hosts"][i]["bulk_port"] = 7701 + static_cast<int>(i);
  }
  cfg["backends"]["sim"]["time_scale"] = time_scale;
  // Heartbeats share the TCP stream with chunks: on a shaped link a full window (2 x 1 MiB
  // at 40 Mbit/s: 0.4 s) delays them, so a peer is declared down only after 2 s of silence.
  json k = {{"heartbeat_interval_ms", 200}, {"heartbeat_misses", 10}, {"status_interval_ms", 200},
            {"order_resend_ms", 1000},       {"transfer_timeout_ms", 1000},
            {"reconnect_max_ms", 300},       {"part_sync_bytes", 1 << 20},
            {"chunk_window", 2}};
  for (auto& [key, v] : knobs.items())
    k[key] = v;
  cfg["knobs"] = k;
  add_keys(cfg, dir);  // not loopback: CURVE, as a real line runs
  auto path = dir + "/cluster.json";
  std::ofstream(path) << cfg.dump(2);
  return path;
}

/// Two hosts in their namespaces, their nodes, and a client in A.
struct two_hosts {
  temp_dir dir{"vl-netns"};
  netns_pair net;
  std::string config;
  std::unique_ptr<process> a, b;
  int starts_a = 0, starts_b = 0;

  explicit two_hosts(double time_scale, json knobs = json::object(), bool bulk = false)
      : config(write_pair_config(dir.path(), time_scale, std::move(knobs), bulk)) {}

  std::string data(const std::string& host) const { return dir.path() + "/" + host; }

  std::unique_ptr<process> start(const std::string& ns, const std::string& host, int& n) {
    return std::make_unique<process>(
        netns_pair::exec_in(ns, {VIDLINE_BINARY, "node", "--config", config, "--host", host}),
        dir.path() + "/" + host + "." + std::to_string(n++) + ".out");
  }
  void start_a() { a = start(net.a(), "host_a", starts_a); }
  void start_b() { b = start(net.b(), "host_b", starts_b); }

  ~two_hosts() {
    for (auto* p : {a.get(), b.get()})
      if (p != nullptr)
        p->signal(SIGKILL);
  }
};

/// A process's peak resident memory (VmHWM), in KiB; 0 when unreadable.
long vm_hwm_kib(pid_t pid) {
  const std::string status = read_file("/proc/" + std::to_string(pid) + "/status");
  static const std::regex re(R"(VmHWM:\s+(\d+) kB)");
  std::smatch m;
  return std::regex_search(status, m, re) ? std::stol(m[1]) : 0;
}

vidline::msg::submit_run batch(uint32_t count, const std::string& id, uint32_t seconds = 5) {
  vidline::msg::submit_run r;
  r.mode = "four_four_plus_one";
  r.prompt = "data plane test prompt";
  r.width = 416;
  r.height = 736;
  r.seconds = seconds;
  r.count = count;
  r.seed = 424242424242ull;
  r.request_id = id;
  return r;
}

/// Polls `pred` until it holds or `seconds` pass.
template <class Pred>
bool wait_for(double seconds, Pred pred) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling files
  }
  return pred();
}

/// Bytes of the largest `*.latent.part` in a latent directory.
uint64_t part_bytes(const std::string& latents) {
  uint64_t most = 0;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(latents, ec)) {
    const auto name = e.path().filename().string();
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".part") == 0)
      most = std::max<uint64_t>(most, e.file_size(ec));
  }
  return most;
}

/// Bytes of every `*.latent` in a latent directory.
uint64_t latent_bytes(const std::string& latents) {
  uint64_t n = 0;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(latents, ec)) {
    const auto name = e.path().filename().string();
    if (name.size() > 7 && name.compare(name.size() - 7, 7, ".latent") == 0)
      n += e.file_size(ec);
  }
  return n;
}

/// The offsets a host's log says its fetches resumed at.
std::vector<uint64_t> resumed_at(const std::string& data_dir) {
  std::vector<uint64_t> out;
  const std::string log = read_file(data_dir + "/logs/node.log");
  static const std::regex re("resumes at ([0-9]+) of");
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end; ++it)
    out.push_back(std::stoull((*it)[1]));
  return out;
}

/// Waits for the run to end; checks the contract, that nothing was decoded twice or sampled
/// twice (no latent lost), and that the sampling host's latents were removed once decoded.
json finish_and_check(two_hosts& h, coordinator_client& cl, const std::string& run_id,
                      uint32_t count, double seconds = 120) {
  auto st = wait_status(cl, run_id, seconds, [](const json& s) { return s["state"] != "running"; });
  INFO(st.dump(2));
  REQUIRE(st["state"] == "succeeded");
  for (auto& j : st["jobs"])
    CHECK(contract_problem(j) == "");
  auto sampled = ledger_counts({h.data("host_a"), h.data("host_b")}, run_id, "sampled");
  auto decoded = ledger_counts({h.data("host_a"), h.data("host_b")}, run_id, "decoded");
  for (uint32_t i = 0; i < count; ++i) {
    INFO("job " << i);
    CHECK(decoded[static_cast<int>(i)] == 1);
    // Never sampled again: no latent was lost. (0 is possible: host_a killed between a
    // latent's commit and its ledger line, the latent then adopted from its .job note
    // without a new order; the ledger misses that line, the work was done once.)
    CHECK(sampled[static_cast<int>(i)] <= 1);
  }
  // Acknowledged (decoded) latents leave both hosts (latent_retention_s 0).
  CHECK(wait_for(10, [&] {
    return latent_bytes(h.data("host_a") + "/latents") == 0 &&
           latent_bytes(h.data("host_b") + "/latents") == 0;
  }));
  return st;
}

#define NETNS_OR_SKIP()                                                                     \
  if (!netns_available()) {                                                                 \
    WARN("skipped: needs root, ip netns and nft");                                         \
    return;                                                                                 \
  }

} // namespace

TEST_CASE("a link cut mid-transfer and restored: the fetch resumes from its durable part",
          "[netns]") {
  NETNS_OR_SKIP();
  two_hosts h(0.01);
  h.net.shape_a_to_b("40mbit");  // a 13 MB latent takes ~2.6 s: time to cut it half-way
  h.start_a();
  h.start_b();
  netns_pair::entered in_a(h.net.a());
  coordinator_client cl(vidline::config::load(h.config));
  REQUIRE(coordinator_answers(cl, 30));
  auto run_id = cl.submit(batch(1, "netns-link-cut"));
  REQUIRE(wait_for(60, [&] { return part_bytes(h.data("host_b") + "/latents") >= (4u << 20); }));
  h.net.cut_link();
  // Held past transfer_timeout_ms and the heartbeat timeout: the receiver gives it up.
  std::this_thread::sleep_for(std::chrono::seconds(3));  // the length of the cut itself
  h.net.restore_link();
  finish_and_check(h, cl, run_id, 1);
  auto resumed = resumed_at(h.data("host_b"));
  REQUIRE_FALSE(resumed.empty());
  CHECK(resumed.front() >= (3u << 20));  // not from zero
}

TEST_CASE("the receiver killed -9 mid-transfer, then restarted: the fetch resumes", "[netns]") {
  NETNS_OR_SKIP();
  two_hosts h(0.01);
  h.net.shape_a_to_b("40mbit");
  h.start_a();
  h.start_b();
  netns_pair::entered in_a(h.net.a());
  coordinator_client cl(vidline::config::load(h.config));
  REQUIRE(coordinator_answers(cl, 30));
  auto run_id = cl.submit(batch(1, "netns-receiver-kill"));
  REQUIRE(wait_for(60, [&] { return part_bytes(h.data("host_b") + "/latents") >= (4u << 20); }));
  h.b->signal(SIGKILL);
  REQUIRE(h.b->wait(10) == 128 + SIGKILL);
  h.start_b();
  finish_and_check(h, cl, run_id, 1);
  auto resumed = resumed_at(h.data("host_b"));
  REQUIRE_FALSE(resumed.empty());
  CHECK(resumed.front() >= (3u << 20));  // its last fsync (every 1 MiB), not zero
}

TEST_CASE("the sender killed -9 with latents not yet acknowledged, then restarted: none is "
          "lost or made again", "[netns]") {
  NETNS_OR_SKIP();
  two_hosts h(0.01);
  h.net.shape_a_to_b("100mbit");  // latents pile up on host_a behind the slow link
  h.start_a();
  h.start_b();
  {
    netns_pair::entered in_a(h.net.a());
    coordinator_client cl(vidline::config::load(h.config));
    REQUIRE(coordinator_answers(cl, 30));
    auto run_id = cl.submit(batch(4, "netns-sender-kill"));
    // At least two latents on host_a that host_b has not decoded yet.
    REQUIRE(wait_for(60, [&] {
      return latent_bytes(h.data("host_a") + "/latents") >= 2 * 13000000ull;
    }));
    h.a->signal(SIGKILL);
    REQUIRE(h.a->wait(10) == 128 + SIGKILL);
    h.start_a();
    REQUIRE(coordinator_answers(cl, 30));
    finish_and_check(h, cl, run_id, 4);
  }
}

TEST_CASE("chunks damaged in transit are caught and fetched again or fail the job with the "
          "reason and are never decoded", "[netns]") {
  NETNS_OR_SKIP();
  SECTION("every 30th chunk damaged: each job ends well") {
    // 3 latents of 13 chunks: the 30th chunk served is damaged for certain; a transfer
    // meets a damaged chunk with p = 13/30, so 10 tries make a failure (p^10) negligible.
    // (A corrupt handoff spends a decode attempt too: max_attempts rises with it.)
    two_hosts h(0.01, json{{"handoff_retries", 10}, {"max_attempts", 10}});
    ::setenv("VIDLINE_CORRUPT_EVERY_NTH_CHUNK", "30", 1);
    h.start_a();
    ::unsetenv("VIDLINE_CORRUPT_EVERY_NTH_CHUNK");
    h.start_b();
    netns_pair::entered in_a(h.net.a());
    coordinator_client cl(vidline::config::load(h.config));
    REQUIRE(coordinator_answers(cl, 30));
    auto run_id = cl.submit(batch(3, "netns-corrupt-some"));
    finish_and_check(h, cl, run_id, 3);
    // Some transfer was refused and fetched again (the coordinator logs why).
    CHECK(read_file(h.data("host_a") + "/logs/node.log").find("sha256 mismatch") != std::string::npos);
  }
  SECTION("every 4th chunk damaged: the job fails after handoff_retries, nothing decoded") {
    two_hosts h(0.01, json{{"handoff_retries", 2}});
    ::setenv("VIDLINE_CORRUPT_EVERY_NTH_CHUNK", "4", 1);
    h.start_a();
    ::unsetenv("VIDLINE_CORRUPT_EVERY_NTH_CHUNK");
    h.start_b();
    netns_pair::entered in_a(h.net.a());
    coordinator_client cl(vidline::config::load(h.config));
    REQUIRE(coordinator_answers(cl, 30));
    auto run_id = cl.submit(batch(1, "netns-corrupt-all"));
    auto st = wait_status(cl, run_id, 60, [](const json& s) { return s["state"] != "running"; });
    INFO(st.dump(2));
    REQUIRE(st["state"] == "failed");
    CHECK(st["jobs"][0]["error"].get<std::string>().find("failed verification 2 times") !=
          std::string::npos);
    CHECK(ledger_counts({h.data("host_a"), h.data("host_b")}, run_id, "decoded").empty());
    CHECK(latent_bytes(h.data("host_b") + "/latents") == 0);  // no unverified latent kept
  }
}

TEST_CASE("a latent corrupted at rest on the decoding host is quarantined and fetched again",
          "[netns]") {
  NETNS_OR_SKIP();
  two_hosts h(0.01);
  // Job 0's latent is deterministic: put a damaged copy where the decoder will find it.
  auto req = batch(1, "netns-at-rest");
  const uint64_t bytes = contract::reference_latent_bytes(req.width, req.height, req.seconds);
  contract::shot_ident id;  // a uniform batch: the sim backend's default workflow
  id.prompt = req.prompt;
  id.model = "sim";
  const std::string sha =
      contract::latent_sha256(req.seed, req.width, req.height, req.seconds, bytes, contract::ident(id));
  const std::string bad = h.data("host_b") + "/latents/" + sha + ".latent";
  fs::create_directories(h.data("host_b") + "/latents");
  std::ofstream(bad) << std::string(bytes, 'x');
  h.start_a();
  h.start_b();
  netns_pair::entered in_a(h.net.a());
  coordinator_client cl(vidline::config::load(h.config));
  REQUIRE(coordinator_answers(cl, 30));
  auto run_id = cl.submit(req);
  finish_and_check(h, cl, run_id, 1);
  CHECK(fs::exists(bad + ".quarantined"));
}

TEST_CASE("1% packet loss both ways: every latent arrives whole", "[netns]") {
  NETNS_OR_SKIP();
  two_hosts h(0.01);
  h.net.lose_packets(10);
  h.start_a();
  h.start_b();
  netns_pair::entered in_a(h.net.a());
  coordinator_client cl(vidline::config::load(h.config));
  REQUIRE(coordinator_answers(cl, 30));
  auto run_id = cl.submit(batch(3, "netns-loss"));
  finish_and_check(h, cl, run_id, 3);
}

TEST_CASE("the sampling host's latent budget is reached: its pools stop, then resume as it "
          "drains", "[netns]") {
  NETNS_OR_SKIP();
  const uint64_t latent = 13000000;
  two_hosts h(0.005, json{{"latent_budget_bytes", 2 * latent}});
  h.net.shape_a_to_b("100mbit");  // ~1 s per latent: the decoder side drains slowly
  h.start_a();
  h.start_b();
  netns_pair::entered in_a(h.net.a());
  coordinator_client cl(vidline::config::load(h.config));
  REQUIRE(coordinator_answers(cl, 30));
  auto run_id = cl.submit(batch(6, "netns-budget"));
  uint64_t most = 0;
  wait_for(120, [&] {
    most = std::max(most, latent_bytes(h.data("host_a") + "/latents"));
    try {
      auto st = cl.status(run_id, 1000);
      return st && (*st)["state"] != "running";
    } catch (const std::exception&) {
      return false;
    }
  });
  finish_and_check(h, cl, run_id, 6);
  const std::string log = read_file(h.data("host_a") + "/logs/node.log");
  CHECK(log.find("at the latent budget") != std::string::npos);
  CHECK(log.find("below the latent budget") != std::string::npos);
  // Bounded: the budget plus at most one latent per pool of mode four_four_plus_one,
  // sampled while the report that stops it was on its way, and the samplers' checkpoints
  // held in the same store until their jobs' latents are made (the sim's are text files
  // of under 256 bytes; a few per sampling job at most).
  const uint64_t checkpoints = 16 * 256;
  CHECK(most <= 2 * latent + 2 * latent + checkpoints);
}

TEST_CASE("large latents (736x1280, 10 s: 80 MB) cross the bulk channel in bounded memory",
          "[netns]") {
  NETNS_OR_SKIP();
  two_hosts h(0.005, json::object(), /*bulk=*/true);
  h.start_a();
  h.start_b();
  netns_pair::entered in_a(h.net.a());
  coordinator_client cl(vidline::config::load(h.config));
  REQUIRE(coordinator_answers(cl, 30));
  // Idle peaks, taken once both nodes are up and have talked.
  const long idle_a = vm_hwm_kib(h.a->pid()), idle_b = vm_hwm_kib(h.b->pid());
  REQUIRE(idle_a > 0);
  REQUIRE(idle_b > 0);
  auto req = batch(2, "netns-large");
  req.mode = "single_eight_plus_one";  // the only pool of the reference that holds the size
  req.width = 736;
  req.height = 1280;
  req.seconds = 10;
  const uint64_t bytes = contract::reference_latent_bytes(req.width, req.height, req.seconds);
  REQUIRE(bytes > 75'000'000);
  auto run_id = cl.submit(req);
  finish_and_check(h, cl, run_id, 2);
  // Neither end held a latent in memory: the window is 2 x 1 MiB; 40 MiB of slack for
  // everything else a node does in a run is still half a latent.
  const long peak_a = vm_hwm_kib(h.a->pid()), peak_b = vm_hwm_kib(h.b->pid());
  INFO("host_a VmHWM " << idle_a << " -> " << peak_a << " KiB, host_b " << idle_b << " -> "
                       << peak_b << " KiB, latent " << bytes / 1024 << " KiB");
  std::printf("large latents: host_a VmHWM %ld -> %ld KiB, host_b %ld -> %ld KiB, latent %llu "
              "KiB\n", idle_a, peak_a, idle_b, peak_b, static_cast<unsigned long long>(bytes / 1024));
  CHECK(peak_a - idle_a < 40 * 1024);
  CHECK(peak_b - idle_b < 40 * 1024);
  // The latents went on the bulk channel: the source says so when it stops.
  h.a->signal(SIGTERM);
  CHECK(h.a->wait(20) == 0);
  static const std::regex served(R"(bulk channel totals: \d+ connections admitted, \d+ refused, )"
                                 R"(\d+ frames refused, (\d+) chunks served on it)");
  const std::string log = read_file(h.data("host_a") + "/logs/node.log");
  std::smatch m;
  REQUIRE(std::regex_search(log, m, served));
  CHECK(std::stoull(m[1]) >= 2 * (bytes >> 20));
}

TEST_CASE("a reference image crosses the link by digest: uploaded to host_a, pulled by host_b "
          "over CURVE, verified", "[netns]") {
  NETNS_OR_SKIP();
  two_hosts h(0.005);
  h.net.lose_packets(10);  // 1% both ways: the pull still arrives whole
  h.start_a();
  h.start_b();
  netns_pair::entered in_a(h.net.a());
  coordinator_client cl(vidline::config::load(h.config));
  REQUIRE(coordinator_answers(cl, 30));
  // 3.5 MiB: several chunks each way; in a folder no node reads.
  std::string image((7u << 20) / 2, '\0');
  for (std::size_t i = 0; i < image.size(); ++i)
    image[i] = static_cast<char>((i * 2654435761u) >> 13);
  const std::string sha = vidline::to_hex(vidline::sha256_of(image));
  const std::string path = h.dir.path() + "/cli-only/ref.png";
  fs::create_directories(h.dir.path() + "/cli-only");
  std::ofstream(path, std::ios::binary) << image;
  bool already = true;
  REQUIRE(cl.upload_input(path, sha, &already) == "");
  CHECK_FALSE(already);
  fs::remove_all(h.dir.path() + "/cli-only");

  vidline::msg::submit_run req;
  req.mode = "four_four_xtx_plus_one";
  req.request_id = "netns-input";
  vidline::msg::shot s;
  s.prompt = "a shot with a reference";
  s.width = 736;  // only xtx (host_b) holds it in this mode
  s.height = 1280;
  s.seconds = 10;
  s.seed = 77;
  s.reference_sha256 = sha;
  req.shots = {s};
  auto run_id = cl.submit(req);
  auto st = finish_and_check(h, cl, run_id, 1);
  CHECK(st["jobs"][0]["pool"] == "xtx");
  CHECK(st["jobs"][0]["reference_sha256"] == sha);
  CHECK(vidline::sha256_file_hex(h.data("host_b") + "/inputs/" + sha) == sha);
  CHECK(read_file(h.data("host_b") + "/logs/node.log").find("input " + sha + ": pulled from host_a") !=
        std::string::npos);
}
