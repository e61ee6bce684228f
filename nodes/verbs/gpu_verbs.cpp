// The GPU verbs: `vidline gpus` (every host's cards as the coordinator last heard of them)
// and `vidline drain` / `vidline undrain` (docs/cli.md).
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "messages/gpu.hpp"
#include "nodes/verbs/exit_codes.hpp"
#include "nodes/verbs/cli.hpp"
#include "nodes/verbs/cli_checks.hpp"
#include "nodes/verbs/commands.hpp"
#include "nodes/verbs/verbs.hpp"

namespace vidline::nodes::verbs {

using nlohmann::json;

namespace {

struct gpu_options {
  std::string config, kind, name, reason;
  bool json = false;
  double timeout_s = 10;
};

/// A number of the gpus JSON as text ("-" for null: the card does not report it).
std::string figure(const json& v, const char* unit, double scale = 1, int decimals = 0) {
  if (!v.is_number())
    return "-";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f%s", decimals, v.get<double>() * scale, unit);
  return buf;
}

/// A card's Xids since its node started, "Xid 13 x4, 79 x1; the last 79 at 14:03:12", or
/// "" without any (or without Xid figures).
std::string xid_line(const json& g) {
  const auto xids = g.value("xids", json::array());
  const json last = g.value("xid_last", json()), at = g.value("xid_last_unix_s", json());
  if (xids.empty() || !last.is_number())
    return "";
  std::string out;
  for (auto& x : xids)
    out += (out.empty() ? "Xid " : ", ") + std::to_string(x.value("code", 0)) + " x"
           + std::to_string(x.value("count", 0));
  out += "; the last " + std::to_string(last.get<int64_t>());
  if (at.is_number()) {
    const auto t = static_cast<std::time_t>(at.get<double>());
    std::tm local{};
    char buf[32];
    if (localtime_r(&t, &local) != nullptr
        && std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &local) > 0)
      out += std::string(" at ") + buf;
  }
  return out;
}

int do_gpus(const gpu_options& o) {
  auto cluster = cluster_for(o.config);
  coordinator_client cl(cluster);
  std::optional<json> st;
  try {
    st = cl.status("@cluster", static_cast<int>(o.timeout_s * 1000));
  } catch (const coordinator_error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.exit_code();
  }
  if (!st) {
    std::fprintf(stderr, "error: no answer from the coordinator at %s\n", cl.endpoint().c_str());
    return exit_code::unreachable;
  }
  json gpus = st->value("gpus", json::array());
  if (o.json) {
    std::printf("%s\n", gpus.dump(2).c_str());
    return exit_code::ok;
  }
  std::printf("%-10s %-8s %-24s %-7s %6s %8s %5s %15s %4s %-8s %s\n", "HOST", "GPU", "NAME",
              "SOURCE", "TEMP", "POWER", "UTIL", "MEMORY", "XID", "HEALTH", "USED BY");
  for (auto& g : gpus) {
    std::string mem = figure(g["memory_used_mib"], "", 1.0 / 1024, 1) + "/"
                      + figure(g["memory_total_mib"], " GiB", 1.0 / 1024, 1);
    std::string users;
    for (auto& u : g.value("users", json::array()))
      users += (users.empty() ? "" : ",") + u.get<std::string>();
    if (g.value("drained", false))
      users += " (drained)";
    std::string health = g.value("health", "unknown");
    std::printf("%-10s %-8s %-24.24s %-7s %6s %8s %5s %15s %4s %-8s %s\n",
                g.value("host", "").c_str(),
                g.value("gpu", "").empty() ? ("#" + std::to_string(g.value("index", 0))).c_str()
                                           : g.value("gpu", "").c_str(),
                g.value("name", "").c_str(), g.value("source", "").c_str(),
                figure(g["temperature_c"], " C").c_str(), figure(g["power_w"], " W").c_str(),
                figure(g["utilization"], "%").c_str(), mem.c_str(),
                figure(g["xid_events"], "").c_str(), health.c_str(), users.c_str());
    if (health == "sick")
      std::printf("%21s%s\n", "", g.value("health_reason", "").c_str());
    if (auto xids = xid_line(g); !xids.empty())
      std::printf("%21s%s\n", "", xids.c_str());
  }
  if (gpus.empty())
    std::printf("(no node has reported its cards yet)\n");
  return exit_code::ok;
}

int do_drain(const gpu_options& o, bool drain) {
  auto cluster = cluster_for(o.config);
  coordinator_client cl(cluster);
  msg::drain_request req;
  req.kind = o.kind;
  req.name = o.name;
  req.drain = drain;
  req.reason = o.reason;
  try {
    auto r = cl.drain(req, static_cast<int>(o.timeout_s * 1000));
    if (o.json) {
      std::printf("%s\n", json{{"targets", r.targets}, {"drained", drain}}.dump().c_str());
    } else {
      for (auto& t : r.targets)
        std::printf("%s %s\n", t.c_str(), drain ? "drained: no new orders" : "back in service");
    }
  } catch (const coordinator_error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.exit_code();
  }
  return exit_code::ok;
}

} // namespace

void add_gpu_verbs(CLI::App& app, verb_list& out) {
  auto o = std::make_shared<gpu_options>();
  using verbs::seconds;

  auto* gpus = app.add_subcommand(
    "gpus", "Every host's cards as the coordinator last heard: temperature, power, memory, "
            "utilisation, health, and the pools and decoders on them");
  gpus->add_option("--config", o->config, "Cluster config (default: the last one used)");
  gpus->add_flag("--json", o->json, "Print the cards as JSON");
  gpus->add_option("--timeout", o->timeout_s, "Seconds to wait for the answer")
    ->check(seconds(0, true));
  out.push_back({gpus, [o] { return do_gpus(*o); }});

  for (bool drain : {true, false}) {
    auto* cmd = app.add_subcommand(
      drain ? "drain" : "undrain",
      drain ? "Take a pool, a decoder or a host's pools and decoders out of dispatch (the stage "
              "it runs finishes); kept across coordinator restarts"
            : "Put a drained pool, decoder or host back in service (a sick card's drain too)");
    cmd->add_option("kind", o->kind, "pool, decoder or host")
      ->required()
      ->check(CLI::IsMember({"pool", "decoder", "host"}));
    cmd->add_option("name", o->name, "Its name in the config")->required();
    if (drain)
      cmd->add_option("--reason", o->reason, "Why (shown in status, the log and the events)");
    cmd->add_option("--config", o->config, "Cluster config (default: the last one used)");
    cmd->add_flag("--json", o->json, "Print the answer as JSON");
    cmd->add_option("--timeout", o->timeout_s, "Seconds to wait for the answer")
      ->check(seconds(0, true));
    out.push_back({cmd, [o, drain] { return do_drain(*o, drain); }});
  }
}

} // namespace vidline::nodes::verbs
