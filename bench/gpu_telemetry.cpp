/// GPU telemetry against an independent reading, and what sampling costs a node.
///
///   bench_gpu_telemetry cost [READS]          CPU and wall time of one reading of every card
///   bench_gpu_telemetry compare [K] [MS]      K moments MS apart: our reading of card 0 and
///                                             `nvidia-smi --query-gpu` taken right after it
///                                             (temperature, power, memory used)
///   bench_gpu_telemetry energy [S] [MS]       S seconds: the coordinator's power log fed by our readings
///                                             every MS, against the power integral of an
///                                             independent `nvidia-smi -lms 100` sampler and
///                                             against the card's own energy counter
///
/// nvidia-smi is only this benchmark's reference: the node itself reads NVML (dlopen) and
/// never parses nvidia-smi's text. Load the card from outside (a torch loop) for figures
/// that mean something; an idle card compares too, only less sharply.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "actors/gpu/power_log.hpp"
#include "nodes/gpu/telemetry.hpp"

using namespace vidline;

namespace {

double wall_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

std::string run_text(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
  }
  return out;
}

std::vector<double> csv_numbers(const std::string& line) {
  std::vector<double> v;
  size_t i = 0;
  while (i <= line.size()) {
    size_t j = line.find(',', i);
    if (j == std::string::npos) j = line.size();
    v.push_back(std::strtod(line.substr(i, j - i).c_str(), nullptr));
    i = j + 1;
  }
  return v;
}

int cost(int reads) {
  nodes::gpu::reader r(nodes::gpu::options_from_environment());
  std::printf("nvml: %s\n", r.nvml() ? "loaded" : r.nvml_status().c_str());
  auto first = r.read({}, wall_s());
  double c0 = cpu_s(), w0 = wall_s();
  size_t cards = 0;
  for (int i = 0; i < reads; ++i) cards = r.read({}, wall_s()).size();
  double cpu = (cpu_s() - c0) / reads, wall = (wall_s() - w0) / reads;
  std::printf("cards %zu, reads %d: cpu %.3f ms, wall %.3f ms per reading of every card\n",
              cards, reads, cpu * 1e3, wall * 1e3);
  std::printf("RESULT gpu_sample_cpu_ms %.3f ms target informational\n", cpu * 1e3);
  std::printf("RESULT gpu_sample_cpu_share_at_1s %.5f fraction target <=0.01\n", cpu / 1.0);
  return first.empty() && cards == 0 ? 1 : 0;
}

