#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <vidline/embedded_config.hpp>

#include "common/spawn/child.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"
#include "nodes/verbs/commands.hpp"
#include "nodes/verbs/exit_codes.hpp"
#include "nodes/bus/keys.hpp"


namespace vidline::nodes::verbs {
namespace {

/// The reference line's measured row for the demo's batch (docs/reference.md).
constexpr const char* reference_row =
  "reference (measured)         6/6    147.707    266.324       81.10";

/// Free TCP ports on 127.0.0.1, chosen by the kernel (held open together so they differ).
std::vector<int> free_ports(int n) {
  std::vector<int> fds;
  std::vector<int> ports;
  for (int i = 0; i < n; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof(a);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0
        || ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("cannot find a free port on 127.0.0.1");
    fds.push_back(fd);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int fd : fds)
    ::close(fd);
  return ports;
}

/// Starts `vidline node` for one host, its output to `log`.
pid_t start_node(const std::string& exe, const std::string& config, const std::string& host,
                 const std::string& log) {
  spawn::child_spec cs;
  cs.argv = {exe, "node", "--config", config, "--host", host};
  cs.env = spawn::current_environment();
  cs.stdout_path = cs.stderr_path = log;
  std::string error;
  pid_t pid = spawn::spawn_child(cs, error);
  if (pid < 0)
    throw std::runtime_error("cannot start " + exe + ": " + error);
  return pid;
}

bool still_running(pid_t pid) { return ::waitpid(pid, nullptr, WNOHANG) == 0; }

/// SIGTERM, then up to `grace_s` for a clean exit, then SIGKILL. Returns the exit status.
int stop_node(pid_t pid, double grace_s) {
  ::kill(pid, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return 137;
}

std::string tail_of(const std::string& path, std::size_t bytes) {
  try {
    auto s = files::read_all(path);
    return s.size() > bytes ? s.substr(s.size() - bytes) : s;
  } catch (const std::exception&) {
    return "";
  }
}

} // namespace

int run_demo(bool json, const std::string& self_exe) {
  char tmpl[] = "/tmp/vidline-demo-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return exit_code::fatal;
  }
  std::string dir = tmpl;
  auto cfg = nlohmann::json::parse(embedded::reference_config);
  const auto n = cfg["hosts"].size();
  auto ports = free_ports(static_cast<int>(2 * n));
  // Throwaway keys, so the demo runs the links as a real line does: CURVE, listed keys,
  // latents on the bulk channel (digests on CURVE).
  cfg.erase("plaintext");
  for (std::size_t i = 0; i < n; ++i) {
    auto& h = cfg["hosts"][i];
    const auto name = h["name"].get<std::string>();
    h["address"] = "127.0.0.1";
    h["port"] = ports[i];
    h["bulk_port"] = ports[n + i];
    h["data_dir"] = dir + "/" + name;
    const auto keys = bus::write_curve_keypair(dir + "/keys", name);
    h["public_key"] = keys.public_z85;
    h["secret_key_file"] = keys.secret_path;
  }
  auto config_path = dir + "/cluster.json";
  files::write_atomic(config_path, cfg.dump(2));
  auto cluster = config::load(config_path);
  FILE* info = json ? stderr : stdout;
  std::fprintf(info, "vidline demo: two nodes on loopback as the reference hosts; work in %s\n",
               dir.c_str());

  std::vector<std::pair<std::string, pid_t>> nodes;
  for (auto& h : cluster.hosts)
    nodes.emplace_back(h.name, start_node(self_exe, config_path, h.name,
                                          dir + "/" + h.name + ".log"));
  auto stop_all = [&] {
    int worst = 0;
    for (auto& [name, pid] : nodes) {
      int code = stop_node(pid, 15);
      if (code != 0) {
        std::fprintf(stderr, "node %s exited with %d; its log ends:\n%s\n", name.c_str(), code,
                     tail_of(dir + "/" + name + ".log", 2000).c_str());
        worst = exit_code::fatal;
      }
    }
    return worst;
  };

  coordinator_client cl(cluster);
  // The coordinator is ready when it answers (an error "no runs yet" is an answer).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool ready = false;
  while (!ready && std::chrono::steady_clock::now() < deadline) {
    for (auto& [name, pid] : nodes)
      if (!still_running(pid)) {
        std::fprintf(stderr, "node %s stopped at start; its log ends:\n%s\n", name.c_str(),
                     tail_of(dir + "/" + name + ".log", 2000).c_str());
        stop_all();
        return exit_code::fatal;
      }
    try {
      ready = cl.status("", 500).has_value();
    } catch (const std::exception&) {
      ready = true;
    }
  }
  if (!ready) {
    std::fprintf(stderr, "the coordinator did not answer within 30 s\n");
    stop_all();
    return exit_code::unreachable;
  }
  // The batch's clock starts at submission: submit once every pool and decoder of the mode
  // has reported in, as an operator would.
  const auto* mode = cluster.find_mode("four_four_xtx_plus_one");
  auto all_alive = [&](const nlohmann::json& c) {
    for (auto& p : mode->pools)
      if (!c["pools"].contains(p) || !c["pools"][p]["alive"].get<bool>())
        return false;
    for (auto& d : mode->decoders)
      if (!c["decoders"].contains(d) || !c["decoders"][d]["alive"].get<bool>())
        return false;
    return true;
  };
  bool alive = false;
  while (!alive && std::chrono::steady_clock::now() < deadline) {
    try {
      auto c = cl.status("@cluster", 500);
      alive = c && all_alive(*c);
    } catch (const std::exception&) {
    }
    if (!alive)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling pace
  }
  if (!alive) {
    std::fprintf(stderr, "the pools and decoders of the mode did not all report within 30 s\n");
    stop_all();
    return exit_code::unreachable;
  }

  msg::submit_run req;
  req.mode = "four_four_xtx_plus_one";
  req.prompt = "A red fox trots through fresh snow at dawn, low sun, slow dolly shot.";
  req.width = 416;
  req.height = 736;
  req.seconds = 5;
  req.count = 6;
  req.seed = 987654321123ull;
  req.request_id = "demo-" + to_hex(sha256_of(dir)).substr(0, 16);
  std::string run_id;
  try {
    run_id = cl.submit(req);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "submit failed: %s\n", e.what());
    stop_all();
    return exit_code::fatal;
  }
  std::fprintf(info, "run %s: 6 jobs, 416x736, 5 s, seeds 987654321123.., mode %s\n",
               run_id.c_str(), req.mode.c_str());
  wait_options wo;
  wo.json = json;
  wo.timeout_s = 110;
  wo.reference_row = reference_row;
  int code = wait_for_run(cl, run_id, wo);
  int stopped = stop_all();
  std::fprintf(info, "nodes stopped; outputs and logs are in %s\n", dir.c_str());
  return code != exit_code::ok ? code : stopped;
}

} // namespace vidline::nodes::verbs
