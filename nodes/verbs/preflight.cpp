#include "nodes/verbs/preflight.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/timex.h>
#include <unistd.h>

#include <httplib.h>

#include "actors/planner/plan.hpp"
#include "backends/comfyui/client.hpp"
#include "backends/comfyui/comfyui_options.hpp"
#include "common/spawn/child.hpp"
#include "backends/exec/exec_options.hpp"
#include "backends/worker/protocol.hpp"
#include "backends/worker/worker_options.hpp"
#include "backends/process/socket_paths.hpp"
#include "config/config.hpp"
#include "messages/envelope.hpp"
#include "nodes/verbs/client.hpp"
#include "nodes/verbs/exit_codes.hpp"
#include "nodes/gpu/telemetry.hpp"
#include "nodes/bus/keys.hpp"
#include "nodes/verbs/service.hpp"

namespace vidline::nodes::verbs {
namespace {

using lvl = check_line::level;
using json = nlohmann::json;
namespace fs = std::filesystem;

struct report {
  std::vector<check_line> lines;
  std::string host;  ///< the host the checks being made are about ("" = the cluster)
  void ok(std::string name, std::string detail) { lines.push_back({lvl::ok, std::move(name), std::move(detail), "", host}); }
  void warn(std::string name, std::string detail, std::string fix) {
    lines.push_back({lvl::warn, std::move(name), std::move(detail), std::move(fix), host});
  }
  void fail(std::string name, std::string detail, std::string fix) {
    lines.push_back({lvl::fail, std::move(name), std::move(detail), std::move(fix), host});
  }
};

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (auto& x : v)
    s += (s.empty() ? "" : sep) + x;
  return s;
}

// -- this machine ---------------------------------------------------------------------------

/// Connects to address:port within `timeout_s`: 0 when something listens, else errno.
int tcp_connect(const std::string& address, int port, double timeout_s) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &res) != 0)
    return EHOSTUNREACH;
  int result = ECONNREFUSED;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
      continue;
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, static_cast<int>(timeout_s * 1000)) == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        rc = -1;
        errno = ETIMEDOUT;
      }
    }
    result = rc == 0 ? 0 : errno;
    ::close(fd);
    if (result == 0)
      break;
  }
  ::freeaddrinfo(res);
  return result;
}

/// Binds address:port: 0 when it is free for the node, else errno.
int tcp_bind(const std::string& address, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (::getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &res) != 0)
    return EADDRNOTAVAIL;
  int result = EADDRNOTAVAIL;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd < 0)
      continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // as ZeroMQ does
    result = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    ::close(fd);
    if (result == 0)
      break;
  }
  ::freeaddrinfo(res);
  return result;
}

/// The nearest existing directory at or above `path`.
std::string existing_ancestor(std::string path) {
  std::error_code ec;
  fs::path p(path);
  while (!p.empty() && !fs::exists(p, ec))
    p = p.parent_path();
  return p.empty() ? "/" : p.string();
}

/// A program as an argv[0]: an absolute or relative path, or a name in PATH.
std::string find_program(const std::string& argv0) {
  if (argv0.find('/') != std::string::npos)
    return ::access(argv0.c_str(), X_OK) == 0 ? argv0 : "";
  const char* path = std::getenv("PATH");
  std::istringstream in(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(in, dir, ':');) {
    std::string p = (dir.empty() ? "." : dir) + "/" + argv0;
    if (::access(p.c_str(), X_OK) == 0 && fs::is_regular_file(p))
      return p;
  }
  return "";
}

/// Seconds the server's clock is ahead of ours, from an HTTP Date header.
std::optional<double> date_offset(const std::string& date, double sent, double received) {
  std::tm tm{};
  if (::strptime(date.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm) == nullptr)
    return std::nullopt;
  double server = static_cast<double>(::timegm(&tm)) + 0.5;  // whole seconds: its middle
  return server - (sent + received) / 2;
}

double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// -- the checks -----------------------------------------------------------------------------

/// What the mode runs, and where.
struct scope {
  const config::mode* mode = nullptr;
  std::set<std::string> hosts;                    ///< hosts with a pool or decoder in the mode
  std::map<std::string, std::set<std::string>> backend_hosts;  ///< backend -> its owners' hosts
  std::map<std::string, std::vector<std::string>> host_gpus;  ///< host -> gpu ids (no sim)
  std::set<std::string> gpu_hosts;                ///< hosts whose backends do real GPU work
};

