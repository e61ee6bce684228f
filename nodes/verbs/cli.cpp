#include "nodes/verbs/cli.hpp"

#include "actors/coordinator/admission.hpp"

#include <algorithm>
#include <cstdint>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include <CLI/CLI.hpp>

#include <unistd.h>

#include "actors/coordinator/coordinator_actor.hpp"
#include "actors/coordinator/dispatch_setup.hpp"
#include "common/files.hpp"
#include "common/sha256.hpp"
#include "config/config.hpp"
#include "nodes/verbs/cli_checks.hpp"
#include "nodes/verbs/collect.hpp"
#include "nodes/verbs/collection_reuse.hpp"
#include "actors/coordinator/graph.hpp"
#include "nodes/verbs/commands.hpp"
#include "nodes/verbs/line_text.hpp"
#include "nodes/verbs/exit_codes.hpp"
#include "nodes/verbs/shot_file.hpp"
#include "nodes/verbs/verbs.hpp"
#include "vidline/version.hpp"

namespace vidline::nodes::verbs {
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
  std::string jobs;                  ///< --jobs FILE: a shot list
  std::vector<std::string> given;    ///< the uniform form's options given (for --jobs)
  std::vector<std::string> missing;  ///< the uniform form's options missing
  int32_t priority = 0;
  bool rerender = false;             ///< --rerender: render even where an output's key matches
  std::string collect;               ///< --collect DIR: copy the videos here
};

/// What an interrupted `run`/`wait` prints on its way out (set before the handler is): how
/// to pick the run up again. A signal handler may only write() it.
char interrupt_note[1024];
std::size_t interrupt_note_len = 0;

extern "C" void on_interrupt(int) {
  if (interrupt_note_len > 0)
    (void)!::write(STDERR_FILENO, interrupt_note, interrupt_note_len);
  ::_exit(130);  // 128 + SIGINT, as a shell reports it
}

/// Ctrl-C (or SIGTERM) while following run `run_id` says the run goes on, and with
/// `--collect DIR` how to collect the rest.
void say_on_interrupt(const std::string& run_id, const std::string& dir) {
  std::string note = "\nstopped following run " + run_id + "; the run goes on";
  note += dir.empty() ? " (`vidline wait " + run_id + "` follows it)\n"
                      : ". Collect the rest of its videos with `vidline wait " + run_id +
                          " --collect " + dir + "`\n";
  interrupt_note_len = std::min(note.size(), sizeof(interrupt_note));
  std::memcpy(interrupt_note, note.data(), interrupt_note_len);
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
}

