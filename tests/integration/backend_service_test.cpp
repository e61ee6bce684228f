// vidline start / stop: this machine's nodes in the background, idempotently; a batch
// runs on them; stop ends them and is idempotent too. And config-adapt: the reference
// hardware's host map gives the reference line's pools and modes.
#include <catch2/catch.hpp>

#include <fstream>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "config/config.hpp"
#include "nodes/verbs/commands.hpp"
#include "nodes/state/node_lock.hpp"
#include "nodes/verbs/service.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using testing_support::process;
using testing_support::temp_dir;
using nlohmann::json;

namespace {

struct result {
  int code;
  std::string out;     ///< stdout then stderr
  std::string stdout_; ///< stdout alone (the JSON, with --json)
};

result run(const temp_dir& dir, std::vector<std::string> args, double timeout = 60) {
  static int n = 0;
  args.insert(args.begin(), VIDLINE_BINARY);
  process p(args, dir.path() + "/cmd" + std::to_string(++n) + ".out");
  int code = p.wait(timeout);
  return {code, p.out() + p.err(), p.out()};
}

/// The JSON host entry of `host` in a start/stop --json result (null when absent).
json host_entry(const json& j, const std::string& host) {
  for (auto& h : j.at("hosts"))
    if (h.at("host") == host)
      return h;
  return nullptr;
}

/// Waits up to `seconds` for `pred`.
template <class Pred>
bool within(double seconds, Pred pred) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

/// A pid that belonged to a process now gone.
pid_t dead_pid() {
  pid_t p = ::fork();
  if (p == 0)
    ::_exit(0);
  int st = 0;
  ::waitpid(p, &st, 0);
  return p;
}

bool alive(pid_t pid) {
  std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  if (!std::getline(st, s))
    return false;
  auto close = s.rfind(')');
  return close != std::string::npos && close + 2 < s.size() && s[close + 2] != 'Z';
}

pid_t pid_in(const std::string& file) {
  std::ifstream in(file);
  long pid = 0;
  in >> pid;
  return static_cast<pid_t>(pid);
}

/// The reference example, on free ports, data under `dir`, fast sim clock.
std::string reference_config(const std::string& dir) {
  auto cfg = json::parse(testing_support::read_file(std::string(VIDLINE_SOURCE_DIR) + "/config/examples/reference.json"));
  auto ports = testing_support::free_ports(2);
  for (std::size_t i = 0; i < 2; ++i) {
    cfg["hosts"][i]["port"] = ports[i];
    cfg["hosts"][i]["data_dir"] = dir + "/" + cfg["hosts"][i]["name"].get<std::string>();
  }
  cfg["backends"]["sim"]["time_scale"] = 0.002;
  std::ofstream(dir + "/cluster.json") << cfg.dump(2);
  return dir + "/cluster.json";
}

} // namespace

TEST_CASE("start runs this machine's nodes in the background, idempotently, stop ends them") {
  temp_dir dir;
  auto config = reference_config(dir.path());
  ::setenv("VIDLINE_STATE_DIR", (dir.path() + "/state").c_str(), 1);

  auto s = run(dir, {"start", "--config", config, "--mode", "four_four_xtx_plus_one"});
  INFO(s.out);
  REQUIRE(s.code == 0);
  CHECK(s.out.find("host_a: started (pid") != std::string::npos);
  CHECK(s.out.find("host_b: started (pid") != std::string::npos);
  CHECK(s.out.find("host_b: in mode four_four_xtx_plus_one it runs pool xtx, decoder rtx3080ti") != std::string::npos);
  pid_t a = pid_in(dir.path() + "/host_a/run/node.pid");
  pid_t b = pid_in(dir.path() + "/host_b/run/node.pid");
  CHECK(alive(a));
  CHECK(alive(b));

  // Again: nothing new is started.
  auto again = run(dir, {"start", "--config", config});
  INFO(again.out);
  CHECK(again.code == 0);
  CHECK(again.out.find("host_a: already running (pid " + std::to_string(a) + ")") != std::string::npos);
  CHECK(pid_in(dir.path() + "/host_a/run/node.pid") == a);

  // The line works: a small batch through the started nodes.
  std::ofstream(dir.path() + "/prompt.txt") << "started in the background";
  auto batch = run(dir, {"run", "--config", config, "--mode", "four_four_xtx_plus_one", "--prompt-file",
                         dir.path() + "/prompt.txt", "--width", "416", "--height", "736", "--seconds", "5",
                         "--count", "3", "--seed", "1", "--json"},
                   120);
  INFO(batch.out);
  CHECK(batch.code == 0);

  // stop uses the remembered config; the nodes end cleanly; stop again says so.
  auto stop = run(dir, {"stop"});
  INFO(stop.out);
  CHECK(stop.code == 0);
  CHECK(stop.out.find("host_a: stopped (pid " + std::to_string(a) + ")") != std::string::npos);
  CHECK(!alive(a));
  CHECK(!alive(b));
  CHECK(!std::filesystem::exists(dir.path() + "/host_a/run/node.pid"));
  auto stop2 = run(dir, {"stop", "--config", config});
  CHECK(stop2.code == 0);
  CHECK(stop2.out.find("host_a: not running") != std::string::npos);
}