int compare(int k, int ms) {
  nodes::gpu::reader r(nodes::gpu::options_from_environment());
  if (!r.nvml()) {
    std::printf("no NVML: %s\n", r.nvml_status().c_str());
    return 1;
  }
  double worst_t = 0, worst_p = 0, worst_m = 0;
  std::printf("%4s %8s %8s %9s %9s %10s %10s\n", "k", "temp", "smi", "power_w", "smi", "mem_mib", "smi");
  for (int i = 0; i < k; ++i) {
    auto ours = r.read_nvml(0, wall_s());
    auto smi = csv_numbers(run_text(
        "nvidia-smi -i 0 --query-gpu=temperature.gpu,power.draw,memory.used "
        "--format=csv,noheader,nounits"));
    if (smi.size() < 3) {
      std::printf("nvidia-smi gave no reading\n");
      return 1;
    }
    if (i == 0) {
      std::printf("card 0: %s, processes as NVML lists them:", ours.name.c_str());
      for (auto& p : ours.processes) std::printf(" %u(%s, %.0f MiB)", p.pid, p.name.c_str(), p.memory_mib);
      std::printf("\nnvidia-smi's: %s", run_text("nvidia-smi -i 0 --query-compute-apps=pid,process_name,used_memory --format=csv,noheader").c_str());
    }
    std::printf("%4d %8.1f %8.1f %9.1f %9.1f %10.0f %10.0f\n", i, ours.temperature_c, smi[0],
                ours.power_w, smi[1], ours.memory_used_mib, smi[2]);
    worst_t = std::max(worst_t, std::fabs(ours.temperature_c - smi[0]));
    worst_p = std::max(worst_p, std::fabs(ours.power_w - smi[1]) / std::max(1.0, smi[1]));
    worst_m = std::max(worst_m, std::fabs(ours.memory_used_mib - smi[2]) / std::max(1.0, smi[2]));
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
  std::printf("RESULT gpu_temperature_worst_delta %.1f C target <=1\n", worst_t);
  std::printf("RESULT gpu_power_worst_rel_delta %.4f fraction target <=0.05\n", worst_p);
  std::printf("RESULT gpu_memory_worst_rel_delta %.4f fraction target <=0.01\n", worst_m);
  return 0;
}

int energy(double seconds, int ms) {
  nodes::gpu::reader r(nodes::gpu::options_from_environment());
  if (!r.nvml()) {
    std::printf("no NVML: %s\n", r.nvml_status().c_str());
    return 1;
  }
  char tmpl[] = "/tmp/vidline-smi-XXXXXX";
  int fd = mkstemp(tmpl);
  if (fd < 0) return 1;
  pid_t smi = fork();
  if (smi == 0) {
    dup2(fd, 1);
    execlp("nvidia-smi", "nvidia-smi", "-i", "0", "--query-gpu=timestamp,power.draw",
           "--format=csv,noheader,nounits", "-lms", "100", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the sampler is running

  actors::gpu::power_log meter;
  double t0 = wall_s();
  auto first = r.read_nvml(0, t0);
  meter.reading("card0", t0, first.power_w);
  double t = t0;
  while (t - t0 < seconds) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    t = wall_s();
    meter.reading("card0", t, r.read_nvml(0, t).power_w);
  }
  auto last = r.read_nvml(0, t);
  const double ours_j = meter.stage("stage", {"card0"}, t0, t);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  kill(smi, SIGTERM);
  waitpid(smi, nullptr, 0);

  // The independent sampler's rows: "YYYY/MM/DD HH:MM:SS.mmm, watts". Its clock and ours
  // are the same wall clock; rows are integrated by the trapezoid rule over [t0, t].
  std::vector<std::pair<double, double>> rows;
  FILE* f = std::fopen(tmpl, "r");
  char line[256];
  while (f && std::fgets(line, sizeof line, f)) {
    int Y, M, D, h, m;
    double s, w;
    if (std::sscanf(line, "%d/%d/%d %d:%d:%lf, %lf", &Y, &M, &D, &h, &m, &s, &w) != 7) continue;
    std::tm tm{};
    tm.tm_year = Y - 1900; tm.tm_mon = M - 1; tm.tm_mday = D;
    tm.tm_hour = h; tm.tm_min = m; tm.tm_sec = 0; tm.tm_isdst = -1;
    rows.emplace_back(static_cast<double>(std::mktime(&tm)) + s, w);
  }
  if (f) std::fclose(f);
  std::remove(tmpl);
  double smi_j = 0;
  for (size_t i = 1; i < rows.size(); ++i) {
    double a = std::max(rows[i - 1].first, t0), b = std::min(rows[i].first, t);
    if (b > a) smi_j += (b - a) * (rows[i - 1].second + rows[i].second) / 2;
  }
  double counter_j = (first.energy_j >= 0 && last.energy_j >= 0) ? last.energy_j - first.energy_j : -1;
  std::printf("window %.1f s, our readings every %d ms; nvidia-smi rows %zu\n", t - t0, ms, rows.size());
  std::printf("ours %.1f J, nvidia-smi integral %.1f J, card counter %.1f J\n",
              ours_j, smi_j, counter_j);
  if (smi_j <= 0) return 1;
  std::printf("RESULT gpu_energy_vs_smi_integral %.4f ratio target 0.95-1.05\n", ours_j / smi_j);
  if (counter_j > 0)
    std::printf("RESULT gpu_energy_vs_card_counter %.4f ratio target informational\n",
                ours_j / counter_j);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  std::string what = argc > 1 ? argv[1] : "cost";
  if (what == "cost") return cost(argc > 2 ? std::atoi(argv[2]) : 200);
  if (what == "compare") return compare(argc > 2 ? std::atoi(argv[2]) : 10, argc > 3 ? std::atoi(argv[3]) : 500);
  if (what == "energy")
    return energy(argc > 2 ? std::atof(argv[2]) : 30, argc > 3 ? std::atoi(argv[3]) : 1000);
  std::fprintf(stderr, "usage: bench_gpu_telemetry cost [READS] | compare [K] [MS] | energy [S] [MS]\n");
  return 2;
}