scope scope_of(const config::cluster& c, const config::mode& m) {
  scope s;
  s.mode = &m;
  auto add_gpu = [&](const std::string& host, const std::string& gpu_id, const std::string& backend) {
    auto* b = c.find_backend(backend);
    if (b == nullptr || b->type == "sim")
      return;
    s.gpu_hosts.insert(host);
    auto& ids = s.host_gpus[host];
    if (std::find(ids.begin(), ids.end(), gpu_id) == ids.end())
      ids.push_back(gpu_id);
  };
  for (auto& name : m.pools)
    if (auto* p = c.find_pool(name)) {
      s.hosts.insert(p->host);
      s.backend_hosts[p->backend].insert(p->host);
      for (auto& g : p->gpus)
        add_gpu(p->host, g, p->backend);
      if (auto* e = c.find_encoder_of_host(p->host))
        s.backend_hosts[e->backend].insert(e->host);
    }
  for (auto& name : m.decoders)
    if (auto* d = c.find_decoder(name)) {
      s.hosts.insert(d->host);
      s.backend_hosts[d->backend].insert(d->host);
      add_gpu(d->host, d->gpu, d->backend);
    }
  s.hosts.insert(c.coordinator);
  return s;
}

void check_node(report& r, const config::cluster& c, const config::host& h, std::size_t index,
                bool local, const preflight_options& o) {
  std::string name = "node " + h.name;
  std::string at = h.address + ":" + std::to_string(h.port);
  bool answers = node_answers(c, h, o.timeout_s);
  std::string port_field = "/hosts/" + std::to_string(index) + "/port";
  if (local) {
    std::string pname = "port " + h.name;
    if (answers) {
      r.ok(pname, at + " is this host's vidline node");
    } else if (int e = tcp_bind(h.address, h.port); e == 0) {
      r.ok(pname, at + " is free for the node");
    } else if (e == EADDRINUSE) {
      r.fail(pname, at + " is in use by another program, not a vidline node of protocol " +
                      std::to_string(msg::protocol_version),
             "stop that program (ss -ltnp 'sport = :" + std::to_string(h.port) +
               "' shows it) or give the node another port in " + port_field);
    } else {
      r.fail(pname, "cannot bind " + at + ": " + std::strerror(e),
             "is " + h.address + " an address of this machine? fix /hosts/" + std::to_string(index) +
               "/address or " + port_field);
    }
  }
  if (o.before_start)
    return;
  if (answers) {
    r.ok(name, "answers at tcp://" + at + " (protocol " + std::to_string(msg::protocol_version) + ")");
    return;
  }
  int e = tcp_connect(h.address, h.port, o.timeout_s);
  if (e == 0)
    r.fail(name, "something listens at " + at + " but does not answer as a vidline node of protocol " +
                   std::to_string(msg::protocol_version),
           "a wrong port in " + port_field + " (another program holds it), or a vidline of "
           "another version: check the port and run the same vidline on every host");
  else
    r.fail(name, "nothing answers at " + at + " (" + std::strerror(e) + ")",
           "start it there (vidline start --config FILE --mode MODE), or fix /hosts/" +
             std::to_string(index) + "/address and " + port_field + "; check firewalls");
}

/// The host's keys, checked by the very function its node's bus loads them with (so a
/// key `start` would refuse, such as a secret key file others may read, fails here).
void check_keys(report& r, const config::cluster& c, const config::host& h, std::size_t index) {
  std::string name = "keys " + h.name;
  if (c.plaintext) {
    r.ok(name, "plaintext links (every host on loopback): no keys to load");
    return;
  }
  try {
    (void)bus::bus_security_for(c, h.name);
    r.ok(name, h.secret_key_file + " is the secret half of host " + h.name + "'s public_key, readable by its owner only");
  } catch (const std::exception& e) {
    r.fail(name, e.what(),
           "the node would refuse to start: fix the key file (chmod 600; its owner is the nodes' user; "
           "vidline keygen), or /hosts/" + std::to_string(index) + "/secret_key_file and public_key");
  }
}

