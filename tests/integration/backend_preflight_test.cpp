// vidline preflight against real nodes: all ok on a healthy line; a wrong port, a full
// disk and a long socket path each caught with a clear line and a fix; exit 1 on failure.
// Also: a comfyui backend checked against the test server (reachable, node classes).
#include <catch2/catch.hpp>

#include <algorithm>

#include <sys/mount.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include "config/config.hpp"
#include "nodes/verbs/commands.hpp"
#include "tests/support/comfyui_server.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using testing_support::process;
using testing_support::temp_dir;
using nlohmann::json;
using testing_support::start_node;

namespace {

const std::string programs = std::string(VIDLINE_SOURCE_DIR) + "/tests/support/programs/";

json cpu(const std::string& id, int index) {
  return {{"id", id}, {"model", "Test CPU"}, {"vendor", "cpu"}, {"memory_gib", 8}, {"index", index}};
}

/// Two loopback hosts, exec backend (the sim programs), CPU "GPUs" (no GPU tool needed).
json base_config(const std::string& dir) {
  auto ports = testing_support::free_ports(2);
  json exec = {{"type", "exec"},
               {"options",
                {{"sample", {{"argv", {programs + "sim_latent.sh", "{seed}", "{width}", "{height}", "{seconds}", "{output}"}}}},
                 {"decode", {{"argv", {programs + "sim_video.sh", "{latent}", "{latent_sha256}", "{seed}",
                                       "{width}", "{height}", "{seconds}", "{output}"}}}}}}};
  json cfg = {{"cluster", "preflight_line"},
          {"coordinator", "alpha"},
          {"hosts",
           {{{"name", "alpha"}, {"address", "127.0.0.1"}, {"port", ports[0]}, {"data_dir", dir + "/alpha"},
             {"gpus", {cpu("c0", 0), cpu("c1", 1)}}},
            {{"name", "beta"}, {"address", "127.0.0.1"}, {"port", ports[1]}, {"data_dir", dir + "/beta"},
             {"gpus", {cpu("c0", 0)}}}}},
          {"backends", {{"programs", exec}}},
          {"pools", {{{"name", "p"}, {"host", "alpha"}, {"gpus", {"c0", "c1"}}, {"backend", "programs"}, {"profile", "cpux2"}}}},
          {"decoders", {{{"name", "d"}, {"host", "beta"}, {"gpu", "c0"}, {"backend", "programs"}, {"profile", "cpu"}}}},
          {"encoders", {{{"name", "e"}, {"host", "alpha"}, {"gpus", {"c0"}}, {"backend", "programs"}, {"profile", "cpu"}}}},
          {"modes", {{"m", {{"pools", {"p"}}, {"decoders", {"d"}}}}}},
          {"knobs", {{"heartbeat_interval_ms", 300}}}};
  testing_support::add_keys(cfg, dir);
  return cfg;
}

std::string write(const std::string& path, const json& cfg) {
  std::ofstream(path) << cfg.dump(2);
  return path;
}

struct result {
  int code;
  std::string out;
};

result preflight(const temp_dir& dir, const std::string& config, std::vector<std::string> extra = {}) {
  std::vector<std::string> args{VIDLINE_BINARY, "preflight", "--config", config, "--mode", "m", "--timeout", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  static int n = 0;
  process p(args, dir.path() + "/preflight" + std::to_string(++n) + ".out");
  int code = p.wait(60);
  return {code, p.out() + p.err()};
}

/// The report's line for a check ("" when there is none).
std::string line_of(const std::string& report, const std::string& tag_and_name) {
  std::istringstream in(report);
  for (std::string l; std::getline(in, l);)
    if (l.rfind(tag_and_name, 0) == 0)
      return l;
  return "";
}

bool coordinator_answers(const std::string& config, double seconds) {
  auto c = config::load(config);
  nodes::verbs::coordinator_client cl(c);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      if (cl.status("", 500))
        return true;
    } catch (const std::exception&) {
      return true;
    }
  }
  return false;
}

