// bench_handoff: the data plane's benchmarks (`launch/bench handoff`).
//
// The subject is the production path between two processes: each "endpoint" runs the
// node's own bus (nodes/bus/bus.hpp) with its latent_server and latent_fetcher. The receiver
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
//
// The parts: bench/handoff/ (common, endpoint, child and processes, baselines, setting,
// benches); this file is the run and main.

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include <signal.h>
#include <unistd.h>

#include "bench/handoff/setting.hpp"
#include "nodes/bus/keys.hpp"

namespace vidline::bench::handoff {

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
    nodes::bus::write_curve_keypair(keys_dir(), host, true);
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

} // namespace vidline::bench::handoff

using namespace vidline::bench::handoff;

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
