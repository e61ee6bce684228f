// The coordinator's view of the cards (gpu_view.hpp).
#include "actors/coordinator/gpu_view.hpp"

namespace vidline::actors::coordinator {
namespace {

nlohmann::json num(double v) { return v < 0 ? nlohmann::json() : nlohmann::json(v); }
nlohmann::json num(int64_t v) { return v < 0 ? nlohmann::json() : nlohmann::json(v); }

} // namespace

std::string gpu_key(const std::string& host, const msg::gpu_sample& g) {
  return host + "/" + (g.id.empty() ? "#" + std::to_string(g.index) : g.id);
}

std::map<std::string, std::vector<std::string>> gpu_users(const config::cluster& c,
                                                          const std::string& host) {
  std::map<std::string, std::vector<std::string>> out;
  for (auto& p : c.pools)
    if (p.host == host)
      for (auto& g : p.gpus)
        out[g].push_back("pool:" + p.name);
  for (auto& d : c.decoders)
    if (d.host == host)
      out[d.gpu].push_back("decoder:" + d.name);
  return out;
}

bool take_report(gpu_view& v, const config::cluster& c, const msg::gpu_report& r, double now,
                 std::vector<ev_gpu_health>& events) {
  if (c.find_host(r.host) == nullptr)
    return false;
  auto it = v.latest.find(r.host);
  // A node restarted counts from 1 again: a lower seq after a long silence is a new node.
  if (it != v.latest.end() && r.seq <= it->second.seq && r.seq != 1)
    return false;
  v.latest[r.host] = r;
  v.received[r.host] = now;
  auto users = gpu_users(c, r.host);
  for (auto& g : r.gpus) {
    if (g.health != "ok" && g.health != "sick")
      continue;
    ev_gpu_health e;
    e.gpu = gpu_key(r.host, g);
    e.sick = g.health == "sick";
    e.reason = g.health_reason;
    if (auto u = users.find(g.id); u != users.end() && !g.id.empty())
      e.users = u->second;
    events.push_back(std::move(e));
  }
  return true;
}

ev_gpu_power power_readings(const msg::gpu_report& r) {
  ev_gpu_power e;
  for (auto& g : r.gpus)
    if (!g.id.empty() && g.source != "unknown" && g.unix_s > 0)
      e.readings.push_back({gpu_key(r.host, g), g.unix_s, g.power_w});
  return e;
}

nlohmann::json gpus_json(const gpu_view& v, const config::cluster& c, const state& s,
                         double now) {
  auto out = nlohmann::json::array();
  for (auto& [host, r] : v.latest) {
    auto users = gpu_users(c, host);
    const double age = now - v.received.at(host);
    for (auto& g : r.gpus) {
      nlohmann::json u = nlohmann::json::array();
      bool drained = false;
      if (auto it = users.find(g.id); it != users.end() && !g.id.empty())
        for (auto& t : it->second) {
          u.push_back(t);
          drained = drained || s.drains.count(t) != 0;
        }
      nlohmann::json procs = nlohmann::json::array();
      for (auto& p : g.processes)
        procs.push_back({{"pid", p.pid}, {"memory_mib", num(p.memory_mib)}, {"name", p.name}});
      nlohmann::json xids = nlohmann::json::array();
      for (auto& x : g.xids)
        xids.push_back({{"code", x.code}, {"count", x.count}, {"last_unix_s", x.last_unix_s}});
      out.push_back({
          {"host", host}, {"gpu", g.id}, {"index", g.index}, {"source", g.source},
          {"name", g.name}, {"uuid", g.uuid}, {"users", u}, {"drained", drained},
          {"age_s", age}, {"unix_s", g.unix_s},
          {"temperature_c", num(g.temperature_c)},
          {"memory_temperature_c", num(g.memory_temperature_c)},
          {"slowdown_c", num(g.slowdown_c)}, {"power_w", num(g.power_w)},
          {"energy_j", num(g.energy_j)}, {"utilization", num(g.utilization)},
          {"memory_used_mib", num(g.memory_used_mib)},
          {"memory_total_mib", num(g.memory_total_mib)},
          {"sm_clock_mhz", num(g.sm_clock_mhz)}, {"memory_clock_mhz", num(g.memory_clock_mhz)},
          {"throttle_reasons", num(g.throttle_reasons)},
          {"ecc_uncorrected", num(g.ecc_uncorrected)}, {"ecc_corrected", num(g.ecc_corrected)},
          {"pcie_gen", num(int64_t{g.pcie_gen})}, {"pcie_width", num(int64_t{g.pcie_width})},
          {"lost", g.lost}, {"processes", procs}, {"health", g.health},
          {"health_reason", g.health_reason}, {"xid_events", num(g.xid_events)},
          {"xid_last", num(int64_t{g.xid_last})}, {"xid_last_unix_s", num(g.xid_last_unix_s)},
          {"xids", xids}});
    }
  }
  return out;
}

} // namespace vidline::actors::coordinator