/// A plain TCP listener on a free loopback port: "another program" holding a port.
struct squatter {
  int fd = -1, port = 0;
  squatter() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd, 4);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~squatter() { ::close(fd); }
};

} // namespace

TEST_CASE("preflight: a healthy line passes, one line per check") {
  temp_dir dir;
  auto config = write(dir.path() + "/cluster.json", base_config(dir.path()));
  auto before = preflight(dir, config, {"--before-start"});
  INFO(before.out);
  CHECK(before.code == 0);
  CHECK(line_of(before.out, "ok    port alpha").find("is free for the node") != std::string::npos);

  auto a = start_node(dir.path(), config, "alpha");
  auto b = start_node(dir.path(), config, "beta");
  REQUIRE(coordinator_answers(config, 30));
  auto r = preflight(dir, config);
  INFO(r.out);
  CHECK(r.code == 0);
  for (auto name : {"ok    config", "ok    mode", "ok    node alpha", "ok    node beta", "ok    port alpha",
                    "ok    disk alpha", "ok    disk beta", "ok    socket paths alpha", "ok    backend programs"})
    CHECK(line_of(r.out, name) != "");
  CHECK(line_of(r.out, "ok    node beta").find("(protocol 1)") != std::string::npos);
  CHECK(line_of(r.out, "ok    port beta").find("this host's vidline node") != std::string::npos);
  CHECK(r.out.find("0 failed") != std::string::npos);
  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  CHECK(b->wait(20) == 0);
}

TEST_CASE("preflight catches a wrong port") {
  temp_dir dir;
  json cfg = base_config(dir.path());
  auto config = write(dir.path() + "/cluster.json", cfg);
  auto a = start_node(dir.path(), config, "alpha");
  auto b = start_node(dir.path(), config, "beta");
  REQUIRE(coordinator_answers(config, 30));

  // The config says beta is on a port another program holds.
  squatter other;
  json wrong = cfg;
  wrong["hosts"][1]["port"] = other.port;
  auto r = preflight(dir, write(dir.path() + "/wrong.json", wrong));
  INFO(r.out);
  CHECK(r.code == 1);
  auto port = line_of(r.out, "FAIL  port beta");
  CHECK(port.find("127.0.0.1:" + std::to_string(other.port) + " is in use by another program, not a vidline node") != std::string::npos);
  CHECK(port.find("-> fix: stop that program (ss -ltnp 'sport = :" + std::to_string(other.port) +
                  "' shows it) or give the node another port in /hosts/1/port") != std::string::npos);
  CHECK(line_of(r.out, "FAIL  node beta").find("does not answer as a vidline node of protocol 1") != std::string::npos);
  CHECK(line_of(r.out, "ok    node alpha") != "");

  // ... and on a port where nothing listens.
  wrong["hosts"][1]["port"] = testing_support::free_ports(1)[0];
  r = preflight(dir, write(dir.path() + "/nothing.json", wrong));
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK(line_of(r.out, "FAIL  node beta").find("nothing answers at 127.0.0.1:") != std::string::npos);
  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  CHECK(b->wait(20) == 0);
}

TEST_CASE("preflight catches a full disk") {
  temp_dir dir;
  std::string full = dir.path() + "/full";
  std::filesystem::create_directories(full);
  json cfg = base_config(dir.path());
  bool mounted = ::mount("tmpfs", full.c_str(), "tmpfs", 0, "size=1m") == 0;
  result r;
  if (mounted) {
    // A real full file system: a 1 MiB tmpfs, filled to the last byte.
    { std::ofstream fill(full + "/fill", std::ios::binary); std::string mb(1 << 20, 'x'); fill << mb; }
    cfg["hosts"][0]["data_dir"] = full + "/alpha";
    r = preflight(dir, write(dir.path() + "/cluster.json", cfg), {"--before-start", "--min-free", "64K"});
    ::umount2(full.c_str(), MNT_DETACH);
  } else {
    WARN("cannot mount a tmpfs here (not root?): asking for more space than the disk has instead");
    r = preflight(dir, write(dir.path() + "/cluster.json", cfg), {"--before-start", "--min-free", "1000000T"});
  }
  INFO(r.out);
  CHECK(r.code == 1);
  auto disk = line_of(r.out, "FAIL  disk alpha");
  if (mounted)
    CHECK((disk.find("cannot write in " + full + "/alpha (disk full or read-only)") != std::string::npos ||
           disk.find("cannot create data directory " + full + "/alpha: No space left on device") != std::string::npos));
  else
    CHECK(disk.find("free on the file system of") != std::string::npos);
  CHECK(disk.find("-> fix:") != std::string::npos);
  CHECK(line_of(r.out, "ok    disk beta") != "");
}