void check_disk(report& r, const config::host& h, std::size_t index, const preflight_options& o) {
  std::string name = "disk " + h.name;
  std::error_code ec;
  fs::create_directories(h.data_dir, ec);
  if (ec) {
    r.fail(name, "cannot create data directory " + h.data_dir + ": " + ec.message(),
           "fix the permissions, or point /hosts/" + std::to_string(index) + "/data_dir elsewhere");
    return;
  }
  std::string probe = h.data_dir + "/.preflight-" + std::to_string(::getpid());
  {
    std::ofstream out(probe);
    out << "probe";
    out.flush();
    if (!out) {
      fs::remove(probe, ec);
      r.fail(name, "cannot write in " + h.data_dir + " (disk full or read-only)",
             "free space or fix permissions on " + h.data_dir);
      return;
    }
  }
  fs::remove(probe, ec);
  struct statvfs st{};
  if (::statvfs(existing_ancestor(h.data_dir).c_str(), &st) != 0) {
    r.fail(name, "cannot stat the file system of " + h.data_dir + ": " + std::strerror(errno), "");
    return;
  }
  uint64_t free_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  if (free_bytes < o.min_free_bytes)
    r.fail(name, "only " + human_bytes(free_bytes) + " free on the file system of " + h.data_dir +
                   ", need " + human_bytes(o.min_free_bytes) + " for latents and outputs",
           "free space there, or move /hosts/" + std::to_string(index) +
             "/data_dir to a larger disk (--min-free sets the need)");
  else
    r.ok(name, human_bytes(free_bytes) + " free for " + h.data_dir + " (need " +
                 human_bytes(o.min_free_bytes) + ")");
}

/// Runtime directories where backend programs on `host` put Unix sockets.
void check_socket_paths(report& r, const config::cluster& c, const scope& s,
                        const config::host& h) {
  std::vector<std::pair<std::string, std::string>> dirs;  // (what, dir)
  const char* tmp = std::getenv("TMPDIR");
  dirs.emplace_back("TMPDIR the node's children inherit", tmp && *tmp ? tmp : "/tmp");
  for (auto& [bname, hosts] : s.backend_hosts) {
    if (!hosts.count(h.name))
      continue;
    auto* b = c.find_backend(bname);
    if (b == nullptr)
      continue;
    try {
      if (b->type == "exec") {
        auto o = backends::exec::parse_exec_options(b->name, b->options);
        auto scan = [&](const std::vector<std::pair<std::string, std::string>>& env, const std::string& where) {
          for (auto& [k, v] : env)
            if (k == "RAY_TMPDIR" || k == "RAYLIGHT_RAY_TMPDIR" || k == "TMPDIR")
              dirs.emplace_back("backend " + bname + " " + where + k, v);
        };
        scan(o.env, "env ");
        for (auto* st : {&o.encode, &o.sample, &o.decode})
          if (*st)
            scan((*st)->env, "stage env ");
      } else if (b->type == "comfyui") {
        auto o = backends::comfyui::parse_comfyui_options(b->name, b->options);
        if (o.process)
          dirs.emplace_back("backend " + bname + " process runtime_dir",
                            o.process->runtime_dir.empty()
                              ? backends::process::default_runtime_dir(o.process->base_dir)
                              : o.process->runtime_dir);
      }
    } catch (const std::exception&) {  // reported by the backend's own line
    }
  }
  std::vector<std::string> problems, fine;
  for (auto& [what, dir] : dirs) {
    if (auto why = backends::process::runtime_dir_problem(dir); !why.empty())
      problems.push_back(what + ": " + why);
    else
      fine.push_back(dir);
  }
  std::string name = "socket paths " + h.name;
  if (!problems.empty())
    r.fail(name, join(problems, "; "),
           "shorten it: Unix socket paths hold at most " +
             std::to_string(backends::process::unix_socket_path_max) + " bytes");
  else
    r.ok(name, "runtime directories short enough for Unix sockets: " + join(fine));
}

