// The queue's verbs: `vidline runs`, `vidline cancel RUN [--job I]`, `vidline submit RUN ...`
// (docs/cli.md), and the coordinator_client calls behind them.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include <CLI/CLI.hpp>

#include "actors/coordinator/admission.hpp"
#include "nodes/verbs/cli.hpp"
#include "nodes/verbs/cli_checks.hpp"
#include "nodes/verbs/commands.hpp"
#include "nodes/verbs/line_text.hpp"
#include "nodes/verbs/exit_codes.hpp"
#include "nodes/verbs/shot_file.hpp"
#include "nodes/verbs/verbs.hpp"

namespace vidline::nodes::verbs {

using nlohmann::json;

namespace {


std::string request_id() {
  std::random_device rd;
  char buf[40];
  std::snprintf(buf, sizeof(buf), "add-%08x%08x%08x", rd(), rd(), rd());
  return buf;
}

struct queue_options {
  std::string config, run_id, prompt_file, reference_file, jobs;
  std::vector<std::string> given, missing;  ///< submit: the batch options given / left out
  bool json = false, all = false;
  int64_t job = -1;
  uint32_t width = 0, height = 0, seconds = 0, count = 1;
  uint64_t seed = 0;
  double timeout_s = 10;
};

std::string eta_text(const json& e) { return e.is_number() ? duration_text(e.get<double>()) : "-"; }

int do_runs(const queue_options& o) {
  auto cluster = cluster_for(o.config);
  if (auto why = nobody_listens(cluster, o.config); !why.empty()) {
    std::fprintf(stderr, "error: %s\n", why.c_str());
    return exit_code::unreachable;
  }
  coordinator_client cl(cluster);
  json list;
  try {
    list = cl.runs(o.all, static_cast<int>(o.timeout_s * 1000));
  } catch (const coordinator_error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.exit_code();
  }
  if (o.json) {
    // The shape of GET /v1/runs (docs/http.md): the list and the newest run's id.
    const json latest = list.empty() ? json(nullptr) : list.back()["run_id"];
    std::printf("%s\n", json{{"runs", list}, {"latest", latest}}.dump(2).c_str());
    return exit_code::ok;
  }
  std::printf("%-24s %-10s %11s %9s %8s %9s  %s\n", "RUN", "STATE", "DONE/TOTAL", "ETA",
              "PRIORITY", "WH/CLIP", "MODE");
  for (auto& r : list) {
    std::string done = std::to_string(r.value("done", 0)) + "/" + std::to_string(r.value("total", 0));
    // The energy its cards drew per clip made ("-": no telemetry, or no clip yet).
    std::string wh = "-";
    if (auto w = r.value("wh_per_clip", json()); w.is_number()) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2f", w.get<double>());
      wh = buf;
    }
    std::printf("%-24s %-10s %11s %9s %8d %9s  %s\n", r.value("run_id", "").c_str(),
                r.value("state", "").c_str(), done.c_str(), eta_text(r["eta_s"]).c_str(),
                r.value("priority", 0), wh.c_str(), r.value("mode", "").c_str());
  }
  return exit_code::ok;
}

int do_cancel(const queue_options& o) {
  auto cluster = cluster_for(o.config);
  coordinator_client cl(cluster);
  msg::cancel_run req;
  req.run_id = o.run_id;
  if (o.job >= 0) {
    req.one_job = true;
    req.index = static_cast<uint32_t>(o.job);
  }
  try {
    auto r = cl.cancel(req, static_cast<int>(o.timeout_s * 1000));
    if (o.json)
      std::printf("%s\n", json{{"run_id", r.run_id}, {"cancelled", r.cancelled},
                               {"in_flight", r.in_flight}, {"state", r.state}}
                            .dump()
                            .c_str());
    else
      std::printf("run %s: %u jobs cancelled (%u stopped in flight); run %s\n",
                  r.run_id.c_str(), r.cancelled, r.in_flight, r.state.c_str());
  } catch (const coordinator_error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.exit_code();
  }
  return exit_code::ok;
}

/// Sends jobs to add and prints the answer.
int send_jobs(const queue_options& o, coordinator_client& cl, const msg::submit_jobs& req) {
  try {
    auto r = cl.submit_jobs(req, static_cast<int>(o.timeout_s * 1000));
    if (o.json)
      std::printf("%s\n", json{{"run_id", r.run_id}, {"first_index", r.first_index},
                               {"count", r.count}}
                            .dump()
                            .c_str());
    else
      std::printf("run %s: jobs %u..%u added\n", r.run_id.c_str(), r.first_index,
                  r.first_index + r.count - 1);
  } catch (const coordinator_error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.exit_code();
  }
  return exit_code::ok;
}

/// `vidline submit RUN --jobs FILE`: the shots of a list, read and checked as `run --jobs`
/// reads them, their inputs uploaded by digest. "" or the error (exit code in `rc`).
std::string submit_shot_list(const queue_options& o, const config::cluster& cluster,
                             coordinator_client& cl, msg::submit_jobs& req, int& rc) {
  rc = exit_code::usage;
  shot_list list;
  const auto cat = actors::coordinator::run_catalog(cluster, "");  // the run's mode: the coordinator's check
  if (auto why = read_shot_file(o.jobs, cluster.knobs, run_max_jobs, list, &cat); !why.empty())
    return "--jobs: " + why;
  for (std::size_t i = 0; i < list.shots.size(); ++i) {
    auto& sh = list.shots[i];
    std::vector<std::pair<std::string, std::string>> files{{sh.reference, sh.reference_sha256}};
    for (auto& in : sh.inputs)
      files.emplace_back(in.path, in.sha256);
    for (auto& [path, sha] : files) {
      if (path.empty() || sha.empty())
        continue;
      bool unreachable = false;
      if (auto w = cl.upload_input(path, sha, nullptr, &unreachable); !w.empty()) {
        rc = unreachable ? exit_code::unreachable : exit_code::usage;
        return o.jobs + ":" + std::to_string(list.lines[i]) + ": " + path
               + " was not uploaded to the coordinator: " + w;
      }
    }
  }
  req.shots = std::move(list.shots);
  return "";
}

int do_submit(const queue_options& o) {
  if (!o.jobs.empty() && !o.given.empty()) {
    std::fprintf(stderr, "error: --jobs FILE gives each shot its prompt, size and seed: it goes "
                         "without %s\n", o.given.front().c_str());
    return exit_code::usage;
  }
  if (o.jobs.empty() && !o.missing.empty()) {
    std::fprintf(stderr, "error: %s is required (or --jobs FILE, a shot list)\n",
                 o.missing.front().c_str());
    return exit_code::usage;
  }
  if (auto why = verbs::seed_range_error(o.seed, o.count); !why.empty()) {
    std::fprintf(stderr, "error: %s\n", why.c_str());
    return exit_code::usage;
  }
  auto cluster = cluster_for(o.config);
  msg::submit_jobs req;
  req.run_id = o.run_id;
  if (!o.jobs.empty()) {
    req.request_id = request_id();
    coordinator_client cl(cluster);
    int rc = exit_code::ok;
    if (auto why = submit_shot_list(o, cluster, cl, req, rc); !why.empty()) {
      std::fprintf(stderr, "error: %s\nnothing was submitted\n", why.c_str());
      return rc;
    }
    return send_jobs(o, cl, req);
  }
  std::string why;
  req.prompt = read_prompt_file(o.prompt_file, cluster.knobs, why);
  if (!why.empty()) {
    std::fprintf(stderr, "error: --prompt-file: %s\n", why.c_str());
    return exit_code::usage;
  }
  if (!o.reference_file.empty()) {
    if (auto w = read_reference(o.reference_file, req.reference, req.reference_sha256);
        !w.empty()) {
      std::fprintf(stderr, "error: --reference-file: %s\n", w.c_str());
      return exit_code::usage;
    }
  }
  req.width = o.width;
  req.height = o.height;
  req.seconds = o.seconds;
  req.count = o.count;
  req.seed = o.seed;
  req.request_id = request_id();
  coordinator_client cl(cluster);
  // The reference travels by digest, as `vidline run`'s (docs/shots.md, "References travel").
  if (!req.reference_sha256.empty()) {
    bool unreachable = false;
    if (auto w = cl.upload_input(req.reference, req.reference_sha256, nullptr, &unreachable);
        !w.empty()) {
      std::fprintf(stderr, "error: --reference-file: %s was not uploaded to the coordinator: "
                           "%s\nnothing was submitted\n", req.reference.c_str(), w.c_str());
      return unreachable ? exit_code::unreachable : exit_code::usage;
    }
  }
  return send_jobs(o, cl, req);
}

} // namespace

