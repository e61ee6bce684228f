// bench_handoff: the data plane's benchmarks (`launch/bench handoff`).
//
// The subject is the production path between two processes: each "endpoint" runs the
// node's own bus (nodes/bus.hpp) with its latent_server and latent_fetcher. The receiver
// pulls a latent from the source in chunks over ZeroMQ, hashes SHA-256 as chunks arrive,
// writes, fsyncs, renames (and fsyncs the directory), then acknowledges to the source and
// waits for the answer. A handoff's time runs from fetch_latent() to that answer.
//
//   loopback  throughput vs raw TCP (iperf3) and single-core SHA-256 (OpenSSL), for a
//             13 MiB and a 120 MiB latent; target >= 0.85 x min(TCP, SHA-256)
//   netns     a 13 MiB latent between two network namespaces joined by a veth pair shaped
//             with tbf to 10 Gbit/s, vs iperf3 moving 13 MiB over that link; target <= 1.3 x
//   memory    VmHWM of both endpoints while 20 latents of 120 MiB go back to back, against
//             the bound the bench states (idle VmHWM + 3 x chunk_window x chunk_bytes)
//
// Baselines and subjects are interleaved rep by rep; figures are medians. Every handoff
// measured is checked afterwards (size and SHA-256 of the file). The namespaces are made
// and removed by launch/bench. Variants of the handoff (e.g. an encrypted bulk channel) are
// rows of `variants()`.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <msgpack.hpp>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "backends/exec/child.hpp"
#include "common/sha256.hpp"
#include "nodes/bus.hpp"
#include "nodes/keys.hpp"

using namespace vidline;
namespace fs = std::filesystem;
using steady = std::chrono::steady_clock;

namespace {

constexpr uint64_t mib = 1ull << 20;
constexpr const char* ack_type = "bench_latent_ack";      // receiver -> source
constexpr const char* acked_type = "bench_latent_acked";  // source -> receiver

double ms_between(steady::time_point a, steady::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double median(std::vector<double> v) {
  if (v.empty())
    return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double min_of(const std::vector<double>& v) {
  return v.empty() ? NAN : *std::min_element(v.begin(), v.end());
}

double max_of(const std::vector<double>& v) {
  return v.empty() ? NAN : *std::max_element(v.begin(), v.end());
}

/// Processes this program started and has not reaped: ended by die().
std::vector<pid_t>& children() {
  static std::vector<pid_t> pids;
  return pids;
}

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "bench_handoff: %s\n", why.c_str());
  for (pid_t pid : children())
    ::kill(pid, SIGKILL);
  std::exit(2);
}

/// Command-line options as --name value pairs after the subcommand.
struct args {
  std::map<std::string, std::vector<std::string>> values;

  args() = default;
  args(int argc, char** argv, int first) {
    for (int i = first; i < argc; ++i) {
      std::string a = argv[i];
      if (a.rfind("--", 0) != 0 || i + 1 >= argc)
        die("expected --name value, got '" + a + "'");
      values[a.substr(2)].push_back(argv[++i]);
    }
  }
  bool has(const std::string& k) const { return values.count(k) != 0; }
  std::string get(const std::string& k, const std::string& def = "") const {
    auto it = values.find(k);
    return it == values.end() ? def : it->second.back();
  }
  std::string need(const std::string& k) const {
    if (!has(k))
      die("--" + k + " is required");
    return get(k);
  }
  long long num(const std::string& k, long long def) const {
    if (!has(k))
      return def;
    try {
      return std::stoll(get(k));
    } catch (const std::exception&) {
      die("--" + k + " must be a number, got '" + get(k) + "'");
    }
  }
};

// -- the endpoint: one bus in its own process, driven by lines on stdin --------------------

/// Waits for answers to acknowledgements, by correlation id.
struct ack_waiter {
  std::mutex m;
  std::condition_variable cv;
  std::map<uint64_t, bool> answered;