/// Follows a run (wait_for_run) and, with `dir` (--collect), collects its videos as they
/// finish and once more from the whole status at the end (nodes/verbs/collect.hpp). The report
/// goes to stderr with --json. Exit code: wait's, or not_collected when that was ok and a
/// video was refused or could not be collected.
int follow(coordinator_client& cl, const config::cluster& cluster, const std::string& run_id,
           wait_options wo, const std::string& dir) {
  say_on_interrupt(run_id, dir);
  if (dir.empty())
    return wait_for_run(cl, run_id, wo);
  std::unique_ptr<collector> k;
  try {
    k = std::make_unique<collector>(cluster, dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: --collect: %s\n", e.what());
    return exit_code::usage;
  }
  wo.on_status = [&](const nlohmann::json& st) { k->pass(st, false); };
  const int code = wait_for_run(cl, run_id, wo);
  std::optional<nlohmann::json> st;
  try {
    st = cl.status(run_id, 10000);
  } catch (const coordinator_error& e) {
    std::fprintf(stderr, "error: --collect: %s\n", e.what());
    return code == exit_code::ok ? e.exit_code() : code;
  }
  if (!st) {
    std::fprintf(stderr, "error: --collect: no answer from the coordinator at %s; not every "
                         "video is collected (`vidline resume %s --collect %s` goes on)\n",
                 cl.endpoint().c_str(), run_id.c_str(), dir.c_str());
    return code == exit_code::ok ? exit_code::unreachable : code;
  }
  k->pass(*st, true);
  const auto& r = k->report();
  for (auto& p : r.problems)
    std::fprintf(stderr, "error: --collect: %s\n", p.c_str());
  std::fprintf(wo.json ? stderr : stdout, "%s\n", format_collect_report(r, dir).c_str());
  if (code == exit_code::ok && (r.refused > 0 || r.failed > 0))
    return exit_code::not_collected;
  return code;
}

/// A warning line per host of the line that is down now: a run submitted then waits for it.
void warn_hosts_down(coordinator_client& cl, const config::cluster& c) {
  try {
    if (auto view = cl.status("@cluster", 2000))
      std::fputs(hosts_down_warning(hosts_down(*view, c), c).c_str(), stderr);
  } catch (const std::exception&) {
    // Only a warning: the run was submitted whatever the view says.
  }
}

/// The stems of the shots that other shots of `shots` take inputs from ("NAME", and
/// "NAME-take-N" for its takes).
bool is_source_stem(const std::vector<msg::shot>& shots, const std::string& stem) {
  for (auto& s : shots)
    for (auto& in : s.inputs)
      if (!in.from.empty()
          && (stem == in.from || stem.rfind(in.from + "-take-", 0) == 0))
        return true;
  return false;
}

/// Offers the videos of the collection folder `dir` that are still there, verified, for
/// reuse by job key (docs/shots.md, "Job keys"). A real video that another shot takes a
/// frame from is uploaded to the coordinator's node by its SHA-256 too, so that frame can
/// be taken even where the cluster no longer holds the video. 0, or the exit code.
int offer_collection(coordinator_client& cl, const config::cluster& cluster,
                     const std::string& dir, msg::submit_run& req) {
  auto offers = read_collection(cluster, dir, actors::coordinator::max_collected_outputs);
  for (auto& n : offers.notes)
    std::fprintf(stderr, "note: --collect: %s\n", n.c_str());
  for (auto& v : offers.videos) {
    if (!v.sim && is_source_stem(req.shots, v.name)) {
      bool unreachable = false;
      if (auto w = cl.upload_input(v.path, v.offer.output_sha256, nullptr, &unreachable);
          !w.empty()) {
        if (unreachable) {
          std::fprintf(stderr, "error: --collect: %s was not uploaded to the coordinator: "
                               "%s\nnothing was submitted\n", v.path.c_str(), w.c_str());
          return exit_code::unreachable;
        }
        // Still offered: the frames are then taken from the cluster's copy, if it has one.
        std::fprintf(stderr, "note: --collect: %s was not uploaded to the coordinator (%s): "
                             "a shot taking a frame of it needs the video on its decoder's "
                             "host\n", v.path.c_str(), w.c_str());
      }
    }
    req.collected.push_back(std::move(v.offer));
  }
  return exit_code::ok;
}

int do_run(const run_args& a) {
  if (!a.jobs.empty()) {
    if (auto why = jobs_exclusive_error(a.given); !why.empty()) {
      std::fprintf(stderr, "error: %s\n", why.c_str());
      return exit_code::usage;
    }
  } else if (!a.missing.empty()) {
    std::fprintf(stderr, "error: %s is required (or --jobs FILE, a shot list)\n",
                 a.missing.front().c_str());
    return exit_code::usage;
  }
  if (a.background && !a.collect.empty()) {
    std::fprintf(stderr, "error: --collect follows the run: not with --background (collect "
                         "later with `vidline wait RUN --collect DIR`)\n");
    return exit_code::usage;
  }
  if (auto why = verbs::seed_range_error(a.seed, a.count); a.jobs.empty() && !why.empty()) {
    std::fprintf(stderr, "error: %s\n", why.c_str());
    return exit_code::usage;
  }
  auto cluster = config::load(a.config);
  remember_config(a.config);
  if (!a.collect.empty()) {
    try {
      files::make_dirs(a.collect);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: --collect: %s\nnothing was submitted\n", e.what());
      return exit_code::usage;
    }
  }
  msg::submit_run req;
  req.mode = a.mode;
  std::string why;
  std::vector<std::size_t> shot_lines;  // the shot file's line of each shot
  if (!a.jobs.empty()) {
    shot_list list;
    const auto cat = actors::coordinator::run_catalog(cluster, a.mode);
    why = read_shot_file(a.jobs, cluster.knobs, run_max_jobs, list, &cat);
    if (why.empty()) {
      // Capacity as the coordinator will judge it, named by line (the coordinator checks
      // again, by shot number: its word is final).
      auto s = actors::coordinator::initial_state(cluster, 1.0);
      actors::coordinator::configure_dispatch(s, cluster);
      if (s.modes.count(a.mode))
        why = shot_file_capacity(a.jobs, list, s, a.mode);
    }
    if (!why.empty()) {
      std::fprintf(stderr, "error: --jobs: %s\nnothing was submitted\n", why.c_str());
      return exit_code::usage;
    }
    req.shots = std::move(list.shots);
    shot_lines = std::move(list.lines);
  } else {
    req.prompt = read_prompt_file(a.prompt_file, cluster.knobs, why);
  }
  if (!why.empty()) {
    std::fprintf(stderr, "error: --prompt-file: %s\n", why.c_str());
    return exit_code::usage;
  }
  if (!a.reference_file.empty()) {
    if (auto w = read_reference(a.reference_file, req.reference, req.reference_sha256);
        !w.empty()) {
      std::fprintf(stderr, "error: --reference-file: %s\n", w.c_str());
      return exit_code::usage;
    }
  }
  if (req.shots.empty()) {
    req.width = a.width;
    req.height = a.height;
    req.seconds = a.seconds;
    req.count = a.count;
    req.seed = a.seed;
  }
  req.priority = a.priority;
  req.rerender = a.rerender;
  req.request_id = random_request_id();
  coordinator_client cl(cluster);
  // Inputs travel (docs/shots.md, "References travel"): each distinct reference image goes
  // to the coordinator's node, by its SHA-256, before the run is submitted.
  {
    std::set<std::string> sent;
    auto upload = [&](const std::string& path, const std::string& sha,
                      const std::string& where) -> int {
      if (sha.empty() || !sent.insert(sha).second)
        return exit_code::ok;
      bool unreachable = false;
      auto w = cl.upload_input(path, sha, nullptr, &unreachable);
      if (w.empty())
        return exit_code::ok;
      std::fprintf(stderr, "error: %s: %s was not uploaded to the coordinator: %s\nnothing was "
                           "submitted\n", where.c_str(), path.c_str(), w.c_str());
      return unreachable ? exit_code::unreachable : exit_code::usage;
    };
    if (int rc = upload(req.reference, req.reference_sha256, "--reference-file"); rc != 0)
      return rc;
    for (std::size_t i = 0; i < req.shots.size(); ++i) {
      const std::string where =
          a.jobs + ":" + std::to_string(i < shot_lines.size() ? shot_lines[i] : i + 1) +
          ": reference";
      if (int rc = upload(req.shots[i].reference, req.shots[i].reference_sha256, where); rc != 0)
        return rc;
      for (auto& in : req.shots[i].inputs)  // every named input travels as the reference does
        if (int rc = upload(in.path, in.sha256, where.substr(0, where.size() - 9) + "inputs." + in.name);
            rc != 0)
          return rc;
    }
  }
  if (!a.collect.empty() && !a.rerender)
    if (int rc = offer_collection(cl, cluster, a.collect, req); rc != 0)
      return rc;
  std::string run_id;
  try {
    run_id = cl.submit(req);
  } catch (const coordinator_error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.exit_code();
  }
  if (a.background) {
    warn_hosts_down(cl, cluster);
    if (a.json)
      std::printf("{\"run_id\": \"%s\"}\n", run_id.c_str());
    else
      std::printf("%s\n", run_id.c_str());
    return exit_code::ok;
  }
  std::fprintf(a.json ? stderr : stdout, "%s\n", run_id.c_str());
  warn_hosts_down(cl, cluster);
  wait_options wo;
  wo.json = a.json;
  wo.cluster = &cluster;
  return follow(cl, cluster, run_id, wo, a.collect);
}

int do_status(const std::string& config, const std::string& run_id, bool json,
              const std::string& gantt, double timeout_s) {
  auto cluster = cluster_for(config);
  if (auto why = nobody_listens(cluster, config); !why.empty()) {
    std::fprintf(stderr, "error: %s\n", why.c_str());
    return exit_code::unreachable;
  }
  coordinator_client cl(cluster);
  std::optional<nlohmann::json> st;
  try {
    st = cl.status(run_id, static_cast<int>(timeout_s * 1000));
  } catch (const coordinator_error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.exit_code();
  }
  if (!st) {
    std::fprintf(stderr, "error: no answer from the coordinator at %s within %g s\n",
                 cl.endpoint().c_str(), timeout_s);
    return exit_code::unreachable;
  }
  if (json)
    std::printf("%s\n", st->dump(2).c_str());
  else if (run_id == "@cluster")
    std::printf("%s", format_cluster(*st).c_str());
  else {
    std::printf("%s", format_status(*st).c_str());
    warn_hosts_down(cl, cluster);
  }
  if (!gantt.empty()) {
    try {
      files::write_atomic(gantt, actors::planner::gantt_svg({run_gantt(*st)}));
    } catch (const nlohmann::json::exception& e) {
      std::fprintf(stderr, "error: the run's status has no stage times for a chart (%s); is "
                           "the coordinator older than this client?\n", e.what());
      return exit_code::usage;
    }
  }
  return exit_code::ok;
}

int do_wait(const std::string& config, const std::string& run_id, double timeout_s, bool json,
            const std::string& collect) {
  auto cluster = cluster_for(config);
  if (auto why = nobody_listens(cluster, config); !why.empty()) {
    std::fprintf(stderr, "error: %s\n", why.c_str());
    return exit_code::unreachable;
  }
  coordinator_client cl(cluster);
  std::string id = run_id;
  if (id.empty()) {
    // No run named: the latest, as `status` takes it, fixed now by its id.
    try {
      auto st = cl.status_page("", 0, 1, 5000);
      if (!st) {
        std::fprintf(stderr, "error: no answer from the coordinator at %s within 5 s\n",
                     cl.endpoint().c_str());
        return exit_code::unreachable;
      }
      id = (*st)["run_id"].get<std::string>();
    } catch (const coordinator_error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return e.exit_code();
    }
  }
  wait_options wo;
  wo.timeout_s = timeout_s;
  wo.json = json;
  wo.cluster = &cluster;
  return follow(cl, cluster, id, wo, collect);
}

/// Options shared by the line verbs; they live as long as the app.
struct line_options {
  std::string config_path, host, run_id, gantt, collect;
  double timeout_s = 0;
  double status_timeout_s = 5;
  bool json = false;
  run_args ra;
  std::string exe;
};

} // namespace

