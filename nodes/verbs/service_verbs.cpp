/// The verbs of the backends area: preflight, config-adapt, start, stop.

#include <cstdio>
#include <functional>
#include <filesystem>
#include <memory>

#include "config/config.hpp"
#include "nodes/verbs/cli_checks.hpp"
#include "nodes/verbs/config_adapt.hpp"
#include "nodes/verbs/exit_codes.hpp"
#include "nodes/verbs/preflight.hpp"
#include "nodes/verbs/service.hpp"
#include "nodes/verbs/verbs.hpp"

namespace vidline::nodes::verbs {
namespace {

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("vidline") : p.string();
}

/// With --json, a verb that throws (a config error, an unknown --host) still prints one
/// JSON object, with the exit code cli_main gives the exception; the exception goes on to
/// cli_main for its stderr line and that code.
int with_json_errors(const char* verb, bool json, const std::string& config,
                     const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    if (json) {
      bool cfg = dynamic_cast<const config::config_error*>(&e) != nullptr;
      int code = cfg ? exit_code::usage : exit_code::fatal;
      nlohmann::json j{{"verb", verb}, {"config", config}, {"ok", false}, {"exit_code", code},
                       {"hosts", nlohmann::json::array()},
                       {"errors", {std::string(cfg ? "config error: " : "") + e.what()}}};
      std::printf("%s\n", j.dump(2).c_str());
    }
    throw;
  }
}

/// Options of these verbs; CLI11 keeps pointers into it, so it lives as long as the app.
struct backend_verb_options {
  preflight_options pre;
  bool pre_json = false;
  std::string min_free = "1G";
  std::string host_map, out, keys;
  service_options svc;
};

} // namespace

void add_backend_verbs(CLI::App& app, verb_list& out) {
  auto o = std::make_shared<backend_verb_options>();

  auto* pre = app.add_subcommand("preflight",
                                 "Check what a run needs, one line per check (exit 1 if any fails)");
  pre->add_option("--config", o->pre.config, "Cluster config (JSON)")->required();
  pre->add_option("--mode", o->pre.mode, "Mode to check (auto: every pool and decoder, as run and plan take it)")->required();
  pre->add_option("--host", o->pre.hosts, "This machine's host(s) (default: by address)");
  pre->add_option("--min-free", o->min_free, "Free disk per data directory (e.g. 500M, 20G)");
  pre->add_flag("--before-start", o->pre.before_start, "Nodes are not started yet: ports must be free");
  pre->add_option("--timeout", o->pre.timeout_s, "Seconds per network probe")->check(verbs::seconds(0, true));
  pre->add_flag("--json", o->pre_json, "Print the checks as one JSON object (docs/backends.md)");
  out.push_back({pre, [o] {
                   try {
                     o->pre.min_free_bytes = parse_bytes(o->min_free);
                   } catch (const std::invalid_argument& e) {
                     std::fprintf(stderr, "error: --min-free: %s\n", e.what());
                     if (o->pre_json)
                       std::printf("%s\n", nlohmann::json{{"verb", "preflight"}, {"config", o->pre.config},
                                                          {"mode", o->pre.mode}, {"ok", false},
                                                          {"exit_code", exit_code::usage}, {"checks", nlohmann::json::array()},
                                                          {"errors", {std::string("--min-free: ") + e.what()}}}
                                              .dump(2)
                                              .c_str());
                     return exit_code::usage;
                   }
                   auto lines = run_preflight(o->pre);
                   std::fputs(o->pre_json ? format_report_json(o->pre, lines).c_str()
                                          : format_report(lines).c_str(),
                              stdout);
                   return any_failed(lines) ? exit_code::job_failed : exit_code::ok;
                 }});

  auto* adapt = app.add_subcommand("config-adapt",
                                   "Write the full config (pools, modes) for a short host map");
  adapt->add_option("--host-map", o->host_map, "Host map (JSON): hosts, addresses, GPUs, paths")->required();
  adapt->add_option("--out", o->out, "Config file to write")->required();
  adapt->add_option("--keys", o->keys,
                    "Directory of the hosts' keys (vidline keygen --out DIR): HOST.pub, HOST.key");
  out.push_back({adapt, [o] { return run_config_adapt(o->host_map, o->out, o->keys); }});

  auto* start = app.add_subcommand("start", "Start this machine's node(s) in the background (idempotent)");
  start->add_option("--config", o->svc.config, "Cluster config (JSON)")->required();
  start->add_option("--mode", o->svc.mode, "Mode the line will run (checked, and shown; auto as run takes it)");
  start->add_option("--host", o->svc.hosts, "Host(s) to start (default: this machine's, by address)");
  start->add_option("--timeout", o->svc.ready_timeout_s, "Seconds to wait for each node to answer")
    ->check(verbs::seconds(0, true));
  start->add_flag("--json", o->svc.json, "Print what was started as one JSON object (docs/backends.md)");
  out.push_back({start, [o] {
                   o->svc.self_exe = self_exe();
                   return with_json_errors("start", o->svc.json, o->svc.config,
                                           [o] { return start_nodes(o->svc); });
                 }});

  auto* stop = app.add_subcommand("stop", "Stop this machine's node(s) started with start");
  stop->add_option("--config", o->svc.config, "Cluster config (default: the last one used)");
  stop->add_option("--host", o->svc.hosts, "Host(s) to stop (default: this machine's, by address)");
  stop->add_option("--grace", o->svc.grace_s, "Seconds from SIGTERM to SIGKILL")->check(verbs::seconds(0));
  stop->add_flag("--json", o->svc.json, "Print what was stopped as one JSON object (docs/backends.md)");
  out.push_back({stop, [o] {
                   return with_json_errors("stop", o->svc.json, o->svc.config,
                                           [o] { return stop_nodes(o->svc); });
                 }});
}

} // namespace vidline::nodes::verbs