  bool wait(uint64_t id, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(m);
    return cv.wait_for(lock, timeout, [&] { return answered.count(id) != 0; });
  }
  void answer(uint64_t id) {
    {
      std::lock_guard<std::mutex> lock(m);
      answered[id] = true;
    }
    cv.notify_all();
  }
};

/// `bench_handoff endpoint --self A --bind tcp://ADDR:PORT --peer B=tcp://ADDR:PORT
///  --dir DIR [--chunk-bytes N] [--chunk-window N]`. Commands on stdin, one per line:
///   wait_peer                     -> "peer_up" once the peer's heartbeats arrive
///   fetch SHA BYTES DEST          -> "ok HANDOFF_MS FETCH_MS" or "fail OUTCOME REASON"
///   quit
int endpoint_main(const args& a) {
  // stdout carries the protocol: logs go to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("endpoint"));
  spdlog::set_level(spdlog::level::warn);

  nodes::bus_options o;
  o.self = a.need("self");
  o.bind_endpoint = a.need("bind");
  const std::string peer_spec = a.need("peer");
  const auto eq = peer_spec.find('=');
  if (eq == std::string::npos)
    die("--peer must be NAME=ENDPOINT");
  const std::string peer = peer_spec.substr(0, eq);
  o.peers[peer] = peer_spec.substr(eq + 1);
  o.latent_dir = a.need("dir");
  o.knobs.chunk_bytes = static_cast<uint32_t>(a.num("chunk-bytes", o.knobs.chunk_bytes));
  o.knobs.chunk_window = static_cast<int>(a.num("chunk-window", o.knobs.chunk_window));
  if (a.has("bulk-bind")) {
    o.bulk_bind_endpoint = a.need("bulk-bind");
    const std::string bp = a.need("bulk-peer");
    const auto beq = bp.find('=');
    if (beq == std::string::npos || bp.substr(0, beq) != peer)
      die("--bulk-peer must be " + peer + "=ENDPOINT");
    o.bulk_peers[peer] = bp.substr(beq + 1);
    o.bulk_admit_addresses = a.values.at("bulk-admit");
  }
  if (a.has("keys")) {
    // CURVE as a node runs it: DIR/<self>.key and .pub, DIR/<peer>.pub (vidline keygen).
    const std::string dir = a.get("keys");
    o.security.plaintext = false;
    o.security.secret_z85 = nodes::read_secret_key(dir + "/" + o.self + ".key");
    o.security.public_z85 = nodes::read_public_key(dir + "/" + o.self + ".pub");
    o.security.host_keys[o.self] = o.security.public_z85;
    o.security.host_keys[peer] = nodes::read_public_key(dir + "/" + peer + ".pub");
  } else {
    o.security.plaintext_anywhere = true;  // the unauthenticated baseline, namespaces too
  }

  std::mutex m;
  std::condition_variable cv;
  bool peer_up = false;
  ack_waiter acks;
  nodes::bus* self_bus = nullptr;
  auto on_message = [&](const nodes::inbound& in) {
    if (in.env.type == ack_type && self_bus != nullptr) {
      // The source side of the acknowledgement: answer at once on the same connection.
      self_bus->reply(in.reply_to, acked_type, in.body, in.env.id);
    } else if (in.env.type == acked_type) {
      acks.answer(in.env.correlation);
    }
  };
  auto on_peer = [&](const msg::peer_event& ev) {
    std::lock_guard<std::mutex> lock(m);
    peer_up = ev.up;
    cv.notify_all();
  };
  nodes::bus b(o, on_message, on_peer);
  self_bus = &b;
  b.start();

  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "quit")
      break;
    if (cmd == "wait_peer") {
      std::unique_lock<std::mutex> lock(m);
      if (!cv.wait_for(lock, std::chrono::seconds(30), [&] { return peer_up; }))
        die(o.self + ": peer " + peer + " not up after 30 s");
      std::printf("peer_up\n");
    } else if (cmd == "fetch") {
      std::string sha, dest;
      uint64_t bytes = 0;
      in >> sha >> bytes >> dest;
      std::promise<nodes::fetch_result> done;
      auto f = done.get_future();
      const auto t0 = steady::now();
      b.fetch_latent(peer, sha, bytes, dest,
                     [&done](const nodes::fetch_result& r) { done.set_value(r); });
      if (f.wait_for(std::chrono::seconds(120)) != std::future_status::ready)
        die(o.self + ": fetch of " + sha + " did not end in 120 s");
      const nodes::fetch_result r = f.get();
      const auto t_fetched = steady::now();
      if (r.outcome != nodes::fetch_outcome::ok) {
        std::printf("fail %s %s\n", nodes::to_string(r.outcome), r.error.c_str());
      } else {
        // The acknowledgement: the source hears that the latent is safe here.
        msgpack::sbuffer body;  // every message body is a map
        msgpack::packer<msgpack::sbuffer> pk(body);
        pk.pack_map(1);
        pk.pack(std::string("sha256"));
        pk.pack(sha);
        const uint64_t id = b.send(peer, "bench", ack_type, std::string_view(body.data(), body.size()));
        if (id == 0 || !acks.wait(id, std::chrono::seconds(10))) {
          std::printf("fail ack no answer to the acknowledgement\n");
        } else {
          const auto t_acked = steady::now();
          std::printf("ok %.3f %.3f\n", ms_between(t0, t_acked), ms_between(t0, t_fetched));
        }
      }
    } else {
      std::printf("error unknown command '%s'\n", cmd.c_str());
    }
    std::fflush(stdout);
  }
  b.stop();
  return 0;
}

// -- the orchestrator: processes --------------------------------------------------------------