TEST_CASE("start reports a node that cannot come up, with its log, leaves a foreign node alone") {
  temp_dir dir;
  auto config = reference_config(dir.path());
  auto c = config::load(config);
  {
    // Another program holds host_b's port: the node cannot bind and exits.
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(c.find_host("host_b")->port));
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    ::listen(fd, 4);
    auto s = run(dir, {"start", "--config", config, "--host", "host_b", "--timeout", "10"});
    ::close(fd);
    INFO(s.out);
    CHECK(s.code == 4);
    CHECK(s.out.find("host_b: the node exited at once; the end of " + dir.path() + "/host_b/logs/node.out") != std::string::npos);
    CHECK(s.out.find("Address already in use") != std::string::npos);
    CHECK(!std::filesystem::exists(dir.path() + "/host_b/run/node.pid"));
  }
  // A node started by hand answers there already: start leaves it alone.
  process by_hand({VIDLINE_BINARY, "node", "--config", config, "--host", "host_b"}, dir.path() + "/by_hand.out");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!nodes::verbs::node_answers(c, *c.find_host("host_b"), 0.5))
    REQUIRE(std::chrono::steady_clock::now() < deadline);
  auto s = run(dir, {"start", "--config", config, "--host", "host_b", "--timeout", "10"});
  INFO(s.out);
  CHECK(s.code == 0);
  CHECK(s.out.find("host_b: a vidline node not started by 'vidline start' already runs on " + dir.path() +
                   "/host_b (pid " + std::to_string(by_hand.pid()) + " holds") != std::string::npos);
  CHECK(by_hand.running());
  by_hand.signal(SIGTERM);
  CHECK(by_hand.wait(20) == 0);
}

TEST_CASE("stop with a copy of the config at another path stops the nodes") {
  temp_dir dir;
  auto config = reference_config(dir.path());
  ::setenv("VIDLINE_STATE_DIR", (dir.path() + "/state").c_str(), 1);
  auto s = run(dir, {"start", "--config", config, "--mode", "auto", "--json"});
  INFO(s.out);
  REQUIRE(s.code == 0);
  json started = json::parse(s.stdout_);
  CHECK(started["ok"] == true);
  CHECK(started["exit_code"] == 0);
  CHECK(host_entry(started, "host_a")["action"] == "started");
  pid_t a = host_entry(started, "host_a")["pid"].get<pid_t>();
  pid_t b = host_entry(started, "host_b")["pid"].get<pid_t>();
  CHECK(host_entry(started, "host_b")["token"].get<std::string>().size() == 32);
  // --mode auto as run takes it: every pool and decoder.
  CHECK(s.out.find("host_b: in mode auto it runs pool xtx, decoder rtx3080ti") != std::string::npos);
  CHECK(alive(a));
  CHECK(alive(b));

  // An identical copy of the config at another path.
  std::string copy = dir.path() + "/copy.json";
  std::filesystem::copy_file(config, copy);
  auto again = run(dir, {"start", "--config", copy});
  INFO(again.out);
  CHECK(again.code == 0);
  CHECK(again.out.find("host_a: already running (pid " + std::to_string(a) + ")") != std::string::npos);

  auto stop = run(dir, {"stop", "--config", copy, "--json"});
  INFO(stop.out);
  CHECK(stop.code == 0);
  json stopped = json::parse(stop.stdout_);
  CHECK(stopped["ok"] == true);
  CHECK(host_entry(stopped, "host_a")["action"] == "stopped");
  CHECK(host_entry(stopped, "host_a")["pid"] == a);
  CHECK(host_entry(stopped, "host_b")["pid"] == b);
  CHECK(stop.out.find("host_a: stopped (pid " + std::to_string(a) + ")") != std::string::npos);
  CHECK(!alive(a));
  CHECK(!alive(b));
  CHECK(!std::filesystem::exists(dir.path() + "/host_a/run/node.pid"));
  auto stop2 = run(dir, {"stop", "--config", config});
  CHECK(stop2.code == 0);
  CHECK(stop2.out.find("host_a: not running") != std::string::npos);
}