void add_queue_verbs(CLI::App& app, verb_list& out) {
  auto o = std::make_shared<queue_options>();
  using verbs::seconds;
  using verbs::whole_number;

  auto* runs = app.add_subcommand("runs", "List the coordinator's runs: state, done/total, ETA, priority");
  runs->add_option("--config", o->config, "Cluster config (default: the last one used)");
  runs->add_flag("--json", o->json, "Print the list as JSON");
  runs->add_flag("--all", o->all, "Every finished run too (default: the newest 20 of them)");
  runs->add_option("--timeout", o->timeout_s, "Seconds to wait for the answer")
    ->check(seconds(0, true));
  out.push_back({runs, [o] { return do_runs(*o); }});

  auto* cancel = app.add_subcommand(
    "cancel", "Stop a run, or one job of it: queued jobs at once, stages in flight on their GPU");
  cancel->add_option("run_id", o->run_id, "Run id")->required();
  cancel->add_option("--job", o->job, "Only this job (its index)")
    ->check(whole_number(0, 4294967295u));
  cancel->add_option("--config", o->config, "Cluster config (default: the last one used)");
  cancel->add_flag("--json", o->json, "Print the answer as JSON");
  cancel->add_option("--timeout", o->timeout_s, "Seconds to wait for the answer")
    ->check(seconds(0, true));
  out.push_back({cancel, [o] { return do_cancel(*o); }});

  auto* submit = app.add_subcommand("submit", "Add jobs to an open run (the options of run's batch)");
  submit->add_option("run_id", o->run_id, "Run id")->required();
  submit->add_option("--config", o->config, "Cluster config (default: the last one used)");
  // The batch options are required unless --jobs names a shot list, which excludes them.
  std::vector<CLI::Option*> batch = {
    submit->add_option("--prompt-file", o->prompt_file,
                       "File holding the prompt text (at most knobs.max_prompt_bytes)"),
    submit->add_option("--width", o->width, "Width in pixels")->check(whole_number(8, 8192)),
    submit->add_option("--height", o->height, "Height in pixels")->check(whole_number(8, 8192)),
    submit->add_option("--seconds", o->seconds, "Clip length in seconds")->check(whole_number(1, 3600)),
    submit->add_option("--count", o->count, "Jobs to add")->check(whole_number(1, 1000000)),
    submit->add_option("--seed", o->seed, "Seed of the first job added (then seed + 1, ...)")
      ->check(whole_number(0, UINT64_MAX))};
  submit->add_option("--reference-file", o->reference_file, "Reference image for the jobs");
  submit->add_option("--jobs", o->jobs,
                     "A shot list (JSON Lines or CSV, docs/shots.md) instead of the batch options");
  submit->add_flag("--json", o->json, "Print the answer as JSON");
  submit->add_option("--timeout", o->timeout_s, "Seconds to wait for the answer")
    ->check(seconds(0, true));
  out.push_back({submit, [o, batch] {
                   for (auto* opt : batch) {
                     if (opt->count() > 0)
                       o->given.push_back(opt->get_name());
                     else if (opt->get_name() != "--count")  // --count defaults to 1
                       o->missing.push_back(opt->get_name());
                   }
                   return do_submit(*o);
                 }});
}

} // namespace vidline::nodes::verbs