/// A child process, its stdin and stdout on pipes (stderr to a log file).
class child {
public:
  child(const std::vector<std::string>& argv, const std::string& log_path, bool piped) {
    int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1};
    if (piped && (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0))
      die("pipe failed");
    // The project's spawner: a group of its own, killed with the bench however it dies
    // (iperf3 -s in a namespace must not outlive it).
    vidline::backends::exec::child_spec cs;
    cs.argv = argv;
    cs.env = vidline::backends::exec::current_environment();
    cs.stdout_path = cs.stderr_path = log_path;
    cs.append = true;
    if (piped) {
      cs.stdin_fd = in_pipe[0];
      cs.stdout_fd = out_pipe[1];
      cs.stdout_path.clear();  // stderr alone to the log
    }
    std::string error;
    pid_ = vidline::backends::exec::spawn_child(cs, error);
    if (pid_ < 0)
      die(error);
    children().push_back(pid_);
    if (piped) {
      ::close(in_pipe[0]);
      ::close(out_pipe[1]);
      in_ = in_pipe[1];
      out_ = out_pipe[0];
    }
    name_ = argv.size() > 4 ? argv[0] + " ... " + argv[4] : argv[0];
  }
  ~child() { stop(); }
  child(const child&) = delete;
  child& operator=(const child&) = delete;

  pid_t pid() const { return pid_; }

  void send(const std::string& line) {
    const std::string l = line + "\n";
    if (::write(in_, l.data(), l.size()) != static_cast<ssize_t>(l.size()))
      die("cannot write to " + name_);
  }

  /// The next line of output; dies on end of output or after `timeout`.
  std::string read_line(std::chrono::milliseconds timeout) {
    const auto deadline = steady::now() + timeout;
    for (;;) {
      const auto nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                              steady::now());
      if (left.count() <= 0)
        die(name_ + ": no answer in " + std::to_string(timeout.count()) + " ms");
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR)
        die("poll failed");
      if (p.revents & (POLLIN | POLLHUP)) {
        char tmp[4096];
        const ssize_t n = ::read(out_, tmp, sizeof tmp);
        if (n <= 0)
          die(name_ + " ended (see its log)");
        buf_.append(tmp, static_cast<std::size_t>(n));
      }
    }
  }

  /// Peak resident set (VmHWM) in KiB, from /proc.
  long vm_hwm_kib() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("VmHWM:", 0) == 0)
        return std::stol(line.substr(6));
    die("no VmHWM for pid " + std::to_string(pid_));
  }

  /// CPU time of each of its threads so far, in ms, by thread id
  /// (/proc/<pid>/task/*/schedstat).
  std::map<std::string, double> thread_cpu_ms() const {
    std::map<std::string, double> r;
    for (const auto& t : fs::directory_iterator("/proc/" + std::to_string(pid_) + "/task")) {
      std::ifstream in(t.path() / "schedstat");
      double on_cpu_ns = 0;
      if (in >> on_cpu_ns)
        r[t.path().filename().string()] = on_cpu_ns / 1e6;
    }
    return r;
  }

  /// Ends the child (quit on stdin, then SIGTERM, then SIGKILL) and reaps it.
  void stop() {
    if (pid_ <= 0)
      return;
    const bool piped = in_ >= 0;
    if (piped) {
      [[maybe_unused]] auto n = ::write(in_, "quit\n", 5);
      ::close(in_);
      in_ = -1;
    }
    for (int sig : {0, SIGTERM, SIGKILL}) {
      if (sig == 0 && !piped)
        continue;  // only an endpoint reads "quit"
      if (sig != 0)
        ::kill(pid_, sig);
      const auto deadline = steady::now() + std::chrono::seconds(3);
      while (steady::now() < deadline) {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
          auto& all = children();
          all.erase(std::remove(all.begin(), all.end(), pid_), all.end());
          pid_ = -1;
          if (out_ >= 0)
            ::close(out_);
          out_ = -1;
          return;
        }
        ::usleep(2000);
      }
    }
  }

private:
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  std::string buf_;
  std::string name_;
};

/// Runs a command to its end; its stdout, or dies when it fails.
std::string run_capture(const std::vector<std::string>& argv, const std::string& log_path,
                        int* rc = nullptr) {
  std::string cmd;
  for (auto& a : argv)
    cmd += "'" + a + "' ";
  cmd += "2>>'" + log_path + "'";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr)
    die("cannot run " + cmd);
  std::string out;
  char tmp[4096];
  std::size_t n;
  while ((n = std::fread(tmp, 1, sizeof tmp, p)) > 0)
    out.append(tmp, n);
  const int status = ::pclose(p);
  if (rc != nullptr)
    *rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return out;
}

std::vector<int> free_ports(int n) {
  std::vector<int> fds, ports;
  for (int i = 0; i < n; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      die("cannot find a free port");
    fds.push_back(fd);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int fd : fds)
    ::close(fd);
  return ports;
}

// -- the orchestrator: latents, baselines -----------------------------------------------------

/// Writes a latent of `bytes` pseudo-random bytes into `dir` as <sha256>.latent, streaming
/// (never the whole latent in memory); returns its digest.
std::string make_latent(const std::string& dir, uint64_t bytes, uint64_t seed) {
  const std::string tmp = dir + "/making.tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> block(mib / 8);
  vidline::sha256 h;
  for (uint64_t done = 0; done < bytes;) {
    for (auto& w : block)
      w = rng();
    const auto n = static_cast<std::size_t>(std::min<uint64_t>(mib, bytes - done));
    h.update(block.data(), n);
    out.write(reinterpret_cast<const char*>(block.data()), static_cast<std::streamsize>(n));
    done += n;
  }
  out.close();
  if (!out)
    die("cannot write " + tmp);
  const std::string sha = to_hex(h.finish());
  fs::rename(tmp, dir + "/" + sha + ".latent");
  return sha;
}