TEST_CASE("a stale pid file is cleaned with a message, a data directory another node holds is refused") {
  temp_dir dir;
  auto config = reference_config(dir.path());
  ::setenv("VIDLINE_STATE_DIR", (dir.path() + "/state").c_str(), 1);
  std::string pid_file = dir.path() + "/host_b/run/node.pid";
  std::filesystem::create_directories(dir.path() + "/host_b/run");

  // stop: a pid file whose node is gone (no lock holder).
  pid_t gone = dead_pid();
  std::ofstream(pid_file) << gone << "\n";
  auto stop = run(dir, {"stop", "--config", config, "--host", "host_b"});
  INFO(stop.out);
  CHECK(stop.code == 0);
  CHECK(stop.out.find("host_b: not running") != std::string::npos);
  CHECK(stop.out.find("host_b: stale pid file " + pid_file + " removed (pid " + std::to_string(gone)) != std::string::npos);
  CHECK(!std::filesystem::exists(pid_file));

  // start: the same, then it starts.
  std::ofstream(pid_file) << gone << "\n";
  auto start = run(dir, {"start", "--config", config, "--host", "host_b", "--json"});
  INFO(start.out);
  CHECK(start.code == 0);
  CHECK(start.out.find("host_b: stale pid file " + pid_file + " removed") != std::string::npos);
  json j = json::parse(start.stdout_);
  CHECK(host_entry(j, "host_b")["action"] == "started");
  CHECK(host_entry(j, "host_b")["notes"].size() == 1);
  pid_t b = pid_in(pid_file);
  CHECK(b != gone);
  REQUIRE(run(dir, {"stop", "--config", config, "--host", "host_b"}).code == 0);
  CHECK(!alive(b));

  // A node of another config (other ports: another digest) on host_b's data directory.
  json other = json::parse(testing_support::read_file(config));
  auto ports = testing_support::free_ports(2);
  other["hosts"][0]["port"] = ports[0];
  other["hosts"][1]["port"] = ports[1];
  std::ofstream(dir.path() + "/other.json") << other.dump(2);
  process foreign({VIDLINE_BINARY, "node", "--config", dir.path() + "/other.json", "--host", "host_b"},
                  dir.path() + "/foreign.out");
  REQUIRE(within(20, [&] {
    auto h = nodes::state::node_lock_holder(dir.path() + "/host_b", 0);
    return h && h->pid == foreign.pid();
  }));
  auto refused = run(dir, {"start", "--config", config, "--host", "host_b", "--json"});
  INFO(refused.out);
  CHECK(refused.code == 4);
  CHECK(refused.out.find("host_b: not started: its data directory " + dir.path() +
                         "/host_b is in use by another vidline node (pid " + std::to_string(foreign.pid())) !=
        std::string::npos);
  json rj = json::parse(refused.stdout_);
  CHECK(rj["ok"] == false);
  CHECK(rj["exit_code"] == 4);
  CHECK(host_entry(rj, "host_b")["action"] == "refused");
  CHECK(host_entry(rj, "host_b")["pid"] == foreign.pid());
  CHECK(!std::filesystem::exists(pid_file));
  // A second node on that data directory refuses itself too, naming the holder.
  auto second = run(dir, {"node", "--config", config, "--host", "host_b"}, 30);
  CHECK(second.code == 4);
  CHECK(second.out.find("is in use by another vidline node (pid " + std::to_string(foreign.pid())) != std::string::npos);
  CHECK(foreign.running());
  // stop stops the lock's holder, whichever config started it.
  auto s2 = run(dir, {"stop", "--config", config, "--host", "host_b"});
  INFO(s2.out);
  CHECK(s2.code == 0);
  CHECK(s2.out.find("host_b: stopped (pid " + std::to_string(foreign.pid()) + ") (it was not started by 'vidline start')") != std::string::npos);
  CHECK(foreign.wait(20) == 0);
}

