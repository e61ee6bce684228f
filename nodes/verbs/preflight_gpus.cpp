// preflight's look at a host's cards (preflight.hpp, check_gpu_cards): read as the node
// reads them, through NVML and the amdgpu files; no vendor tool's text is parsed.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "nodes/verbs/preflight.hpp"

namespace vidline::nodes::verbs {
namespace {

using lvl = check_line::level;

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

/// A process's command name and parent (from <proc>/<pid>/stat: "pid (comm) state ppid").
std::pair<std::string, uint32_t> comm_and_parent(const std::string& proc, uint32_t pid) {
  const std::string stat = read_line(proc + "/" + std::to_string(pid) + "/stat");
  const auto open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open)
    return {"", 0};
  std::istringstream rest(stat.substr(close + 1));
  std::string state;
  uint32_t ppid = 0;
  rest >> state >> ppid;
  return {stat.substr(open + 1, close - open - 1), ppid};
}

/// Whether `pid` is a vidline node or runs under one (its backend's worker, ComfyUI
/// started as a service): its memory on the card is the line's own.
bool the_lines_own(const std::string& proc, uint32_t pid) {
  for (int depth = 0; depth < 64 && pid > 1; ++depth) {
    auto [comm, parent] = comm_and_parent(proc, pid);
    if (comm == "vidline")
      return true;
    pid = parent;
  }
  return false;
}

std::string gib(double mib) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", mib / 1024);
  return buf;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

} // namespace

std::vector<check_line> check_gpu_cards(const config::cluster& c, const config::host& h,
                                        const std::vector<std::string>& gpu_ids,
                                        const gpu::reader_options& o) {
  std::vector<check_line> out;
  std::vector<config::gpu> cards;
  for (auto& id : gpu_ids)
    if (auto* g = h.find_gpu(id); g != nullptr && (g->vendor == "nvidia" || g->vendor == "amd"))
      cards.push_back(*g);  // intel and cpu devices: nothing to ask
  if (cards.empty())
    return out;
  gpu::reader reader(o);
  const auto read = reader.read(cards, unix_now());
  const double limit_mib = c.knobs.gpu_foreign_memory_gib * 1024;
  std::vector<std::string> fine;
  for (std::size_t i = 0; i < cards.size() && i < read.size(); ++i) {
    const auto& want = cards[i];
    const auto& g = read[i];
    const std::string name = "gpu " + h.name + "/" + want.id;
    const std::string which = want.id + " (" + want.vendor + " " + std::to_string(want.index) + ")";
    auto fail = [&](std::string detail, std::string fix) {
      out.push_back({lvl::fail, name, std::move(detail), std::move(fix), h.name});
    };
    if (g.lost) {
      fail("card " + which + " is missing: its driver does not list it, or says it is lost",
           "fix the gpus' index in the config (the vendor's runtime numbering), or check the "
           "card and its driver (a card fallen off the bus needs a reset)");
      continue;
    }
    if (g.source == "unknown") {
      if (want.vendor == "nvidia")
        fail("card " + which + ": no NVIDIA telemetry here (" + reader.nvml_status() + ")",
             "install the NVIDIA driver (its libnvidia-ml.so.1), or fix the gpus of host "
               + h.name + " in the config");
      else
        fail("card " + which + ": no amdgpu card " + std::to_string(want.index) + " under "
               + o.drm_root,
             "load the amdgpu driver, or fix the gpus of host " + h.name + " in the config");
      continue;
    }
    double foreign = 0;
    std::string who;
    for (auto& p : g.processes) {
      if (p.memory_mib <= 0 || the_lines_own(o.proc_root, p.pid))
        continue;
      foreign += p.memory_mib;
      who += (who.empty() ? "" : ", ") + std::string("pid ") + std::to_string(p.pid) + " ("
             + (p.name.empty() ? "?" : p.name) + ") " + gib(p.memory_mib);
    }
    if (foreign > limit_mib) {
      fail("card " + which + " holds " + gib(foreign) + " of other programs' memory (more "
             "than gpu_foreign_memory_gib, " + gib(limit_mib) + "): " + who,
           "stop those programs, move the pool to another card, or raise "
           "gpu_foreign_memory_gib in the config's knobs");
      continue;
    }
    std::string line = want.id + " " + g.name;
    if (g.memory_total_mib > 0 && g.memory_used_mib >= 0)
      line += " (" + gib(g.memory_used_mib) + " of " + gib(g.memory_total_mib) + " used)";
    fine.push_back(line);
  }
  if (out.empty() && !fine.empty()) {
    std::string joined;
    for (auto& f : fine)
      joined += (joined.empty() ? "" : "; ") + f;
    out.push_back({lvl::ok, "gpus " + h.name, joined, "", h.name});
  }
  return out;
}

} // namespace vidline::nodes::verbs