double thread_cpu_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

/// SHA-256 over a buffer on one core (OpenSSL EVP, 1 MiB updates like the receiver), in
/// MB/s: per second of this thread's CPU time (the core's rate, whatever else runs) and
/// per second of wall time (what it got on this machine just now).
struct sha_rates {
  double cpu = 0, wall = 0;
};

sha_rates sha256_rate(const std::vector<char>& buf) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  const double c0 = thread_cpu_ms();
  const auto t0 = steady::now();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  for (std::size_t off = 0; off < buf.size(); off += mib)
    EVP_DigestUpdate(ctx, buf.data() + off, std::min<std::size_t>(mib, buf.size() - off));
  EVP_DigestFinal_ex(ctx, out, &len);
  const double ms = ms_between(t0, steady::now());
  const double cpu_ms = thread_cpu_ms() - c0;
  EVP_MD_CTX_free(ctx);
  const double mb = static_cast<double>(buf.size()) / 1e6;
  return {mb / (cpu_ms / 1e3), mb / (ms / 1e3)};
}

/// The device flush: fsync of a file with nothing left to write, median of 5, in ms.
double clean_fsync_ms(const std::string& dir) {
  const std::string path = dir + "/flush.probe";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    die("cannot create " + path);
  [[maybe_unused]] auto w = ::write(fd, "x", 1);
  ::fsync(fd);
  std::vector<double> ms;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = steady::now();
    ::fsync(fd);
    ms.push_back(ms_between(t0, steady::now()));
  }
  ::close(fd);
  ::unlink(path.c_str());
  return median(ms);
}

/// CPU used between two thread_cpu_ms() readings: in all, and by the busiest thread (what
/// no number of cores can spread: the process's critical path, whatever the load).
struct cpu_use {
  double total = 0, busiest = 0;
};

cpu_use cpu_between(const std::map<std::string, double>& before,
                    const std::map<std::string, double>& after) {
  cpu_use u;
  for (const auto& [tid, ms] : after) {
    auto it = before.find(tid);
    const double d = ms - (it == before.end() ? 0 : it->second);
    u.total += d;
    u.busiest = std::max(u.busiest, d);
  }
  return u;
}

/// One iperf3 run: bytes moved and the sender's seconds (iperf3's own figure).
struct iperf_result {
  double bytes = 0, seconds = 0;
  double mb_per_s() const { return bytes / 1e6 / seconds; }
};

// -- the orchestrator: the setting of one benchmark -------------------------------------------

/// Where the two endpoints run: loopback, or one namespace each.
struct site {
  std::string ns_a, ns_b;  ///< empty: no namespace
  std::string addr_a = "127.0.0.1", addr_b = "127.0.0.1";
  int port_a = 0, port_b = 0, port_iperf = 0;
  int bulk_a = 0, bulk_b = 0;  ///< the bulk channel's ports (variants with bulk)

  std::vector<std::string> in(const std::string& ns, std::vector<std::string> argv) const {
    if (ns.empty())
      return argv;
    std::vector<std::string> r{"ip", "netns", "exec", ns};
    r.insert(r.end(), argv.begin(), argv.end());
    return r;
  }
};

/// One way of running the handoff: a row of every handoff table.
struct variant {
  std::string name;
  std::vector<std::string> endpoint_args;  ///< extra arguments of both endpoints
  bool bulk = false;                       ///< latents on the bulk channel (no CURVE)
  bool target = false;                     ///< its rows carry the targets
};

/// Where run_main put the endpoints' CURVE key pairs (A and B).
std::string& keys_dir() {
  static std::string dir;
  return dir;
}

/// The handoff variants measured: "plaintext" is the bus without authentication (nodes
/// allow it on loopback only); "curve_bulk" is a node with keys and a bulk_port: CURVE on
/// the link that carries the digest and the acknowledgement, the latent's requests and
/// chunks on the bulk channel (unencrypted, every byte checked against the digest);
/// "curve" is a node with keys and no bulk_port: the latents encrypted too. The plaintext
/// and curve_bulk rows carry the targets; curve is reported (docs/security.md).
std::vector<variant> variants() {
  return {{"plaintext", {}, false, true},
          {"curve_bulk", {"--keys", keys_dir()}, true, true},
          {"curve", {"--keys", keys_dir()}, false, false}};
}

/// The source ("A", serving from dir_a) and receiver ("B", writing into dir_b) endpoints.
struct endpoint_pair {
  std::unique_ptr<child> a, b;
  std::string dir_a, dir_b;

