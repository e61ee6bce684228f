#include "nodes/verbs/plan_cmd.hpp"

#include "actors/coordinator/admission.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include <vidline/embedded_config.hpp>

#include "actors/coordinator/coordinator_actor.hpp"
#include "actors/coordinator/dispatch_setup.hpp"
#include "actors/planner/gantt.hpp"
#include "actors/planner/reference_rows.hpp"
#include "common/files.hpp"
#include "nodes/verbs/cli_checks.hpp"
#include "nodes/verbs/exit_codes.hpp"
#include "nodes/verbs/shot_file.hpp"
#include "nodes/verbs/verbs.hpp"

namespace vidline::nodes::verbs {

using nlohmann::json;

plan_setup load_plan_setup(const std::string& config_file, const std::string& profile_file,
                           const std::string& policy) {
  plan_setup out;
  out.cluster = config_file.empty() ? config::parse(embedded::reference_config, "")
                                    : config::load(config_file);
  auto est = actors::coordinator::estimates_for(out.cluster, profile_file, &out.profile_source);
  out.est = est;
  out.state = actors::coordinator::initial_state(out.cluster, 1.0);
  std::map<std::string, std::string> policies;
  for (auto& m : out.cluster.modes)
    policies[m.name] = m.policy;
  if (!policy.empty())
    for (auto& m : out.cluster.modes)
      if (m.name != actors::coordinator::auto_mode)
        policies[m.name] = policy;
  actors::coordinator::configure(out.state, out.cluster, est, policies);
  return out;
}

namespace {

json span_json(const std::optional<actors::planner::planned_job::span>& s) {
  if (!s)
    return nullptr;
  return {{"start_s", s->start}, {"end_s", s->end}};
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string span_text(const std::optional<actors::planner::planned_job::span>& s) {
  if (!s)
    return "-";
  return fmt("%.1f", s->start) + "-" + fmt("%.1f", s->end);
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string out;
  for (auto& s : v)
    out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string size_text(const actors::planner::request& r) {
  if (!r.shots.empty())
    return "a shot list of " + std::to_string(r.shots.size()) + " shots";
  return std::to_string(r.width) + "x" + std::to_string(r.height) + ", "
         + std::to_string(r.seconds) + " s";
}

/// "1.234 Wh per clip (12.3 Wh in all)", or why the energy is unknown.
std::string energy_text(const actors::planner::plan_result& p) {
  if (p.energy_j >= 0)
    return fmt("%.3f Wh per clip", p.wh_per_clip) + fmt(" (%.1f Wh in all", p.energy_j / 3600)
           + ", from the profile's power figures)";
  if (!p.unpowered.empty())
    return "unknown: the profile has no power figure for " + join(p.unpowered)
           + " (`vidline profile build` learns them from runs whose nodes read GPU telemetry)";
  return "unknown: no clip finished";
}

bool complete(const actors::planner::plan_result& p) {
  return p.refused.empty() && p.finished && p.summary.failed == 0;
}

/// True when plan `p` ends as early as the best (to the millisecond).
bool ties(const actors::planner::plan_result& p, const actors::planner::plan_result& best) {
  return complete(p) && std::abs(p.summary.makespan_s - best.summary.makespan_s) < 1e-3;
}

/// The best of several plans: all jobs done, then the earliest makespan (first listed wins
/// a tie). -1 when none finished.
int best_of(const std::vector<actors::planner::plan_result>& plans) {
  int best = -1;
  for (std::size_t i = 0; i < plans.size(); ++i)
    if (complete(plans[i])
        && (best < 0 || plans[i].summary.makespan_s < plans[best].summary.makespan_s - 1e-9))
      best = static_cast<int>(i);
  return best;
}

actors::planner::gantt_chart chart_of(const actors::planner::plan_result& p, const actors::planner::request& req) {
  actors::planner::gantt_chart c;
  c.title = p.mode + " (" + p.policy + "): " + std::to_string(req.count) + " x "
            + size_text(req) + ", makespan " + fmt("%.1f", p.summary.makespan_s) + " s";
  c.lanes = p.pools;
  c.lanes.insert(c.lanes.end(), p.decoders.begin(), p.decoders.end());
  c.spans = p.spans;
  for (auto& j : p.jobs)
    for (uint32_t from : j.takes_from)
      c.dependencies.push_back({from, j.index});
  return c;
}

void print_plan(const actors::planner::plan_result& p, const actors::planner::request& req,
                const std::string& profile) {
  if (req.shots.empty())
    std::printf("plan: %u x %s on mode %s (policy %s)\n", req.count, size_text(req).c_str(),
                p.mode.c_str(), p.policy.c_str());
  else
    std::printf("plan: %s (%u jobs) on mode %s (policy %s)\n", size_text(req).c_str(),
                req.count, p.mode.c_str(), p.policy.c_str());
  std::printf("pools: %s; decoders: %s; profile: %s\n", join(p.pools).c_str(),
              join(p.decoders).c_str(), profile.c_str());
  std::printf("times in seconds from submission (the run clock)\n\n");
  if (p.detailed) {
    std::printf("%5s  %-20s  %-10s %-4s  %-15s %-15s %-15s %-15s %9s\n", "job", "seed", "pool",
                "cold", "conditioning", "sampling", "handoff", "decode", "done");
    for (auto& j : p.jobs) {
      if (!req.shots.empty())
        std::printf("%5s  %s, %ux%u, %u s\n", "", j.name.empty() ? "(unnamed)" : j.name.c_str(),
                    j.width, j.height, j.seconds);
      std::printf("%5u  %-20llu  %-10s %-4s  %-15s %-15s %-15s %-15s %9s\n", j.index,
                  static_cast<unsigned long long>(j.seed), j.pool.c_str(), j.cold ? "yes" : "no",
                  span_text(j.conditioning).c_str(), span_text(j.sampling).c_str(),
                  span_text(j.handoff).c_str(), span_text(j.decode).c_str(),
                  j.state == "succeeded" && j.decode ? fmt("%.1f", j.decode->end).c_str()
                                                     : j.state.c_str());
    }
  } else {
    std::printf("(%u jobs: more than %u, so the plan keeps only its summary, no row per job)\n",
                req.count, plan_detail_max_jobs);
  }
  std::printf("\nfirst finish %.1f s   makespan %.1f s   %.2f clips/hour   (%u/%u succeeded)\n",
              p.summary.first_finish_s, p.summary.makespan_s, p.summary.clips_per_hour,
              p.summary.succeeded, req.count);
  std::printf("energy: %s\n", energy_text(p).c_str());
}

/// The reference line's measurement of this batch, when the embedded cluster is planned.
const actors::planner::reference_row* measured(const plan_options& o, const std::string& mode) {
  if (!o.config.empty() || !o.profile.empty() || !o.jobs.empty())
    return nullptr;
  return actors::planner::find_reference_row(mode, o.width, o.height, o.seconds, o.count);
}

} // namespace

json plan_json(const actors::planner::plan_result& p, const actors::planner::request& req) {
  json out = {{"mode", p.mode},
              {"policy", p.policy},
              {"pools", p.pools},
              {"decoders", p.decoders},
              {"width", req.width},
              {"height", req.height},
              {"seconds", req.seconds},
              {"count", req.count},
              {"seed", req.seed}};
  if (!p.refused.empty()) {
    out["refused"] = p.refused;
    return out;
  }
  if (!p.detailed)
    out["summary_only"] = "more than " + std::to_string(plan_detail_max_jobs)
                          + " jobs: no row per job";
  if (!req.shots.empty()) {
    out["shots"] = req.shots.size();
    for (const char* k : {"width", "height", "seconds", "seed"})
      out[k] = nullptr;  // each job has its own
  }
  json jobs = json::array();
  for (auto& j : p.jobs)
    jobs.push_back({{"index", j.index},
                    {"name", j.name.empty() ? json(nullptr) : json(j.name)},
                    {"width", j.width},
                    {"height", j.height},
                    {"seconds", j.seconds},
                    {"seed", j.seed},
                    {"state", j.state},
                    {"pool", j.pool.empty() ? json(nullptr) : json(j.pool)},
                    {"decoder", j.decoder.empty() ? json(nullptr) : json(j.decoder)},
                    {"cold", j.cold},
                    {"model", j.model.empty() ? json(nullptr) : json(j.model)},
                    {"stages", {{"conditioning", span_json(j.conditioning)},
                                {"sampling", span_json(j.sampling)},
                                {"handoff", span_json(j.handoff)},
                                {"decode", span_json(j.decode)}}},
                    {"finish_s", j.decode && j.state == "succeeded" ? json(j.decode->end)
                                                                     : json(nullptr)}});
  if (p.detailed)
    out["jobs"] = std::move(jobs);
  out["summary"] = {{"succeeded", p.summary.succeeded},
                    {"failed", p.summary.failed},
                    {"first_finish_s", p.summary.first_finish_s},
                    {"makespan_s", p.summary.makespan_s},
                    {"clips_per_hour", p.summary.clips_per_hour},
                    {"energy_wh", p.energy_j >= 0 ? json(p.energy_j / 3600) : json(nullptr)},
                    {"wh_per_clip", p.wh_per_clip >= 0 ? json(p.wh_per_clip) : json(nullptr)},
                    {"clips_per_kwh", p.wh_per_clip > 0 ? json(1000 / p.wh_per_clip)
                                                        : json(nullptr)},
                    {"energy_unknown_for", p.unpowered}};
  return out;
}

int run_plan(const plan_options& o_in) {
  plan_options o = o_in;
  shot_list list;
  if (!o.jobs.empty()) {
    if (auto why = jobs_exclusive_error(o.given); !why.empty()) {
      std::fprintf(stderr, "error: %s\n", why.c_str());
      return exit_code::usage;
    }
    // The knobs of the config planned on (the reference's when none is given).
    auto c = o.config.empty() ? config::parse(embedded::reference_config, "")
                              : config::load(o.config);
    const auto cat = actors::coordinator::run_catalog(c, o.mode);
    if (auto why = read_shot_file(o.jobs, c.knobs, plan_max_jobs, list, &cat); !why.empty()) {
      std::fprintf(stderr, "error: --jobs: %s\n", why.c_str());
      return exit_code::usage;
    }
    o.count = static_cast<uint32_t>(list.jobs);
    o.width = o.height = o.seconds = 0;
    o.seed = 0;
  } else {
    for (const char* need : {"--width", "--height", "--seconds", "--count"})
      if (std::find(o.given.begin(), o.given.end(), need) == o.given.end()) {
        std::fprintf(stderr, "error: %s is required (or --jobs FILE, a shot list)\n", need);
        return exit_code::usage;
      }
  }
  // Refused before anything is planned: each would only show after minutes, or never.
  if (o.count > plan_max_jobs) {
    std::fprintf(stderr, "error: --count %u: a plan holds at most %u jobs (the planner keeps "
                         "every job of the batch in memory); plan a smaller batch, the "
                         "makespan of a larger one grows linearly\n",
                 o.count, plan_max_jobs);
    return exit_code::usage;
  }
  if (!o.gantt.empty() && o.count > plan_detail_max_jobs) {
    std::fprintf(stderr, "error: --gantt: a chart shows at most %u jobs (a bar per stage of "
                         "each job); got --count %u\n",
                 plan_detail_max_jobs, o.count);
    return exit_code::usage;
  }
  if (auto why = verbs::seed_range_error(o.seed, o.count); !why.empty()) {
    std::fprintf(stderr, "error: %s\n", why.c_str());
    return exit_code::usage;
  }
  plan_setup setup = load_plan_setup(o.config, o.profile, o.policy);
  actors::planner::request req;
  req.width = o.width;
  req.height = o.height;
  req.seconds = o.seconds;
  req.count = o.count;
  req.seed = o.seed;
  req.shots = list.shots;
  // Each shot's model, from its workflow: switches between models are cold stages.
  const config::catalog plan_catalog = actors::coordinator::run_catalog(setup.cluster, o.mode);
  req.catalog = &plan_catalog;
  if (!req.shots.empty() && o.mode != "all" && setup.state.modes.count(o.mode))
    if (auto why = shot_file_capacity(o.jobs, list, setup.state, o.mode); !why.empty()) {
      std::fprintf(stderr, "error: plan refused: %s\n", why.c_str());
      return exit_code::usage;
    }

  std::vector<std::string> modes;
  const bool all = o.mode == "all";
  if (all)
    modes = actors::planner::modes_to_compare(setup.state, setup.cluster);
  else
    modes = {o.mode};

  std::vector<actors::planner::plan_result> plans;
  actors::planner::sim_options so;
  so.record_spans = o.count <= plan_detail_max_jobs;
  for (auto& m : modes) {
    req.mode = m;
    plans.push_back(actors::planner::plan(setup.state, *setup.est, req, so));
  }

  if (!all && !plans[0].refused.empty()) {
    if (o.json)
      std::printf("%s\n", plan_json(plans[0], req).dump(2).c_str());
    std::fprintf(stderr, "error: plan refused: %s\n", plans[0].refused.c_str());
    return exit_code::usage;
  }
  if (all && std::none_of(plans.begin(), plans.end(),
                          [](auto& p) { return p.refused.empty(); })) {
    std::fprintf(stderr, "error: plan refused: no mode can run this batch:\n");
    for (auto& p : plans)
      std::fprintf(stderr, "  %s: %s\n", p.mode.c_str(), p.refused.c_str());
    if (o.json) {
      json arr = json::array();
      for (auto& p : plans)
        arr.push_back({{"mode", p.mode}, {"refused", p.refused}});
      std::printf("%s\n", json{{"modes", arr}, {"best", nullptr}}.dump(2).c_str());
    }
    return exit_code::usage;
  }
  for (auto& p : plans)
    for (auto& v : p.violations)
      std::fprintf(stderr, "warning: %s: simulation invariant broken: %s\n", p.mode.c_str(),
                   v.c_str());

  int best = best_of(plans);
  if (!o.gantt.empty()) {
    std::vector<actors::planner::gantt_chart> charts;
    for (std::size_t i = 0; i < plans.size(); ++i) {
      if (!plans[i].refused.empty())
        continue;
      req.mode = plans[i].mode;
      auto c = chart_of(plans[i], req);
      if (all && static_cast<int>(i) == best)
        c.title += "  (best)";
      charts.push_back(std::move(c));
    }
    files::write_atomic(o.gantt, actors::planner::gantt_svg(charts));
  }

  if (o.json) {
    if (!all) {
      req.mode = plans[0].mode;
      auto j = plan_json(plans[0], req);
      j["profile"] = setup.profile_source;
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      json arr = json::array();
      for (auto& p : plans) {
        req.mode = p.mode;
        auto j = plan_json(p, req);
        if (auto* m = measured(o, p.mode))
          j["measured"] = {{"first_finish_s", m->first_s}, {"makespan_s", m->makespan_s},
                           {"clips_per_hour", m->clips_per_hour}};
        arr.push_back(std::move(j));
      }
      json all_j{{"width", o.width}, {"height", o.height}, {"seconds", o.seconds},
                 {"count", o.count}, {"seed", o.seed},
                 {"profile", setup.profile_source}, {"modes", arr},
                 {"best", best < 0 ? json(nullptr) : json(plans[best].mode)}};
      if (!req.shots.empty()) {
        all_j["shots"] = req.shots.size();
        for (const char* k : {"width", "height", "seconds", "seed"})
          all_j[k] = nullptr;
      }
      std::printf("%s\n", all_j.dump(2).c_str());
    }
  } else if (!all) {
    req.mode = plans[0].mode;
    print_plan(plans[0], req, setup.profile_source);
    if (auto* m = measured(o, plans[0].mode))
      std::printf("the reference line measured: first %.3f s, makespan %.3f s, %.2f clips/hour"
                  " (plan %+.1f%%)\n",
                  m->first_s, m->makespan_s, m->clips_per_hour,
                  100 * (plans[0].summary.makespan_s / m->makespan_s - 1));
  } else {
    req.mode = "all";
    if (req.shots.empty())
      std::printf("plan: %u x %s, every mode; profile: %s; seconds from submission\n\n",
                  o.count, size_text(req).c_str(), setup.profile_source.c_str());
    else
      std::printf("plan: %s (%u jobs), every mode; profile: %s; seconds from submission\n\n",
                  size_text(req).c_str(), o.count, setup.profile_source.c_str());
    bool any_measured = false;
    for (auto& p : plans)
      any_measured = any_measured || measured(o, p.mode) != nullptr;
    std::printf("  %-24s %-10s %-28s %7s %10s %10s %9s %9s%s\n", "mode", "policy", "pools", "ok",
                "first", "makespan", "clips/h", "Wh/clip",
                any_measured ? "   measured makespan" : "");
    std::set<std::string> unpowered;
    for (std::size_t i = 0; i < plans.size(); ++i) {
      auto& p = plans[i];
      std::string pools = join(p.pools, ",");
      if (pools.size() > 28)
        pools = pools.substr(0, 25) + "...";
      if (!p.refused.empty()) {
        std::printf("  %-24s %-10s %-28s refused: %s\n", p.mode.c_str(), p.policy.c_str(),
                    pools.c_str(), p.refused.c_str());
        continue;
      }
      std::string ok = std::to_string(p.summary.succeeded) + "/" + std::to_string(o.count);
      std::string meas;
      if (auto* m = measured(o, p.mode))
        meas = fmt("   %10.3f", m->makespan_s) + fmt(" (plan %+.1f%%)",
                                                    100 * (p.summary.makespan_s / m->makespan_s - 1));
      unpowered.insert(p.unpowered.begin(), p.unpowered.end());
      std::printf("%s %-24s %-10s %-28s %7s %10.1f %10.1f %9.2f %9s%s\n",
                  best >= 0 && ties(p, plans[best]) ? "*" : " ", p.mode.c_str(), p.policy.c_str(),
                  pools.c_str(), ok.c_str(), p.summary.first_finish_s, p.summary.makespan_s,
                  p.summary.clips_per_hour,
                  p.wh_per_clip >= 0 ? fmt("%.3f", p.wh_per_clip).c_str() : "-", meas.c_str());
    }
    if (!unpowered.empty())
      std::printf("\nWh/clip -: the profile has no power figure for %s (`vidline profile "
                  "build` learns them from runs whose nodes read GPU telemetry)\n",
                  join({unpowered.begin(), unpowered.end()}).c_str());
    if (best >= 0) {
      std::string names;
      for (auto& p : plans)
        if (ties(p, plans[best]))
          names += (names.empty() ? "" : " and ") + p.mode;
      std::printf("\nbest: %s (* above%s), makespan %.1f s, %.2f clips/hour\n", names.c_str(),
                  names.find(" and ") != std::string::npos ? ", the same makespan" : "",
                  plans[best].summary.makespan_s, plans[best].summary.clips_per_hour);
    }
  }
  if (!all)
    return complete(plans[0]) ? exit_code::ok : exit_code::job_failed;
  return best >= 0 ? exit_code::ok : exit_code::job_failed;
}

void add_plan_verbs(CLI::App& app, verb_list& out) {
  auto o = std::make_shared<plan_options>();
  auto* plan = app.add_subcommand(
    "plan", "Plan a batch on a virtual clock with the coordinator's own scheduler (no GPUs)");
  plan->add_option("--mode", o->mode, "Mode to plan, 'auto', or 'all' to compare every mode")
    ->required();
  using verbs::whole_number;
  // The uniform batch's options: required unless --jobs names a shot list, which excludes
  // them (checked in run_plan, naming the option).
  std::vector<CLI::Option*> uniform = {
    plan->add_option("--width", o->width, "Width in pixels")->check(whole_number(8, 8192)),
    plan->add_option("--height", o->height, "Height in pixels")->check(whole_number(8, 8192)),
    plan->add_option("--seconds", o->seconds, "Clip length in seconds")->check(whole_number(1, 3600)),
    plan->add_option("--count", o->count,
                     "Jobs in the batch (at most " + std::to_string(plan_max_jobs) + "; above "
                       + std::to_string(plan_detail_max_jobs) + " only the summary is shown)")
      ->check(whole_number(1, UINT32_MAX)),
    plan->add_option("--seed", o->seed, "Seed of job 0 (job i gets seed + i; the last at most 2^64-1)")
      ->check(whole_number(0, UINT64_MAX))};
  plan->add_option("--jobs", o->jobs,
                   "A shot list (JSON Lines or CSV, docs/shots.md) instead of --width, --height, "
                   "--seconds, --count and --seed");
  plan->add_option("--config", o->config, "Cluster config (default: the embedded reference cluster)");
  plan->add_option("--profile", o->profile,
                   "Timing profile (default: the config's sim profile, else the embedded reference)");
  plan->add_option("--policy", o->policy,
                   "Dispatch policy of the config's modes: in_turn (default, as the reference "
                   "line), first_free, auto")
    ->check(CLI::IsMember({"in_turn", "first_free", "auto"}));
  plan->add_flag("--json", o->json, "Print JSON (the status contract's field names)");
  plan->add_option("--gantt", o->gantt, "Write a Gantt chart (SVG) to this file");
  out.push_back({plan, [o, uniform] {
                   o->given.clear();
                   for (auto* opt : uniform)
                     if (opt->count() > 0 && opt->get_name() != "--seed")
                       o->given.push_back(opt->get_name());
                   if (!o->jobs.empty() && uniform.back()->count() > 0)
                     o->given.push_back("--seed");
                   try {
                     return run_plan(*o);
                   } catch (const config::profile::profile_error& e) {
                     std::fprintf(stderr, "profile error: %s\n", e.what());
                     return exit_code::usage;
                   } catch (const std::invalid_argument& e) {
                     std::fprintf(stderr, "error: %s\n", e.what());
                     return exit_code::usage;
                   }
                 }});
}

} // namespace vidline::nodes::verbs