TEST_CASE("config-adapt: the reference hardware gives the reference line") {
  temp_dir dir;
  json map = json::parse(R"({
    "cluster": "adapted",
    "plaintext": true,
    "hosts": [
      {"name": "host_a", "address": "127.0.0.1", "port": 7601, "data_dir": "data/host_a",
       "gpus": [{"model": "Tesla T10", "vendor": "nvidia", "memory_gib": 16, "count": 8}]},
      {"name": "host_b", "address": "127.0.0.1", "port": 7602,
       "gpus": [{"model": "RTX 3080 Ti", "vendor": "nvidia", "memory_gib": 12, "decoder": true},
                {"model": "RX 7900 XTX", "vendor": "amd", "memory_gib": 24, "name": "xtx"}]}
    ]})");
  std::ofstream(dir.path() + "/map.json") << map.dump(2);
  auto r = run(dir, {"config-adapt", "--host-map", dir.path() + "/map.json", "--out", dir.path() + "/out/cluster.json"});
  INFO(r.out);
  REQUIRE(r.code == 0);
  auto c = config::load(dir.path() + "/out/cluster.json");
  std::set<std::string> modes, pools;
  for (auto& m : c.modes)
    modes.insert(m.name);
  for (auto& p : c.pools)
    pools.insert(p.name + ":" + p.profile_key + ":" + std::to_string(p.gpus.size()));
  CHECK(modes == std::set<std::string>{"single_eight_plus_one", "four_four_plus_one", "four_four_xtx_plus_one",
                                       "eight_xtx_plus_one"});
  CHECK(pools == std::set<std::string>{"eight:t10x8:8", "four_a:t10x4:4", "four_b:t10x4:4",
                                       "xtx:rx7900xtx:1"});
  REQUIRE(c.decoders.size() == 1);
  CHECK(c.decoders[0].host == "host_b");
  CHECK(c.decoders[0].gpu == "rtx3080ti");
  CHECK(c.decoders[0].profile_key == "rtx3080ti");
  REQUIRE(c.encoders.size() == 2);
  CHECK(c.find_encoder_of_host("host_a")->profile_key == "t10x4");
  CHECK(c.find_encoder_of_host("host_b")->profile_key == "rx7900xtx");
  // Devices as the runtimes number them: per vendor, from 0.
  auto* b = c.find_host("host_b");
  CHECK(b->find_gpu("rtx3080ti")->index == 0);
  CHECK(b->find_gpu("xtx")->index == 0);
  CHECK(c.find_host("host_a")->find_gpu("t10-7")->index == 7);
  CHECK(c.hosts[0].data_dir == dir.path() + "/out/data/host_a");
  // The same pools, GPUs and modes as the hand-written reference example.
  auto ref = config::load(std::string(VIDLINE_SOURCE_DIR) + "/config/examples/reference.json");
  for (auto& m : ref.modes) {
    auto* mine = c.find_mode(m.name);
    REQUIRE(mine != nullptr);
    CHECK(std::set<std::string>(mine->pools.begin(), mine->pools.end()) ==
          std::set<std::string>(m.pools.begin(), m.pools.end()));
  }
  for (auto& p : ref.pools) {
    CHECK(c.find_pool(p.name)->gpus.size() == p.gpus.size());
    CHECK(c.find_pool(p.name)->profile_key == p.profile_key);  // one name per card kind
  }

  // A host map with a typo: exit 2, the field named.
  map["hosts"][0]["gpus"][0]["cuont"] = 8;
  std::ofstream(dir.path() + "/bad.json") << map.dump(2);
  auto bad = run(dir, {"config-adapt", "--host-map", dir.path() + "/bad.json", "--out", dir.path() + "/bad_out.json"});
  CHECK(bad.code == 2);
  CHECK(bad.out.find("/hosts/0/gpus/0/cuont: unknown key 'cuont' (did you mean 'count'?)") != std::string::npos);
  CHECK(!std::filesystem::exists(dir.path() + "/bad_out.json"));
}