  endpoint_pair(const std::string& exe, const site& s, const std::string& work,
                const std::string& dir_b_override, const variant& v, const args& opts) {
    dir_a = work + "/a";
    dir_b = dir_b_override.empty() ? work + "/b" : dir_b_override;
    fs::create_directories(dir_a);
    fs::create_directories(dir_b);
    const std::string ep_a = "tcp://" + s.addr_a + ":" + std::to_string(s.port_a);
    const std::string ep_b = "tcp://" + s.addr_b + ":" + std::to_string(s.port_b);
    const std::string bulk_a = "tcp://" + s.addr_a + ":" + std::to_string(s.bulk_a);
    const std::string bulk_b = "tcp://" + s.addr_b + ":" + std::to_string(s.bulk_b);
    auto argv = [&](const std::string& self, const std::string& bind, const std::string& peer,
                    const std::string& dir) {
      std::vector<std::string> r{exe, "endpoint", "--self", self, "--bind", bind,
                                 "--peer", peer, "--dir", dir};
      if (v.bulk) {
        const bool is_a = self == "A";
        for (const std::string& x :
             {std::string("--bulk-bind"), is_a ? bulk_a : bulk_b, std::string("--bulk-peer"),
              is_a ? "B=" + bulk_b : "A=" + bulk_a, std::string("--bulk-admit"), s.addr_a,
              std::string("--bulk-admit"), s.addr_b})
          r.push_back(x);
      }
      for (const char* k : {"chunk-bytes", "chunk-window"})
        if (opts.has(k)) {
          r.push_back(std::string("--") + k);
          r.push_back(opts.get(k));
        }
      r.insert(r.end(), v.endpoint_args.begin(), v.endpoint_args.end());
      return r;
    };
    a = std::make_unique<child>(s.in(s.ns_a, argv("A", ep_a, "B=" + ep_b, dir_a)),
                                work + "/endpoint-a.log", true);
    b = std::make_unique<child>(s.in(s.ns_b, argv("B", ep_b, "A=" + ep_a, dir_b)),
                                work + "/endpoint-b.log", true);
    for (auto* c : {a.get(), b.get()}) {
      c->send("wait_peer");
      const std::string l = c->read_line(std::chrono::seconds(40));
      if (l != "peer_up")
        die("endpoint: expected peer_up, got '" + l + "'");
    }
  }

  /// One handoff A -> B; its time in ms (to the acknowledgement's answer). The file is
  /// checked (size, SHA-256) and removed afterwards.
  double handoff(const std::string& sha, uint64_t bytes) {
    const std::string dest = dir_b + "/" + sha + ".latent";
    b->send("fetch " + sha + " " + std::to_string(bytes) + " " + dest);
    const std::string l = b->read_line(std::chrono::seconds(150));
    std::istringstream in(l);
    std::string word;
    double total = 0, fetched = 0;
    in >> word >> total >> fetched;
    if (word != "ok")
      die("handoff of " + sha + " failed: " + l);
    uint64_t got = 0;
    if (sha256_file_hex(dest, &got) != sha || got != bytes)
      die("handoff of " + sha + ": " + dest + " is not the latent (" + std::to_string(got) +
          " bytes)");
    fs::remove(dest);
    return total;
  }
};

iperf_result iperf_once(const site& s, uint64_t bytes, const std::string& log) {
  // Client in A's place sends to the server in B's: the direction latents flow.
  const std::vector<std::string> argv =
      s.in(s.ns_a, {"iperf3", "-c", s.addr_b, "-p", std::to_string(s.port_iperf), "-n",
                    std::to_string(bytes), "-J"});
  const auto deadline = steady::now() + std::chrono::seconds(20);
  for (;;) {
    int rc = 0;
    const std::string out = run_capture(argv, log, &rc);
    if (rc == 0) {
      try {
        const auto j = nlohmann::json::parse(out);
        const auto& sent = j.at("end").at("sum_sent");
        return {sent.at("bytes").get<double>(), sent.at("seconds").get<double>()};
      } catch (const std::exception& e) {
        die(std::string("cannot read iperf3's JSON: ") + e.what());
      }
    }
    if (steady::now() > deadline)  // the server may still be starting: retry until then
      die("iperf3 client failed for 20 s (see " + log + ")");
    ::usleep(50000);
  }
}

/// The first three fields of /proc/loadavg: how busy the machine was around a figure.
std::string loadavg() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

struct context {
  std::string exe, work;
  args opts;
  int reps = 7;
  bool all_met = true;

  void result(const std::string& name, double value, const char* unit, const std::string& cmp,
              bool met) {
    std::printf("RESULT %s %.3f %s target %s\n", name.c_str(), value, unit, cmp.c_str());
    std::fflush(stdout);
    all_met = all_met && met;
  }
};

// -- 1. loopback ------------------------------------------------------------------------------