void check_exec_backend(report& r, const config::backend& b, bool local) {
  std::string name = "backend " + b.name;
  backends::exec::exec_options o;
  try {
    o = backends::exec::parse_exec_options(b.name, b.options);
  } catch (const std::exception& e) {
    r.fail(name, std::string("options: ") + e.what(), "fix the backend's options in the config");
    return;
  }
  if (!local) {
    r.ok(name, "exec: options valid (its programs are checked on its hosts)");
    return;
  }
  std::vector<std::string> found, problems;
  for (auto [stage, cmd] : {std::pair{"encode", &o.encode}, {"sample", &o.sample}, {"decode", &o.decode}}) {
    if (!*cmd)
      continue;
    std::string p = find_program((*cmd)->argv[0]);
    if (p.empty())
      problems.push_back(std::string(stage) + ": " + (*cmd)->argv[0] + " not found or not executable");
    else
      found.push_back(std::string(stage) + " " + p);
  }
  if (!problems.empty())
    r.fail(name, join(problems, "; "), "install the program, or fix argv[0] in the backend's options");
  else
    r.ok(name, "exec: " + join(found, "; "));
}

void check_worker_backend(report& r, const config::backend& b, bool local) {
  std::string name = "backend " + b.name;
  backends::worker::worker_options o;
  try {
    o = backends::worker::parse_worker_options(b.name, b.options);
  } catch (const std::exception& e) {
    r.fail(name, std::string("options: ") + e.what(), "fix the backend's options in the config");
    return;
  }
  if (!local) {
    r.ok(name, "worker: options valid (its program is checked on its hosts)");
    return;
  }
  std::string p = find_program(o.argv[0]);
  if (p.empty())
    r.fail(name, "worker program " + o.argv[0] + " not found or not executable",
           "install the program, or fix argv[0] in the backend's options");
  else
    r.ok(name, "worker: " + p + " (protocol " + std::to_string(backends::worker::protocol_version) + ")");
}

/// Checks a comfyui backend; records the server clock's offset for the clock line.
void check_comfyui_backend(report& r, const config::backend& b, bool local,
                           const preflight_options& po, std::vector<std::pair<std::string, double>>& offsets) {
  std::string name = "backend " + b.name;
  backends::comfyui::comfyui_options o;
  try {
    o = backends::comfyui::parse_comfyui_options(b.name, b.options);
  } catch (const std::exception& e) {
    r.fail(name, std::string("options: ") + e.what(), "fix the backend's options in the config");
    return;
  }
  bool loopback = o.server.host == "127.0.0.1" || o.server.host == "localhost" || o.server.host == "::1";
  if (loopback && !local) {
    r.ok(name, "comfyui at " + o.url + ": on another host's loopback, checked there");
    return;
  }
  backends::comfyui::endpoint e = o.server;
  e.connect_timeout_s = po.timeout_s;
  e.read_timeout_s = std::max(po.timeout_s, 5.0);
  backends::comfyui::client cl(e);
  json stats, info;
  try {
    httplib::Client http(e.host, e.port);
    http.set_connection_timeout(std::chrono::milliseconds(static_cast<int64_t>(po.timeout_s * 1000)));
    double sent = unix_now();
    auto res = http.Get("/system_stats");
    double received = unix_now();
    if (res && res->has_header("Date"))
      if (auto off = date_offset(res->get_header_value("Date"), sent, received))
        offsets.emplace_back(b.name, *off);
    stats = cl.system_stats();
    info = cl.object_info();
  } catch (const std::exception& ex) {
    if (o.process) {  // its owner starts it on its first job: check what it will need
      std::string program = find_program(o.process->argv[0]);
      if (program.empty())
        r.fail(name, "comfyui process program " + o.process->argv[0] + " not found or not executable",
               "fix options.process.argv[0] (e.g. the python3 of ComfyUI's venv)");
      else
        r.ok(name, "comfyui at " + o.url + " is not up; its owner starts it on its first job with " +
                     program + " in " + o.process->base_dir);
      return;
    }
    r.fail(name, std::string("comfyui: ") + ex.what(),
           "start ComfyUI at " + o.url + " (--listen/--port), or fix options.url");
    return;
  }
  std::set<std::string> needed;
  for (auto* w : {&o.sample_workflow, &o.decode_workflow})
    if (*w)
      for (auto& [id, node] : (*w)->items())
        if (node.is_object() && node.contains("class_type") && node["class_type"].is_string())
          needed.insert(node["class_type"].get<std::string>());
  std::vector<std::string> missing;
  for (auto& n : needed)
    if (!info.is_object() || !info.contains(n))
      missing.push_back(n);
  std::string version = stats.is_object() && stats.contains("system") && stats["system"].is_object()
                          ? stats["system"].value("comfyui_version", "?") : "?";
  std::vector<std::string> devices;
  if (stats.is_object() && stats.contains("devices") && stats["devices"].is_array())
    for (auto& d : stats["devices"])
      if (d.is_object())
        devices.push_back(d.value("name", "?"));
  if (!missing.empty())
    r.fail(name, "ComfyUI " + version + " at " + o.url + " lacks node classes the workflows use: " + join(missing),
           "install the custom nodes that provide them (e.g. Raylight), or fix the workflow");
  else
    r.ok(name, "ComfyUI " + version + " at " + o.url + ", " + std::to_string(needed.size()) +
                 " node classes present, devices: " + (devices.empty() ? std::string("none") : join(devices)));
}

