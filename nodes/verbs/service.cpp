#include "nodes/verbs/service.hpp"

#include "common/spawn/child.hpp"
#include "nodes/bus/keys.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "actors/planner/plan.hpp"
#include "backends/exec/stage_util.hpp"
#include "common/files.hpp"
#include "messages/envelope.hpp"
#include "nodes/verbs/client.hpp"
#include "nodes/verbs/commands.hpp"
#include "nodes/verbs/exit_codes.hpp"
#include "nodes/state/node_lock.hpp"


namespace vidline::nodes::verbs {
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
  spawn::child_spec cs;
  cs.argv = {o.self_exe, "node", "--config", config, "--host", h.name};
  cs.env = spawn::current_environment();
  cs.stdout_path = cs.stderr_path = log;
  cs.append = true;
  // A session of its own: no controlling terminal, not in the caller's process group, and
  // it outlives the command that started it.
  cs.new_session = true;
  std::string error;
  pid_t pid = spawn::spawn_child(cs, error);
  if (pid < 0)
    throw std::runtime_error("cannot start " + o.self_exe + ": " + error);
  return pid;
}

} // namespace

bool node_answers(const config::cluster& cluster, const config::host& h, double timeout_s) {
  try {
    client c("tcp://" + h.address + ":" + std::to_string(h.port), cluster.knobs,
             bus::client_security_for(cluster, h.name));
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

namespace {

/// What start or stop did with one host, for its line and for --json.
struct host_result {
  std::string host;
  std::string action;  ///< start: started, already_running, left_alone, refused, failed; stop:
                       ///< stopped, killed, not_running, failed
  bool ok = true;
  pid_t pid = 0;
  std::string token;   ///< the node's per-start token, from its lock (when known)
  std::string endpoint, log, data_dir;
  std::vector<std::string> notes;  ///< e.g. a stale pid file removed
  std::string error;
};

nlohmann::json to_json(const host_result& r) {
  nlohmann::json j{{"host", r.host}, {"action", r.action}, {"ok", r.ok}, {"data_dir", r.data_dir}};
  j["pid"] = r.pid > 0 ? nlohmann::json(r.pid) : nlohmann::json(nullptr);
  if (!r.token.empty())
    j["token"] = r.token;
  if (!r.endpoint.empty())
    j["endpoint"] = r.endpoint;
  if (!r.log.empty())
    j["log"] = r.log;
  j["notes"] = r.notes;
  j["error"] = r.error.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.error);
  return j;
}

/// Lines for people: on stdout, or on stderr with --json (stdout then holds only JSON).
class reporter {
public:
  reporter(const char* verb, const service_options& o, const std::string& config)
      : verb_(verb), json_(o.json), config_(config) {}

  void say(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    va_list ap;
    va_start(ap, fmt);
    std::vfprintf(json_ ? stderr : stdout, fmt, ap);
    va_end(ap);
  }
  /// Errors go to stderr either way.
  void error(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    va_list ap;
    va_start(ap, fmt);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
  }
  void add(host_result r) { hosts_.push_back(std::move(r)); }

  /// Prints the JSON result (with --json) and returns `code`.
  int finish(int code, const std::string& error = "") {
    if (json_) {
      nlohmann::json j{{"verb", verb_}, {"config", config_}, {"ok", code == exit_code::ok},
                       {"exit_code", code}};
      j["hosts"] = nlohmann::json::array();
      for (auto& h : hosts_)
        j["hosts"].push_back(to_json(h));
      std::vector<std::string> errors;
      if (!error.empty())
        errors.push_back(error);
      for (auto& h : hosts_)
        if (!h.error.empty())
          errors.push_back(h.host + ": " + h.error);
      j["errors"] = errors;
      std::printf("%s\n", j.dump(2).c_str());
    }
    return code;
  }

private:
  const char* verb_;
  bool json_;
  std::string config_;
  std::vector<host_result> hosts_;
};

std::string endpoint_text(const config::host& h) {
  return "tcp://" + h.address + ":" + std::to_string(h.port);
}

/// Removes `h`'s pid file when it exists and no live node holds the data directory's
/// lock; a note for the result says so. Never removes the pid file of a live node.
void remove_stale_pid_file(const config::host& h, pid_t recorded, host_result& r, reporter& out) {
  if (recorded <= 0 && !fs::exists(pid_file(h)))
    return;
  if (state::node_lock_holder(h.data_dir, 0))
    return;
  std::error_code ec;
  fs::remove(pid_file(h), ec);
  std::string note = "stale pid file " + pid_file(h) + " removed (pid " + std::to_string(recorded) +
                     ": no process holds " + state::node_lock_path(h.data_dir) + ")";
  out.say("%s: %s\n", h.name.c_str(), note.c_str());
  r.notes.push_back(note);
}

/// Whether the node `pid` is gone: exited (or a zombie), or no longer the holder of its
/// data directory's lock.
bool node_gone(const config::host& h, pid_t pid) {
  if (exited(pid))
    return true;
  auto holder = state::node_lock_holder(h.data_dir, 0);
  return !holder || holder->pid != pid;
}

} // namespace

int start_nodes(const service_options& o) {
  auto c = config::load(o.config);
  std::string config = c.source_path;
  reporter out("start", o, config);
  remember_config(o.config);
  std::optional<config::mode> mode;
  if (!o.mode.empty()) {
    mode = actors::coordinator::resolve_mode(c, o.mode);
    if (!mode)
      throw config::config_error("/modes", "no mode '" + o.mode + "' (known: " +
                                             actors::coordinator::known_modes(c) + ")");
  }
  auto hosts = hosts_here(c, o.hosts);
  if (hosts.empty()) {
    std::string why = "no host of " + o.config + " is on this machine; name one with --host";
    out.error("error: %s\n", why.c_str());
    return out.finish(exit_code::usage, why);
  }
  const std::string digest = config::digest(c);
  int code = exit_code::ok;
  for (auto* h : hosts) {
    host_result r;
    r.host = h->name;
    r.data_dir = h->data_dir;
    r.endpoint = endpoint_text(*h);
    auto fail = [&](const std::string& action, const std::string& why) {
      r.action = action;
      r.ok = false;
      r.error = why;
      code = exit_code::fatal;
      out.add(r);
    };
    try {
      start_lock lock(h->data_dir + "/run");
      pid_t recorded = read_pid(pid_file(*h));
      // The node of this data directory, if one lives: the kernel says who holds its lock.
      if (auto holder = state::node_lock_holder(h->data_dir)) {
        r.pid = holder->pid;
        r.token = holder->token;
        if (holder->host != h->name || holder->config_digest != digest) {
          std::string why = "not started: its data directory " + h->data_dir +
                            " is in use by another vidline node (pid " + std::to_string(holder->pid) +
                            (holder->host.empty() ? std::string() : ", host " + holder->host) +
                            (holder->config.empty() ? std::string() : ", config " + holder->config) +
                            (holder->host == h->name ? ", another version of the config" : "") +
                            "), which holds " + state::node_lock_path(h->data_dir) +
                            "; stop it first (vidline stop), or give each host its own data_dir";
          out.error("%s: %s\n", h->name.c_str(), why.c_str());
          fail("refused", why);
          continue;
        }
        r.action = recorded == holder->pid ? "already_running" : "left_alone";
        if (recorded == holder->pid)
          out.say("%s: already running (pid %d)\n", h->name.c_str(), holder->pid);
        else
          out.say("%s: a vidline node not started by 'vidline start' already runs on %s (pid %d "
                  "holds %s); leaving it (vidline stop stops it)\n",
                  h->name.c_str(), h->data_dir.c_str(), holder->pid,
                  state::node_lock_path(h->data_dir).c_str());
        out.add(r);
        continue;
      }
      remove_stale_pid_file(*h, recorded, r, out);
      if (node_answers(c, *h, 0.5)) {
        // Not on this data directory (it holds no lock on it), but the host's port answers.
        r.action = "left_alone";
        out.say("%s: a vidline node not started by 'vidline start' already answers at %s, "
                "without holding %s; leaving it (stop it yourself to hand it over)\n",
                h->name.c_str(), r.endpoint.c_str(), state::node_lock_path(h->data_dir).c_str());
        out.add(r);
        continue;
      }
      // The keys as the node's bus will load them (a 0644 secret key is refused there).
      try {
        (void)bus::bus_security_for(c, h->name);
      } catch (const std::exception& e) {
        std::string why = std::string("not started: cannot authenticate its links: ") + e.what();
        out.error("%s: %s\n", h->name.c_str(), why.c_str());
        fail("failed", why);
        continue;
      }
      files::make_dirs(h->data_dir + "/logs");
      std::string log = h->data_dir + "/logs/node.out";
      r.log = log;
      pid_t pid = spawn_node(o, config, *h, log);
      r.pid = pid;
      files::write_atomic(pid_file(*h), std::to_string(pid) + "\n");
      auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.ready_timeout_s);
      bool ready = false, died = false;
      while (std::chrono::steady_clock::now() < deadline) {
        if (exited(pid)) {
          died = true;
          break;
        }
        // Ready: it holds its data directory's lock (so an answer is its own) and answers.
        auto holder = state::node_lock_holder(h->data_dir, 0.2);
        if (holder && holder->pid == pid && node_answers(c, *h, 0.5)) {
          r.token = holder->token;
          ready = true;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (ready) {
        r.action = "started";
        out.say("%s: started (pid %d), answering at %s; log %s\n", h->name.c_str(), pid,
                r.endpoint.c_str(), log.c_str());
        if (mode) {
          std::string mine;
          for (auto& p : mode->pools)
            if (auto* pool = c.find_pool(p); pool && pool->host == h->name)
              mine += (mine.empty() ? "" : ", ") + ("pool " + p);
          for (auto& d : mode->decoders)
            if (auto* dec = c.find_decoder(d); dec && dec->host == h->name)
              mine += (mine.empty() ? "" : ", ") + ("decoder " + d);
          out.say("%s: in mode %s it runs %s\n", h->name.c_str(), mode->name.c_str(),
                  mine.empty() ? "no pool or decoder" : mine.c_str());
          r.notes.push_back("in mode " + mode->name + " it runs " +
                            (mine.empty() ? std::string("no pool or decoder") : mine));
        }
        out.add(r);
        continue;
      }
      std::string tail = backends::exec::file_tail(log, 2000);
      std::string why = std::string("the node ") + (died ? "exited at once" : "did not answer in time");
      out.error("%s: %s; the end of %s:\n%s\n", h->name.c_str(), why.c_str(), log.c_str(), tail.c_str());
      if (!died) {
        ::kill(pid, SIGTERM);
        auto gone_by = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!exited(pid) && std::chrono::steady_clock::now() < gone_by)
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (!exited(pid))
          ::kill(pid, SIGKILL);
      }
      if (exited(pid)) {  // the pid file of a node that still lives stays
        std::error_code ec;
        fs::remove(pid_file(*h), ec);
      }
      fail("failed", why + "; the end of " + log + ":\n" + tail);
    } catch (const std::exception& e) {
      out.error("%s: %s\n", h->name.c_str(), e.what());
      fail("failed", e.what());
    }
  }
  // Where to watch the line: the coordinator's dashboard, when its node is one of these.
  for (auto* h : hosts)
    if (h->name == c.coordinator && h->http.port != 0 && code == exit_code::ok) {
      const bool any = h->http.address == "0.0.0.0" || h->http.address == "::";
      const std::string url = "http://" + (any ? h->address : h->http.address) + ":" +
                              std::to_string(h->http.port) + "/dashboard/";
      out.say("dashboard: %s%s\n", url.c_str(),
              h->http.token_file.empty()
                ? ""
                : (" (the page asks for the token in " + h->http.token_file + ")").c_str());
    }
  return out.finish(code);
}

int stop_nodes(const service_options& o) {
  auto c = cluster_for(o.config);
  std::string config = c.source_path;
  reporter out("stop", o, config);
  auto hosts = hosts_here(c, o.hosts);
  if (hosts.empty()) {
    std::string why = "no host of " + o.config + " is on this machine; name one with --host";
    out.error("error: %s\n", why.c_str());
    return out.finish(exit_code::usage, why);
  }
  int code = exit_code::ok;
  for (auto* h : hosts) {
    host_result r;
    r.host = h->name;
    r.data_dir = h->data_dir;
    try {
      // A start in progress on this data directory finishes first.
      std::optional<start_lock> lock;
      if (fs::is_directory(h->data_dir + "/run"))
        lock.emplace(h->data_dir + "/run");
      pid_t recorded = read_pid(pid_file(*h));
      // The node is whoever holds the data directory's lock, whatever config path started it.
      auto holder = state::node_lock_holder(h->data_dir);
      if (!holder) {
        r.action = "not_running";
        out.say("%s: not running\n", h->name.c_str());
        remove_stale_pid_file(*h, recorded, r, out);
        out.add(r);
        continue;
      }
      pid_t pid = holder->pid;
      r.pid = pid;
      r.token = holder->token;
      if (::kill(pid, SIGTERM) != 0)
        throw std::runtime_error("cannot signal the node (pid " + std::to_string(pid) + ", holding " +
                                 state::node_lock_path(h->data_dir) + "): " + std::strerror(errno));
      auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.grace_s);
      while (!node_gone(*h, pid) && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // not our child: poll
      if (!node_gone(*h, pid)) {
        ::kill(pid, SIGKILL);
        auto gone_by = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!node_gone(*h, pid) && std::chrono::steady_clock::now() < gone_by)
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        r.action = "killed";
        r.ok = false;
        r.error = "did not stop within " + std::to_string(static_cast<int>(o.grace_s)) + " s; killed";
        out.say("%s: did not stop within %.0f s; killed (pid %d)\n", h->name.c_str(), o.grace_s, pid);
        code = exit_code::fatal;
      } else {
        r.action = "stopped";
        out.say("%s: stopped (pid %d)%s\n", h->name.c_str(), pid,
                recorded == pid ? "" : " (it was not started by 'vidline start')");
      }
      if (!state::node_lock_holder(h->data_dir, 0)) {  // never the pid file of a live node
        std::error_code ec;
        fs::remove(pid_file(*h), ec);
      }
    } catch (const std::exception& e) {
      r.action = "failed";
      r.ok = false;
      r.error = e.what();
      out.error("%s: %s\n", h->name.c_str(), e.what());
      code = exit_code::fatal;
    }
    out.add(r);
  }
  return out.finish(code);
}

} // namespace vidline::nodes::verbs