void bench_loopback(context& c) {
  std::printf("\n== 1. loopback: verified + durable handoff vs raw TCP (iperf3) and single-core "
              "SHA-256\n");
  site s;
  const auto ports = free_ports(5);
  s.port_a = ports[0];
  s.port_b = ports[1];
  s.port_iperf = ports[2];
  s.bulk_a = ports[3];
  s.bulk_b = ports[4];
  const std::string work = c.work + "/loopback";
  fs::create_directories(work);
  child iperf_server(s.in(s.ns_b, {"iperf3", "-s", "-B", s.addr_b, "-p",
                                   std::to_string(s.port_iperf)}),
                     work + "/iperf3-server.log", false);
  std::printf("%-10s %-8s %9s %7s %9s %9s %9s %7s %7s %12s %12s %7s %9s\n", "variant",
              "latent", "handoff", "MB/s", "tcp MB/s", "sha MB/s", "min MB/s", "ratio",
              "target", "cpu ms A+B", "busiest A/B", "sha ms", "sha wall");
  for (const variant& v : variants()) {
    endpoint_pair p(c.exe, s, work, "", v, c.opts);
    for (uint64_t size : {13 * mib, 120 * mib}) {
      const std::string sha = make_latent(p.dir_a, size, size + 1);
      std::vector<char> buf(size);
      std::mt19937_64 rng(7);
      for (std::size_t i = 0; i < size; i += 8)
        *reinterpret_cast<uint64_t*>(buf.data() + i) = rng();
      // Warm-up: connections, page cache, allocator, CPU frequency.
      p.handoff(sha, size);
      iperf_once(s, size, work + "/iperf3-client.log");
      sha256_rate(buf);
      std::vector<double> hand, tcp, shar, shaw, ratio, cpu_a, cpu_b, top_a, top_b;
      for (int r = 0; r < c.reps; ++r) {
        const double t = iperf_once(s, size, work + "/iperf3-client.log").mb_per_s();
        const sha_rates hr = sha256_rate(buf);
        const double h = hr.cpu;
        shaw.push_back(hr.wall);
        const auto a0 = p.a->thread_cpu_ms(), b0 = p.b->thread_cpu_ms();
        const double ms = p.handoff(sha, size);
        const cpu_use ua = cpu_between(a0, p.a->thread_cpu_ms());
        const cpu_use ub = cpu_between(b0, p.b->thread_cpu_ms());
        cpu_a.push_back(ua.total);
        cpu_b.push_back(ub.total);
        top_a.push_back(ua.busiest);
        top_b.push_back(ub.busiest);
        const double rate = static_cast<double>(size) / 1e6 / (ms / 1e3);
        hand.push_back(rate);
        tcp.push_back(t);
        shar.push_back(h);
        ratio.push_back(rate / std::min(t, h));
      }
      fs::remove(p.dir_a + "/" + sha + ".latent");
      const double med_ms = static_cast<double>(size) / 1e6 / median(hand) * 1e3;
      const double r = median(ratio);
      const std::string label = std::to_string(size / mib) + " MiB";
      char cpu[32], top[32];
      std::snprintf(cpu, sizeof cpu, "%.1f+%.1f", median(cpu_a), median(cpu_b));
      std::snprintf(top, sizeof top, "%.1f/%.1f", median(top_a), median(top_b));
      std::printf("%-10s %-8s %7.1fms %7.0f %9.0f %9.0f %9.0f %7.3f %7s %12s %12s %7.1f %9.0f\n",
                  v.name.c_str(), label.c_str(), med_ms, median(hand), median(tcp),
                  median(shar), std::min(median(tcp), median(shar)), r, ">=0.85", cpu, top,
                  static_cast<double>(size) / 1e6 / median(shar) * 1e3, median(shaw));
      std::printf("%-10s %-8s (handoff MB/s over %d reps: min %.0f max %.0f; ratio: median of "
                  "each rep's against that rep's baselines)\n",
                  "", "", c.reps, min_of(hand), max_of(hand));
      if (v.target)
        c.result("handoff_loopback_" + v.name + "_" + std::to_string(size / mib) +
                     "mib_vs_min_tcp_sha",
                 r, "ratio", ">=0.85", r >= 0.85);
      else
        std::printf("RESULT handoff_loopback_%s_%llumib_vs_min_tcp_sha %.3f ratio target none "
                    "(reported)\n",
                    v.name.c_str(), static_cast<unsigned long long>(size / mib), r);
    }
  }
  std::printf("(sha MB/s: per second of the hashing thread's CPU time, the core's own rate; "
              "sha wall: per second of wall time, what one thread got here just then.\n"
              " sha ms: the CPU time of hashing the latent once. cpu ms A+B: CPU time of the source "
              "and the receiver process per handoff, all threads; both share this machine's %u "
              "cores with whatever else runs on it. busiest A/B: CPU time of each one's busiest "
              "thread per handoff, the least time the handoff takes on free cores)\n",
              std::thread::hardware_concurrency());
  std::printf("device flush here (fsync with nothing to write, median of 5): %.2f ms; a durable "
              "handoff waits for two (file, directory)\n",
              clean_fsync_ms(work));
}

// -- 2. two namespaces, veth shaped to 10 Gbit/s ----------------------------------------------

