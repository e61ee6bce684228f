// bench_handoff's latents and baselines: making a latent, SHA-256 on one core, the device
// flush, CPU use, iperf3, the load average.

#include <algorithm>
#include <fstream>
#include <random>

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include "bench/handoff/setting.hpp"

namespace vidline::bench::handoff {

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

} // namespace vidline::bench::handoff
