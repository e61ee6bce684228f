#include "nodes/service.hpp"
#include "nodes/keygen.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/exec/stage_util.hpp"
#include "common/files.hpp"
#include "messages/envelope.hpp"
#include "nodes/client.hpp"
#include "nodes/commands.hpp"
#include "nodes/exit_codes.hpp"

extern char** environ;

namespace vidline::nodes {
namespace {

namespace fs = std::filesystem;

std::set<std::string> local_addresses() {
  std::set<std::string> out{"localhost", "127.0.0.1", "::1", "0.0.0.0"};
  ifaddrs* ifa = nullptr;
  if (::getifaddrs(&ifa) == 0) {
    for (ifaddrs* i = ifa; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr)
        continue;
      char buf[INET6_ADDRSTRLEN] = {};
      if (i->ifa_addr->sa_family == AF_INET)
        ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
      else if (i->ifa_addr->sa_family == AF_INET6)
        ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, buf, sizeof buf);
      if (buf[0] != '\0')
        out.insert(buf);
    }
    ::freeifaddrs(ifa);
  }
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0)
    out.insert(host);
  return out;
}

bool on_this_machine(const std::string& address, const std::set<std::string>& locals) {
  if (locals.count(address))
    return true;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(address.c_str(), nullptr, &hints, &res) != 0)
    return false;
  bool found = false;
  for (addrinfo* a = res; a != nullptr && !found; a = a->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, buf, sizeof buf);
    else if (a->ai_family == AF_INET6)
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, buf, sizeof buf);
    found = buf[0] != '\0' && locals.count(buf) > 0;
  }
  ::freeaddrinfo(res);
  return found;
}

std::string pid_file(const config::host& h) { return h.data_dir + "/run/node.pid"; }

/// Whether `pid` is alive (a zombie is not) and is `vidline node` for this config and host.
bool is_our_node(pid_t pid, const std::string& config, const std::string& host) {
  if (pid <= 0 || ::kill(pid, 0) != 0)
    return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  std::getline(stat, s);
  auto close = s.rfind(')');
  if (close == std::string::npos || close + 2 >= s.size() || s[close + 2] == 'Z')
    return false;
  std::ifstream cmd("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::vector<std::string> args;
  for (std::string a; std::getline(cmd, a, '\0');)
    args.push_back(a);
  auto has_pair = [&](const std::string& flag, const std::string& value) {
    for (std::size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == flag && args[i + 1] == value)
        return true;
    return false;
  };
  return std::find(args.begin(), args.end(), "node") != args.end() && has_pair("--config", config) &&
         has_pair("--host", host);
}

pid_t read_pid(const std::string& path) {
  std::ifstream in(path);
  long pid = 0;
  in >> pid;
  return in ? static_cast<pid_t>(pid) : 0;
}

bool exited(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) == pid)  // our child (started by this command)
    return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  if (!std::getline(stat, s))
    return true;
  auto close = s.rfind(')');
  return close != std::string::npos && close + 2 < s.size() && s[close + 2] == 'Z';
}

/// An exclusive lock on <data_dir>/run/start.lock for as long as it lives.
class start_lock {
public:
  explicit start_lock(const std::string& dir) {
    files::make_dirs(dir);
    fd_ = ::open((dir + "/start.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0 || ::flock(fd_, LOCK_EX) != 0)
      throw std::runtime_error("cannot lock " + dir + "/start.lock: " + std::strerror(errno));
  }
  ~start_lock() {
    if (fd_ >= 0)
      ::close(fd_);
  }

private:
  int fd_ = -1;
};

pid_t spawn_node(const service_options& o, const std::string& config, const config::host& h,
                 const std::string& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty, all;
  sigemptyset(&empty);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &all);
  // A session of its own: no controlling terminal, not in the caller's process group.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<std::string> args{o.self_exe, "node", "--config", config, "--host", h.name};
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, o.self_exe.c_str(), &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    throw std::runtime_error("cannot start " + o.self_exe + ": " + std::strerror(rc));
  return pid;
}

} // namespace

bool node_answers(const config::cluster& cluster, const config::host& h, double timeout_s) {
  try {
    client c("tcp://" + h.address + ":" + std::to_string(h.port), cluster.knobs,
             client_security_for(cluster, h.name));
    msg::latent_fetch probe;
    probe.transfer_id = (static_cast<uint64_t>(::getpid()) << 20) | 1;
    probe.sha256 = std::string(64, '0');
    probe.length = 0;
    auto reply = c.request("bus", probe, static_cast<int>(timeout_s * 1000));
    return reply && reply->env.type == msg::latent_chunk::wire_name;
  } catch (const std::exception&) {
    return false;
  }
}