TEST_CASE("preflight: less free space than asked is caught before the disk is full") {
  temp_dir dir;
  auto r = preflight(dir, write(dir.path() + "/cluster.json", base_config(dir.path())),
                     {"--before-start", "--min-free", "1000000T"});
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK(line_of(r.out, "FAIL  disk alpha").find("need 976.6 PiB for latents and outputs") != std::string::npos);
}

TEST_CASE("preflight catches a long socket path") {
  temp_dir dir;
  json cfg = base_config(dir.path());
  std::string deep = "/tmp/" + std::string(70, 'd');
  cfg["backends"]["programs"]["options"]["env"] = {{"RAYLIGHT_RAY_TMPDIR", deep}};
  auto r = preflight(dir, write(dir.path() + "/cluster.json", cfg), {"--before-start"});
  INFO(r.out);
  CHECK(r.code == 1);
  auto line = line_of(r.out, "FAIL  socket paths alpha");
  CHECK(line.find("backend programs env RAYLIGHT_RAY_TMPDIR: " + deep + " is 75 bytes: Ray's sockets under it would be 141 bytes, over the 107-byte limit of Unix socket paths") != std::string::npos);
  CHECK(line.find("-> fix: shorten it") != std::string::npos);
}

TEST_CASE("preflight: a comfyui backend is reached and its workflows' nodes are present") {
  temp_dir dir;
  testing_support::comfyui_server server(dir.path() + "/comfy");
  json cfg = base_config(dir.path());
  std::string examples = std::string(VIDLINE_SOURCE_DIR) + "/config/examples/";
  json comfy = {{"type", "comfyui"},
                {"options", {{"url", server.url()},
                             {"sample_workflow", examples + "comfyui_workflow_sample_av.json"},
                             {"latents", {{"video", "10"}, {"audio", "11"}}}}}};
  cfg["backends"]["comfy"] = comfy;
  cfg["pools"][0]["backend"] = "comfy";
  auto r = preflight(dir, write(dir.path() + "/cluster.json", cfg), {"--before-start"});
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(line_of(r.out, "ok    backend comfy").find("ComfyUI 0.3.64-test at " + server.url() + ", 10 node classes present") != std::string::npos);

  json w = json::parse(testing_support::read_file(examples + "comfyui_workflow_sample_av.json"));
  w["9"]["class_type"] = "RaylightSeparateAV";
  cfg["backends"]["comfy"]["options"]["sample_workflow"] = w;
  r = preflight(dir, write(dir.path() + "/cluster2.json", cfg), {"--before-start"});
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK(line_of(r.out, "FAIL  backend comfy").find("lacks node classes the workflows use: RaylightSeparateAV") != std::string::npos);

  cfg["backends"]["comfy"]["options"]["url"] = "http://127.0.0.1:" + std::to_string(testing_support::free_ports(1)[0]);
  r = preflight(dir, write(dir.path() + "/cluster3.json", cfg), {"--before-start"});
  CHECK(r.code == 1);
  CHECK(line_of(r.out, "FAIL  backend comfy").find("-> fix: start ComfyUI at") != std::string::npos);
}