void bench_netns(context& c) {
  std::printf("\n== 2. namespaces %s <-> %s, veth shaped by tbf to 10 Gbit/s: 13 MiB handoff "
              "vs iperf3 moving 13 MiB\n",
              c.opts.get("ns-a").c_str(), c.opts.get("ns-b").c_str());
  site s;
  s.ns_a = c.opts.need("ns-a");
  s.ns_b = c.opts.need("ns-b");
  s.addr_a = c.opts.need("addr-a");
  s.addr_b = c.opts.need("addr-b");
  s.port_a = 17601;  // fresh namespaces: every port is free
  s.port_b = 17602;
  s.port_iperf = 17603;
  s.bulk_a = 17604;
  s.bulk_b = 17605;
  const std::string work = c.work + "/netns";
  fs::create_directories(work);
  child iperf_server(s.in(s.ns_b, {"iperf3", "-s", "-B", s.addr_b, "-p",
                                   std::to_string(s.port_iperf)}),
                     work + "/iperf3-server.log", false);
  const uint64_t size = 13 * mib;
  std::printf("%-10s %-24s %10s %10s %10s %10s %7s\n", "variant", "receiver's latent dir",
              "handoff ms", "iperf3 ms", "min/max", "ratio", "target");
  struct row {
    std::string name, dir_b;
    bool target;
  };
  std::vector<row> rows;
  for (const variant& v : variants())
    rows.push_back({v.name, "", v.target});
  // Diagnosis only: the same path with the receiver's files in memory, where fsync costs
  // nothing, shows how much of the time is the disk's flushes. Not durable, not a target.
  if (fs::exists("/dev/shm") && !c.opts.has("no-tmpfs-row"))
    rows.push_back({"plaintext", "/dev/shm", false});
  for (const row& rw : rows) {
    variant v;
    for (const variant& x : variants())
      if (x.name == rw.name)
        v = x;
    std::string dir_b;
    if (!rw.dir_b.empty())
      dir_b = rw.dir_b + "/vidline-bench-" + std::to_string(::getpid());
    endpoint_pair p(c.exe, s, work, dir_b, v, c.opts);
    const std::string sha = make_latent(p.dir_a, size, 13);
    p.handoff(sha, size);  // warm-up
    iperf_once(s, size, work + "/iperf3-client.log");
    std::vector<double> hand, ip, ratio;
    for (int r = 0; r < c.reps; ++r) {
      const double i = iperf_once(s, size, work + "/iperf3-client.log").seconds * 1e3;
      const double h = p.handoff(sha, size);
      ip.push_back(i);
      hand.push_back(h);
      ratio.push_back(h / i);
    }
    fs::remove(p.dir_a + "/" + sha + ".latent");
    p.a.reset();
    p.b.reset();
    if (!dir_b.empty())
      fs::remove_all(dir_b);
    const double r = median(ratio);
    char mm[32];
    std::snprintf(mm, sizeof mm, "%.1f/%.1f", min_of(hand), max_of(hand));
    std::printf("%-10s %-24s %10.2f %10.2f %10s %10.3f %7s\n", v.name.c_str(),
                rw.dir_b.empty() ? "disk (durable)" : "tmpfs (diagnosis only)", median(hand),
                median(ip), mm, r, rw.target ? "<=1.3" : "-");
    if (rw.target)
      c.result("handoff_netns_10gbit_13mib_" + v.name + "_vs_iperf3", r, "ratio", "<=1.3",
               r <= 1.3);
    else if (rw.dir_b.empty())
      std::printf("RESULT handoff_netns_10gbit_13mib_%s_vs_iperf3 %.3f ratio target none "
                  "(reported)\n", v.name.c_str(), r);
  }
  std::printf("(iperf3 ms: iperf3's own sender-side seconds for 13 MiB; handoff ms: from the "
              "request to the acknowledgement's answer)\n");
}

// -- 3. memory --------------------------------------------------------------------------------