void check_clock(report& r, const std::vector<std::pair<std::string, double>>& offsets) {
  timex t{};
  int state = ::adjtimex(&t);
  std::vector<std::string> far, near;
  for (auto& [who, off] : offsets) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%+.1f s", off);
    (std::fabs(off) > 2.0 ? far : near).push_back(who + " " + buf);
  }
  if (!far.empty())
    r.fail("clock", "backend hosts' clocks differ from this one's by more than 2 s: " + join(far),
           "run NTP (chrony or systemd-timesyncd) on every host");
  else if (state == TIME_ERROR || (t.status & STA_UNSYNC))
    r.warn("clock", "this host's clock is not synchronised by NTP" +
                      (near.empty() ? std::string() : "; backend offsets: " + join(near)),
           "run NTP (chrony or systemd-timesyncd) on every host; vidline's nodes do not ask each "
           "other's time, so skew between nodes is not measured here");
  else
    r.ok("clock", "synchronised (estimated error " + std::to_string(t.esterror) + " us)" +
                    (near.empty() ? std::string() : "; backend offsets: " + join(near)));
}

} // namespace

uint64_t parse_bytes(const std::string& text) {
  std::size_t used = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &used);
  } catch (const std::exception&) {
    throw std::invalid_argument("not a size: '" + text + "'");
  }
  std::string unit = text.substr(used);
  int shift = 0;
  if (unit.empty() || unit == "B")
    shift = 0;
  else if (unit == "K" || unit == "KiB")
    shift = 10;
  else if (unit == "M" || unit == "MiB")
    shift = 20;
  else if (unit == "G" || unit == "GiB")
    shift = 30;
  else if (unit == "T" || unit == "TiB")
    shift = 40;
  else
    throw std::invalid_argument("unknown unit in '" + text + "' (use K, M, G or T)");
  if (shift > 0 && v > (~0ull >> shift))
    throw std::invalid_argument("too large: '" + text + "'");
  return v << shift;
}