std::vector<const config::host*> hosts_here(const config::cluster& c,
                                            const std::vector<std::string>& named) {
  std::vector<const config::host*> out;
  if (!named.empty()) {
    for (auto& n : named) {
      auto* h = c.find_host(n);
      if (h == nullptr)
        throw std::invalid_argument("no host '" + n + "' in the config");
      out.push_back(h);
    }
    return out;
  }
  auto locals = local_addresses();
  for (auto& h : c.hosts)
    if (on_this_machine(h.address, locals))
      out.push_back(&h);
  return out;
}

int start_nodes(const service_options& o) {
  auto c = config::load(o.config);
  std::string config = c.source_path;
  remember_config(o.config);
  if (!o.mode.empty() && c.find_mode(o.mode) == nullptr)
    throw config::config_error("/modes", "no mode '" + o.mode + "'");
  auto hosts = hosts_here(c, o.hosts);
  if (hosts.empty()) {
    std::fprintf(stderr, "error: no host of %s is on this machine; name one with --host\n",
                 o.config.c_str());
    return exit_code::usage;
  }
  int code = exit_code::ok;
  for (auto* h : hosts) {
    start_lock lock(h->data_dir + "/run");
    pid_t old = read_pid(pid_file(*h));
    if (is_our_node(old, config, h->name)) {
      std::printf("%s: already running (pid %d)\n", h->name.c_str(), old);
      continue;
    }
    if (node_answers(c, *h, 0.5)) {
      // Not ours to manage (no pid file of ours), but the host's node is up: leave it.
      std::printf("%s: a vidline node not started by 'vidline start' already answers at tcp://%s:%d; "
                  "leaving it (stop it yourself to hand it over)\n",
                  h->name.c_str(), h->address.c_str(), h->port);
      continue;
    }
    files::make_dirs(h->data_dir + "/logs");
    std::string log = h->data_dir + "/logs/node.out";
    pid_t pid = spawn_node(o, config, *h, log);
    files::write_atomic(pid_file(*h), std::to_string(pid) + "\n");
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.ready_timeout_s);
    bool ready = false, died = false;
    while (std::chrono::steady_clock::now() < deadline) {
      if (exited(pid)) {
        died = true;
        break;
      }
      if (node_answers(c, *h, 0.5)) {
        // The answer must be this node's: it must still be alive a moment later.
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        ready = !exited(pid);
        died = !ready;
        break;
      }
    }
    if (ready) {
      std::printf("%s: started (pid %d), answering at tcp://%s:%d; log %s\n", h->name.c_str(), pid,
                  h->address.c_str(), h->port, log.c_str());
      if (!o.mode.empty())
        if (auto* m = c.find_mode(o.mode)) {
          std::string mine;
          for (auto& p : m->pools)
            if (auto* pool = c.find_pool(p); pool && pool->host == h->name)
              mine += (mine.empty() ? "" : ", ") + ("pool " + p);
          for (auto& d : m->decoders)
            if (auto* dec = c.find_decoder(d); dec && dec->host == h->name)
              mine += (mine.empty() ? "" : ", ") + ("decoder " + d);
          std::printf("%s: in mode %s it runs %s\n", h->name.c_str(), o.mode.c_str(),
                      mine.empty() ? "no pool or decoder" : mine.c_str());
        }
      continue;
    }
    std::string tail = backends::exec::file_tail(log, 2000);
    std::fprintf(stderr, "%s: the node %s; the end of %s:\n%s\n", h->name.c_str(),
                 died ? "exited at once" : "did not answer in time", log.c_str(), tail.c_str());
    if (!died)
      ::kill(pid, SIGTERM);
    std::error_code ec;
    fs::remove(pid_file(*h), ec);
    code = exit_code::fatal;
  }
  return code;
}

int stop_nodes(const service_options& o) {
  auto c = cluster_for(o.config);
  std::string config = c.source_path;
  auto hosts = hosts_here(c, o.hosts);
  if (hosts.empty()) {
    std::fprintf(stderr, "error: no host of %s is on this machine; name one with --host\n",
                 o.config.c_str());
    return exit_code::usage;
  }
  int code = exit_code::ok;
  for (auto* h : hosts) {
    pid_t pid = read_pid(pid_file(*h));
    std::error_code ec;
    if (!is_our_node(pid, config, h->name)) {
      std::printf("%s: not running\n", h->name.c_str());
      fs::remove(pid_file(*h), ec);
      continue;
    }
    ::kill(pid, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.grace_s);
    while (!exited(pid) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // not our child: poll /proc
    if (!exited(pid)) {
      ::kill(pid, SIGKILL);
      std::printf("%s: did not stop within %.0f s; killed (pid %d)\n", h->name.c_str(), o.grace_s, pid);
      code = exit_code::fatal;
    } else {
      std::printf("%s: stopped (pid %d)\n", h->name.c_str(), pid);
    }
    fs::remove(pid_file(*h), ec);
  }
  return code;
}

} // namespace vidline::nodes