void bench_memory(context& c) {
  const int count = static_cast<int>(c.opts.num("memory-latents", 20));
  const uint64_t size = static_cast<uint64_t>(c.opts.num("memory-mib", 120)) * mib;
  std::printf("\n== 3. memory: VmHWM of both endpoints while %d latents of %llu MiB go back to "
              "back\n",
              count, static_cast<unsigned long long>(size / mib));
  site s;
  const auto ports = free_ports(2);
  s.port_a = ports[0];
  s.port_b = ports[1];
  const std::string work = c.work + "/memory";
  fs::create_directories(work);
  config::knobs k;
  const uint64_t chunk = static_cast<uint64_t>(c.opts.num("chunk-bytes", k.chunk_bytes));
  const uint64_t window = static_cast<uint64_t>(c.opts.num("chunk-window", k.chunk_window));
  const uint64_t allowance_kib = 3 * window * chunk / 1024;
  endpoint_pair p(c.exe, s, work, "", variants().front(), c.opts);
  const long idle_a = p.a->vm_hwm_kib(), idle_b = p.b->vm_hwm_kib();
  std::vector<std::string> shas;
  for (int i = 0; i < count; ++i)
    shas.push_back(make_latent(p.dir_a, size, 1000 + static_cast<uint64_t>(i)));
  std::vector<double> ms;
  for (const auto& sha : shas) {
    ms.push_back(p.handoff(sha, size));
    fs::remove(p.dir_a + "/" + sha + ".latent");
  }
  const long peak_a = p.a->vm_hwm_kib(), peak_b = p.b->vm_hwm_kib();
  std::printf("bound per endpoint = its VmHWM when idle + 3 x chunk_window (%llu) x chunk_bytes "
              "(%llu KiB) = idle + %llu KiB; one latent is %llu KiB\n",
              static_cast<unsigned long long>(window),
              static_cast<unsigned long long>(chunk / 1024),
              static_cast<unsigned long long>(allowance_kib),
              static_cast<unsigned long long>(size / 1024));
  std::printf("%-20s %12s %12s %12s %12s\n", "endpoint", "idle KiB", "peak KiB", "growth KiB",
              "bound KiB");
  auto line = [&](const char* name, long idle, long peak) {
    std::printf("%-20s %12ld %12ld %12ld %12llu\n", name, idle, peak, peak - idle,
                static_cast<unsigned long long>(idle + static_cast<long>(allowance_kib)));
  };
  line("A (source)", idle_a, peak_a);
  line("B (receiver)", idle_b, peak_b);
  std::printf("%d handoffs of %llu MiB: median %.1f ms (%.0f MB/s)\n", count,
              static_cast<unsigned long long>(size / mib), median(ms),
              static_cast<double>(size) / 1e6 / (median(ms) / 1e3));
  const double bound_a = static_cast<double>(idle_a) + static_cast<double>(allowance_kib);
  const double bound_b = static_cast<double>(idle_b) + static_cast<double>(allowance_kib);
  c.result("handoff_memory_source_peak_kib", static_cast<double>(peak_a), "KiB",
           "<=" + std::to_string(static_cast<long>(bound_a)), peak_a <= bound_a);
  c.result("handoff_memory_receiver_peak_kib", static_cast<double>(peak_b), "KiB",
           "<=" + std::to_string(static_cast<long>(bound_b)), peak_b <= bound_b);
}

int run_main(const std::string& what, const args& a) {
  context c;
  c.opts = a;
  // --endpoint-exe: the endpoints from another build of this program, to compare two
  // versions of the data plane under the same orchestrator.
  c.exe = a.get("endpoint-exe", fs::read_symlink("/proc/self/exe").string());
  c.work = a.get("work", (fs::temp_directory_path() / ("vidline-bench-handoff-" +
                                                       std::to_string(::getpid())))
                             .string());
  c.reps = static_cast<int>(a.num("reps", 7));
  if (c.reps < 1)
    die("--reps must be at least 1");
  // The work dir is ours alone: a previous run's (marked) is cleared, anything else refused.
  const fs::path marker = fs::path(c.work) / ".bench_handoff";
  if (fs::exists(c.work) && !fs::is_empty(c.work)) {
    if (!fs::exists(marker))
      die("--work " + c.work + " exists and is not a bench_handoff work dir");
    fs::remove_all(c.work);
  }
  fs::create_directories(c.work);
  std::ofstream(marker.string()) << "bench_handoff\n";
  keys_dir() = c.work + "/keys";
  for (const char* host : {"A", "B"})
    nodes::write_curve_keypair(keys_dir(), host, true);
  std::printf("bench_handoff: work dir %s (endpoint and iperf3 logs there), %d reps each\n",
              c.work.c_str(), c.reps);
  auto section = [&](const char* name, void (*bench)(context&)) {
    if (what != name && what != "all")
      return;
    std::printf("\n(load average %s on %u cores)", loadavg().c_str(),
                std::thread::hardware_concurrency());
    bench(c);
  };
  section("loopback", bench_loopback);
  section("netns", bench_netns);
  section("memory", bench_memory);
  if (!a.has("keep-work"))
    fs::remove_all(c.work);
  std::printf("\nbench_handoff: %s\n", c.all_met ? "every target met" : "TARGET MISSED");
  return c.all_met ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  const std::string what = argc > 1 ? argv[1] : "";
  try {
    if (what == "endpoint")
      return endpoint_main(args(argc, argv, 2));
    if (what == "loopback" || what == "netns" || what == "memory" || what == "all")
      return run_main(what, args(argc, argv, 2));
  } catch (const std::exception& e) {
    die(e.what());
  }
  std::fprintf(stderr,
               "usage: bench_handoff loopback|netns|memory|all [--reps N] [--work DIR]\n"
               "         [--chunk-bytes N] [--chunk-window N] [--keep-work 1]\n"
               "         [--ns-a NS --ns-b NS --addr-a IP --addr-b IP]   (netns, all)\n"
               "         [--memory-latents N] [--memory-mib N] [--endpoint-exe PATH]\n"
               "       bench_handoff endpoint --self A --bind EP --peer B=EP --dir DIR [--keys DIR]\n"
               "         [--bulk-bind EP --bulk-peer B=EP --bulk-admit IP ...]\n");
  return 2;
}