std::vector<check_line> run_preflight(const preflight_options& o) {
  report r;
  config::cluster c;
  try {
    c = config::load(o.config);
    r.ok("config", o.config + ": cluster " + c.name + ", " + std::to_string(c.hosts.size()) + " hosts");
  } catch (const std::exception& e) {
    r.fail("config", e.what(), "fix the file (the path names the field)");
    return r.lines;
  }
  // As run and plan resolve it: "auto" is every pool and decoder.
  const std::optional<config::mode> m = actors::coordinator::resolve_mode(c, o.mode);
  if (!m) {
    r.fail("mode", "no mode '" + o.mode + "' in the config", "use one of: " + actors::coordinator::known_modes(c));
    return r.lines;
  }
  r.ok("mode", m->name + ": pools " + join(m->pools) + "; decoders " + join(m->decoders) +
                 (c.find_mode(m->name) ? "" : " (every pool and decoder, policy auto)"));
  for (auto& l : check_profile_kinds(c, *m))
    r.lines.push_back(std::move(l));
  scope s = scope_of(c, *m);

  std::set<std::string> here;
  try {
    for (auto* h : hosts_here(c, o.hosts))
      here.insert(h->name);
  } catch (const std::invalid_argument& e) {
    r.fail("hosts", e.what(), "check --host");
  }
  if (here.empty())
    r.warn("hosts", "no host of the config is on this machine: local checks skipped",
           "run preflight on each host, or name this machine's hosts with --host");
  for (std::size_t i = 0; i < c.hosts.size(); ++i) {
    const auto& h = c.hosts[i];
    if (!s.hosts.count(h.name))
      continue;
    r.host = h.name;
    check_node(r, c, h, i, here.count(h.name) > 0, o);
  }
  for (std::size_t i = 0; i < c.hosts.size(); ++i) {
    const auto& h = c.hosts[i];
    if (!here.count(h.name) || !s.hosts.count(h.name))
      continue;
    r.host = h.name;
    check_keys(r, c, h, i);
    check_disk(r, h, i, o);
    check_socket_paths(r, c, s, h);
    if (auto g = s.host_gpus.find(h.name); g != s.host_gpus.end())
      for (auto& l : check_gpu_cards(c, h, g->second, gpu::options_from_environment()))
        r.lines.push_back(std::move(l));
  }
  r.host.clear();
  std::vector<std::pair<std::string, double>> offsets;
  for (auto& [bname, hosts] : s.backend_hosts) {
    auto* b = c.find_backend(bname);
    if (b == nullptr)
      continue;
    bool local = std::any_of(hosts.begin(), hosts.end(), [&](const std::string& h) { return here.count(h) > 0; });
    if (b->type == "exec")
      check_exec_backend(r, *b, local);
    else if (b->type == "worker")
      check_worker_backend(r, *b, local);
    else if (b->type == "comfyui")
      check_comfyui_backend(r, *b, local, o, offsets);
    else
      r.ok("backend " + bname, b->type + " (no GPU work, nothing to reach)");
  }
  check_clock(r, offsets);
  return r.lines;
}

std::string format_report(const std::vector<check_line>& lines) {
  std::ostringstream out;
  int ok = 0, warn = 0, fail = 0;
  std::size_t width = 0;
  for (auto& l : lines)
    width = std::max(width, l.name.size());
  for (auto& l : lines) {
    const char* tag = l.status == lvl::ok ? "ok  " : l.status == lvl::warn ? "warn" : "FAIL";
    (l.status == lvl::ok ? ok : l.status == lvl::warn ? warn : fail)++;
    out << tag << "  " << l.name << std::string(width - l.name.size() + 2, ' ') << l.detail;
    if (!l.fix.empty() && l.status != lvl::ok)
      out << "  -> fix: " << l.fix;
    out << "\n";
  }
  out << "preflight: " << ok << " ok, " << warn << " warnings, " << fail << " failed\n";
  return out.str();
}

std::string format_report_json(const preflight_options& o, const std::vector<check_line>& lines) {
  json checks = json::array(), hosts = json::object(), errors = json::array();
  int ok = 0, warn = 0, fail = 0;
  for (auto& l : lines) {
    const char* tag = l.status == lvl::ok ? "ok" : l.status == lvl::warn ? "warn" : "fail";
    (l.status == lvl::ok ? ok : l.status == lvl::warn ? warn : fail)++;
    checks.push_back({{"status", tag}, {"name", l.name},
                      {"host", l.host.empty() ? json(nullptr) : json(l.host)},
                      {"detail", l.detail}, {"fix", l.fix.empty() ? json(nullptr) : json(l.fix)}});
    if (!l.host.empty()) {
      auto& h = hosts[l.host];
      if (!h.contains("ok"))
        h = {{"ok", true}, {"checks", json::array()}};
      h["checks"].push_back(l.name);
      if (l.status == lvl::fail)
        h["ok"] = false;
    }
    if (l.status == lvl::fail)
      errors.push_back(l.name + ": " + l.detail);
  }
  json j{{"verb", "preflight"}, {"config", o.config}, {"mode", o.mode}, {"ok", fail == 0},
         {"exit_code", fail == 0 ? exit_code::ok : exit_code::job_failed}, {"checks", checks}, {"hosts", hosts},
         {"summary", {{"ok", ok}, {"warn", warn}, {"fail", fail}}}, {"errors", errors}};
  return j.dump(2) + "\n";
}

bool any_failed(const std::vector<check_line>& lines) {
  return std::any_of(lines.begin(), lines.end(), [](const check_line& l) { return l.status == lvl::fail; });
}

} // namespace vidline::nodes::verbs
