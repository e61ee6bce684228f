#include "nodes/cli.hpp"

#include <cstdio>
#include <filesystem>
#include <random>

#include <CLI/CLI.hpp>

#include "common/files.hpp"
#include "common/sha256.hpp"
#include "config/config.hpp"
#include "nodes/commands.hpp"
#include "nodes/exit_codes.hpp"
#include "nodes/node.hpp"
#include "nodes/verbs.hpp"
#include "vidline/version.hpp"

namespace vidline::nodes {
namespace {

std::string self_exe(const char* argv0) {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(argv0) : p.string();
}

std::string random_request_id() {
  std::random_device rd;
  char buf[40];
  std::snprintf(buf, sizeof(buf), "req-%08x%08x%08x", rd(), rd(), rd());
  return buf;
}

/// The options of `vidline run`.
struct run_args {
  std::string config;
  std::string mode;
  std::string prompt_file;
  std::string reference_file;
  uint32_t width = 0, height = 0, seconds = 0, count = 1;
  uint64_t seed = 0;
  bool background = false;
  bool json = false;
};

int do_run(const run_args& a) {
  auto cluster = config::load(a.config);
  remember_config(a.config);
  msg::submit_run req;
  req.mode = a.mode;
  try {
    req.prompt = files::read_all(a.prompt_file);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: --prompt-file: %s\n", e.what());
    return exit_code::usage;
  }
  if (!a.reference_file.empty()) {
    if (!std::filesystem::is_regular_file(a.reference_file)) {
      std::fprintf(stderr, "error: --reference-file: %s is not a readable file\n",
                   a.reference_file.c_str());
      return exit_code::usage;
    }
    req.reference = std::filesystem::absolute(a.reference_file).string();
  }
  req.width = a.width;
  req.height = a.height;
  req.seconds = a.seconds;
  req.count = a.count;
  req.seed = a.seed;
  req.request_id = random_request_id();
  coordinator_client cl(cluster);
  std::string run_id;
  try {
    run_id = cl.submit(req);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: run refused: %s\n", e.what());
    return exit_code::usage;
  }
  if (a.background) {
    if (a.json)
      std::printf("{\"run_id\": \"%s\"}\n", run_id.c_str());
    else
      std::printf("%s\n", run_id.c_str());
    return exit_code::ok;
  }
  std::fprintf(a.json ? stderr : stdout, "%s\n", run_id.c_str());
  wait_options wo;
  wo.json = a.json;
  return wait_for_run(cl, run_id, wo);
}

int do_status(const std::string& config, const std::string& run_id, bool json,
              const std::string& gantt) {
  auto cluster = cluster_for(config);
  coordinator_client cl(cluster);
  std::optional<nlohmann::json> st;
  try {
    st = cl.status(run_id);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return exit_code::usage;
  }
  if (!st) {
    std::fprintf(stderr, "error: no answer from the coordinator at %s\n", cl.endpoint().c_str());
    return exit_code::unreachable;
  }
  if (json)
    std::printf("%s\n", st->dump(2).c_str());
  else
    std::printf("%s", format_status(*st).c_str());
  if (!gantt.empty()) {
    try {
      files::write_atomic(gantt, planner::gantt_svg({run_gantt(*st)}));
    } catch (const nlohmann::json::exception& e) {
      std::fprintf(stderr, "error: the run's status has no stage times for a chart (%s); is "
                           "the coordinator older than this client?\n", e.what());
      return exit_code::usage;
    }
  }
  return exit_code::ok;
}

int do_wait(const std::string& config, const std::string& run_id, double timeout_s, bool json) {
  auto cluster = cluster_for(config);
  coordinator_client cl(cluster);
  wait_options wo;
  wo.timeout_s = timeout_s;
  wo.json = json;
  return wait_for_run(cl, run_id, wo);
}


/// Options shared by the line verbs; they live as long as the app.
struct line_options {
  std::string config_path, host, run_id, gantt;
  double timeout_s = 0;
  bool json = false;
  run_args ra;
  std::string exe;
};

} // namespace

void add_line_verbs(CLI::App& app, verb_list& out) {
  auto o = std::make_shared<line_options>();
  // CLI11 keeps pointers into `o`: tie its lifetime to the app through the callbacks.
  auto* node = app.add_subcommand("node", "Run this host's node in the foreground");
  node->add_option("--config", o->config_path, "Cluster config (JSON)")->required();
  node->add_option("--host", o->host, "This host's name in the config")->required();
  out.push_back({node, [o] { return run_node(config::load(o->config_path), o->host); }});

  auto& ra = o->ra;
  auto* run = app.add_subcommand("run", "Submit a batch and follow it (or --background)");
  run->add_option("--config", ra.config, "Cluster config (JSON)")->required();
  run->add_option("--mode", ra.mode, "Mode: which pools and decoders are active")->required();
  run->add_option("--prompt-file", ra.prompt_file, "File holding the prompt text")->required();
  run->add_option("--reference-file", ra.reference_file, "Reference image for the jobs");
  run->add_option("--width", ra.width, "Width in pixels")->required()->check(CLI::Range(8u, 8192u));
  run->add_option("--height", ra.height, "Height in pixels")->required()->check(CLI::Range(8u, 8192u));
  run->add_option("--seconds", ra.seconds, "Clip length in seconds")->required()->check(CLI::Range(1u, 3600u));
  run->add_option("--count", ra.count, "Jobs in the batch")->required()->check(CLI::Range(1u, 1000000u));
  run->add_option("--seed", ra.seed, "Seed of job 0 (job i gets seed + i)")->required();
  run->add_flag("--background", ra.background, "Print the run id and return at once");
  run->add_flag("--json", ra.json, "Print JSON (the final status, or the run id)");
  out.push_back({run, [o] { return do_run(o->ra); }});

  auto* wait = app.add_subcommand("wait", "Follow a run until it ends (0 ok, 1 failed, 3 timeout)");
  wait->add_option("run_id", o->run_id, "Run id")->required();
  wait->add_option("--timeout", o->timeout_s, "Seconds to wait (0 = forever)")->check(CLI::NonNegativeNumber);
  wait->add_option("--config", o->config_path, "Cluster config (default: the last one used)");
  wait->add_flag("--json", o->json, "Print the final status JSON");
  out.push_back({wait, [o] { return do_wait(o->config_path, o->run_id, o->timeout_s, o->json); }});

  auto* status = app.add_subcommand("status", "Show a run (default: the latest)");
  status->add_option("run_id", o->run_id, "Run id");
  status->add_option("--config", o->config_path, "Cluster config (default: the last one used)");
  status->add_flag("--json", o->json, "Print the status JSON");
  status->add_option("--gantt", o->gantt, "Also write the run's Gantt chart (SVG) to this file");
  out.push_back(
    {status, [o] { return do_status(o->config_path, o->run_id, o->json, o->gantt); }});

  auto* resume = app.add_subcommand(
    "resume", "Finish a run's failed jobs, redoing only missing stages, and follow it");
  resume->add_option("run_id", o->run_id, "Run id")->required();
  resume->add_option("--config", o->config_path, "Cluster config (default: the last one used)");
  resume->add_option("--timeout", o->timeout_s, "Seconds to wait (0 = forever)")->check(CLI::NonNegativeNumber);
  resume->add_flag("--json", o->json, "Print the final status JSON");
  out.push_back({resume, [o] {
                   auto cluster = cluster_for(o->config_path);
                   coordinator_client cl(cluster);
                   try {
                     auto r = cl.resume(o->run_id);
                     std::fprintf(o->json ? stderr : stdout, "run %s: %u failed jobs resumed; %s\n",
                                  r.run_id.c_str(), r.reopened, r.state.c_str());
                   } catch (const std::exception& e) {
                     std::fprintf(stderr, "error: %s\n", e.what());
                     return exit_code::usage;
                   }
                   wait_options wo;
                   wo.timeout_s = o->timeout_s;
                   wo.json = o->json;
                   return wait_for_run(cl, o->run_id, wo);
                 }});

  auto* demo = app.add_subcommand("demo", "Run the reference 6-job batch on two local nodes");
  demo->add_flag("--json", o->json, "Print the final status JSON");
  out.push_back({demo, [o] { return run_demo(o->json, self_exe("vidline")); }});
}

int cli_main(int argc, char** argv) {
  CLI::App app{"vidline: a video diffusion production line over mismatched GPUs on a LAN"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every verb");
  app.set_version_flag("--version", std::string("vidline ") + version_string);
  verb_list verbs;
  add_line_verbs(app, verbs);
  add_backend_verbs(app, verbs);
  add_plan_verbs(app, verbs);
  add_profile_verbs(app, verbs);
  add_security_verbs(app, verbs);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return exit_code::usage;
  }

  try {
    for (auto& v : verbs)
      if (v.cmd->parsed())
        return v.run();
  } catch (const config::config_error& e) {
    std::fprintf(stderr, "config error: %s\n", e.what());
    return exit_code::usage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return exit_code::fatal;
  }
  return exit_code::usage;
}

} // namespace vidline::nodes