TEST_CASE("preflight: a broken config or an unknown mode is one failing line") {
  temp_dir dir;
  json cfg = base_config(dir.path());
  cfg["pools"][0]["host"] = "gamma";
  auto r = preflight(dir, write(dir.path() + "/bad.json", cfg));
  CHECK(r.code == 1);
  CHECK(line_of(r.out, "FAIL  config").find("/pools/0/host: unknown host 'gamma'") != std::string::npos);
  process p({VIDLINE_BINARY, "preflight", "--config", write(dir.path() + "/ok.json", base_config(dir.path())),
             "--mode", "nope"},
            dir.path() + "/mode.out");
  CHECK(p.wait(30) == 1);
  CHECK(line_of(p.out(), "FAIL  mode").find("use one of: m") != std::string::npos);
}

TEST_CASE("preflight runs start's key checks: a secret key others may read fails both") {
  temp_dir dir;
  json cfg = base_config(dir.path());
  auto config = write(dir.path() + "/cluster.json", cfg);
  std::string key = cfg["hosts"][0]["secret_key_file"];
  auto ok = preflight(dir, config, {"--before-start"});
  INFO(ok.out);
  CHECK(ok.code == 0);
  CHECK(line_of(ok.out, "ok    keys alpha") != "");
  std::filesystem::permissions(key, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                                      std::filesystem::perms::group_read | std::filesystem::perms::others_read);
  auto r = preflight(dir, config, {"--before-start"});
  INFO(r.out);
  CHECK(r.code == 1);
  const std::string why = key + ": mode 0644 lets others read or change the secret key; chmod 600 it";
  CHECK(line_of(r.out, "FAIL  keys alpha").find(why) != std::string::npos);
  CHECK(line_of(r.out, "ok    keys beta") != "");
  // start refuses it with the same words, before any node is spawned.
  ::setenv("VIDLINE_STATE_DIR", (dir.path() + "/state").c_str(), 1);
  process s({VIDLINE_BINARY, "start", "--config", config, "--host", "alpha", "--timeout", "10"},
            dir.path() + "/start.out");
  CHECK(s.wait(60) == 4);
  CHECK((s.out() + s.err()).find("alpha: not started: cannot authenticate its links: " + why) != std::string::npos);
  CHECK(!std::filesystem::exists(dir.path() + "/alpha/run/node.pid"));
}

TEST_CASE("preflight --mode auto as run and plan take it, and --json") {
  temp_dir dir;
  auto config = write(dir.path() + "/cluster.json", base_config(dir.path()));
  process p({VIDLINE_BINARY, "preflight", "--config", config, "--mode", "auto", "--before-start", "--json"},
            dir.path() + "/auto.out");
  int code = p.wait(60);
  INFO(p.out() + p.err());
  CHECK(code == 0);
  json j = json::parse(p.out());
  CHECK(j["ok"] == true);
  CHECK(j["exit_code"] == 0);
  CHECK(j["mode"] == "auto");
  CHECK(j["summary"]["fail"] == 0);
  CHECK(j["errors"].empty());
  bool mode_line = false;
  for (auto& c : j["checks"])
    if (c["name"] == "mode") {
      mode_line = true;
      CHECK(c["status"] == "ok");
      CHECK(c["host"].is_null());
      CHECK(c["detail"].get<std::string>().find("auto: pools p; decoders d") == 0);
    }
  CHECK(mode_line);
  CHECK(j["hosts"]["alpha"]["ok"] == true);
  auto checks = j["hosts"]["alpha"]["checks"].get<std::vector<std::string>>();
  CHECK(std::find(checks.begin(), checks.end(), "keys alpha") != checks.end());
  CHECK(std::find(checks.begin(), checks.end(), "disk alpha") != checks.end());

  // A failing check: ok false, exit 1, the error listed.
  process bad({VIDLINE_BINARY, "preflight", "--config", config, "--mode", "nope", "--json"},
              dir.path() + "/nope.out");
  CHECK(bad.wait(60) == 1);
  json b = json::parse(bad.out());
  CHECK(b["ok"] == false);
  CHECK(b["exit_code"] == 1);
  REQUIRE(b["errors"].size() == 1);
  CHECK(b["errors"][0] == "mode: no mode 'nope' in the config");
}
