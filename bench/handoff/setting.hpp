#pragma once
/// bench_handoff's setting of one benchmark: the baselines' results, where the endpoints
/// run (site), the variants of the handoff, the pair of endpoints, the run's context; and
/// the parts that run_main and main call.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/handoff/child.hpp"
#include "bench/handoff/common.hpp"
#include "common/sha256.hpp"

namespace vidline::bench::handoff {

// -- the orchestrator: latents, baselines (baselines.cpp) -------------------------------------

/// Writes a latent of `bytes` pseudo-random bytes into `dir` as <sha256>.latent, streaming
/// (never the whole latent in memory); returns its digest.
std::string make_latent(const std::string& dir, uint64_t bytes, uint64_t seed);

double thread_cpu_ms();

/// SHA-256 over a buffer on one core (OpenSSL EVP, 1 MiB updates like the receiver), in
/// MB/s: per second of this thread's CPU time (the core's rate, whatever else runs) and
/// per second of wall time (what it got on this machine just now).
struct sha_rates {
  double cpu = 0, wall = 0;
};

sha_rates sha256_rate(const std::vector<char>& buf);

/// The device flush: fsync of a file with nothing left to write, median of 5, in ms.
double clean_fsync_ms(const std::string& dir);

/// CPU used between two thread_cpu_ms() readings: in all, and by the busiest thread (what
/// no number of cores can spread: the process's critical path, whatever the load).
struct cpu_use {
  double total = 0, busiest = 0;
};

cpu_use cpu_between(const std::map<std::string, double>& before,
                    const std::map<std::string, double>& after);

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
inline std::string& keys_dir() {
  static std::string dir;
  return dir;
}

/// The handoff variants measured: "plaintext" is the bus without authentication (nodes
/// allow it on loopback only); "curve_bulk" is a node with keys and a bulk_port: CURVE on
/// the link that carries the digest and the acknowledgement, the latent's requests and
/// chunks on the bulk channel (unencrypted, every byte checked against the digest);
/// "curve" is a node with keys and no bulk_port: the latents encrypted too. The plaintext
/// and curve_bulk rows carry the targets; curve is reported (docs/security.md).
inline std::vector<variant> variants() {
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

iperf_result iperf_once(const site& s, uint64_t bytes, const std::string& log);

/// The first three fields of /proc/loadavg: how busy the machine was around a figure.
std::string loadavg();

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

// -- what run_main and main call --------------------------------------------------------------

/// The endpoint process (endpoint.cpp).
int endpoint_main(const args& a);

/// The three benchmarks (benches.cpp).
void bench_loopback(context& c);
void bench_netns(context& c);
void bench_memory(context& c);

} // namespace vidline::bench::handoff