void add_line_verbs(CLI::App& app, verb_list& out, node_runner run_node) {
  auto o = std::make_shared<line_options>();
  // CLI11 keeps pointers into `o`: tie its lifetime to the app through the callbacks.
  auto* node = app.add_subcommand("node", "Run this host's node in the foreground");
  node->add_option("--config", o->config_path, "Cluster config (JSON)")->required();
  node->add_option("--host", o->host, "This host's name in the config")->required();
  out.push_back({node, [o, run_node] { return run_node(config::load(o->config_path), o->host); }});

  auto& ra = o->ra;
  using verbs::seconds;
  using verbs::whole_number;
  auto* run = app.add_subcommand("run", "Submit a batch and follow it (or --background)");
  run->add_option("--config", ra.config, "Cluster config (JSON)")->required();
  run->add_option("--mode", ra.mode, "Mode: which pools and decoders are active")->required();
  // The uniform form's options are required unless --jobs names a shot list, which
  // excludes them (checked in do_run, naming the option).
  std::vector<CLI::Option*> uniform = {
    run->add_option("--prompt-file", ra.prompt_file,
                    "File holding the prompt text (at most knobs.max_prompt_bytes)"),
    run->add_option("--width", ra.width, "Width in pixels")->check(whole_number(8, 8192)),
    run->add_option("--height", ra.height, "Height in pixels")->check(whole_number(8, 8192)),
    run->add_option("--seconds", ra.seconds, "Clip length in seconds")->check(whole_number(1, 3600)),
    run->add_option("--count", ra.count, "Jobs in the batch")->check(whole_number(1, run_max_jobs)),
    run->add_option("--seed", ra.seed, "Seed of job 0 (job i gets seed + i; the last at most 2^64-1)")
      ->check(whole_number(0, UINT64_MAX))};
  run->add_option("--jobs", ra.jobs,
                  "A shot list (JSON Lines, docs/shots.md) instead of --prompt-file, --width, "
                  "--height, --seconds, --count and --seed");
  run->add_option("--reference-file", ra.reference_file, "Reference image for the jobs");
  run->add_option("--priority", ra.priority,
                  "The run's place in the queue: higher goes first, then older (default 0)")
    ->check(CLI::Range(-actors::coordinator::max_priority, actors::coordinator::max_priority));
  run->add_flag("--background", ra.background, "Print the run id and return at once");
  run->add_flag("--rerender", ra.rerender,
                "Render every job, even one whose job key names an output the cluster or the "
                "--collect directory holds (by default such a job is reused: docs/shots.md)");
  run->add_option("--collect", ra.collect,
                  "Copy each finished video, verified, into this directory with an index.jsonl; "
                  "a job whose key names a video indexed there (still there, same SHA-256) "
                  "reuses it (docs/shots.md)");
  run->add_flag("--json", ra.json, "Print JSON (the final status, or the run id)");
  out.push_back({run, [o, uniform] {
                   for (auto* opt : uniform) {
                     if (opt->count() > 0)
                       o->ra.given.push_back(opt->get_name());
                     else if (opt->get_name() != "--count")  // --count defaults to 1
                       o->ra.missing.push_back(opt->get_name());
                   }
                   return do_run(o->ra);
                 }});

  auto* wait = app.add_subcommand(
    "wait", "Follow a run until it ends, with its progress (exit codes: docs/exit-codes.md)");
  wait->add_option("run_id", o->run_id, "Run id (default: the latest run)");
  wait->add_option("--timeout", o->timeout_s, "Seconds to wait (0 = forever)")->check(seconds(0));
  wait->add_option("--config", o->config_path, "Cluster config (default: the last one used)");
  wait->add_flag("--json", o->json, "Print the final status JSON");
  wait->add_option("--collect", o->collect,
                   "Then copy the run's videos, verified, into this directory (docs/shots.md)");
  out.push_back({wait, [o] {
                   return do_wait(o->config_path, o->run_id, o->timeout_s, o->json, o->collect);
                 }});

  auto* status = app.add_subcommand("status", "Show a run (default: the latest), or the cluster");
  status->add_option("run_id", o->run_id,
                     "Run id, or @cluster: the coordinator's view of hosts, pools and decoders");
  status->add_option("--config", o->config_path, "Cluster config (default: the last one used)");
  status->add_option("--timeout", o->status_timeout_s, "Seconds to wait for the answer")
    ->check(seconds(0, true));
  status->add_flag("--json", o->json, "Print the status JSON");
  status->add_option("--gantt", o->gantt, "Also write the run's Gantt chart (SVG) to this file");
  out.push_back({status, [o] {
                   return do_status(o->config_path, o->run_id, o->json, o->gantt,
                                    o->status_timeout_s);
                 }});

  auto* resume = app.add_subcommand(
    "resume", "Finish a run's failed jobs, redoing only missing stages, and follow it");
  resume->add_option("run_id", o->run_id, "Run id")->required();
  resume->add_option("--config", o->config_path, "Cluster config (default: the last one used)");
  resume->add_option("--timeout", o->timeout_s, "Seconds to wait (0 = forever)")->check(seconds(0));
  resume->add_flag("--json", o->json, "Print the final status JSON");
  resume->add_option("--collect", o->collect,
                     "Then copy the videos not yet there, verified, into this directory "
                     "(docs/shots.md)");
  out.push_back({resume, [o] {
                   auto cluster = cluster_for(o->config_path);
                   coordinator_client cl(cluster);
                   try {
                     auto r = cl.resume(o->run_id);
                     std::fprintf(o->json ? stderr : stdout, "run %s: %u failed jobs resumed; %s\n",
                                  r.run_id.c_str(), r.reopened, r.state.c_str());
                   } catch (const coordinator_error& e) {
                     std::fprintf(stderr, "error: %s\n", e.what());
                     return e.exit_code();
                   }
                   wait_options wo;
                   wo.timeout_s = o->timeout_s;
                   wo.json = o->json;
                   wo.cluster = &cluster;
                   return follow(cl, cluster, o->run_id, wo, o->collect);
                 }});

  auto* demo = app.add_subcommand("demo", "Run the reference 6-job batch on two local nodes");
  demo->add_flag("--json", o->json, "Print the final status JSON");
  out.push_back({demo, [o] { return run_demo(o->json, self_exe("vidline")); }});
}

int cli_main(int argc, char** argv, node_runner run_node) {
  CLI::App app{"vidline: a video diffusion production line over mismatched GPUs on a LAN"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every verb");
  app.set_version_flag("--version", std::string("vidline ") + version_string);
  verb_list verbs;
  add_line_verbs(app, verbs, run_node);
  add_queue_verbs(app, verbs);
  add_backend_verbs(app, verbs);
  add_plan_verbs(app, verbs);
  add_profile_verbs(app, verbs);
  add_security_verbs(app, verbs);
  add_gpu_verbs(app, verbs);

  // CLI11 reads an unknown first word as a stray argument and says only that a subcommand
  // is required: name it and list the verbs instead.
  if (argc >= 2 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (auto* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      known = known || sub->check_name(argv[1]);
    }
    if (!known) {
      std::fprintf(stderr, "error: unknown verb '%s'; the verbs: %s (vidline --help)\n",
                   argv[1], names.c_str());
      return exit_code::usage;
    }
  }
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
  } catch (const coordinator_error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return exit_code::fatal;
  }
  return exit_code::usage;
}

} // namespace vidline::nodes::verbs
