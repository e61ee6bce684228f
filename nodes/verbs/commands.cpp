#include "nodes/verbs/commands.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "actors/coordinator/coordinator_actor.hpp"
#include "actors/planner/plan.hpp"
#include "common/files.hpp"
#include "nodes/bus/bus.hpp"
#include "nodes/verbs/client.hpp"
#include "nodes/data/inputs.hpp"
#include "nodes/verbs/exit_codes.hpp"
#include "nodes/bus/keys.hpp"
#include "nodes/verbs/line_text.hpp"

namespace vidline::nodes::verbs {

using nlohmann::json;

std::string state_dir() {
  if (const char* d = std::getenv("VIDLINE_STATE_DIR"); d != nullptr && *d != '\0')
    return d;
  if (const char* x = std::getenv("XDG_STATE_HOME"); x != nullptr && *x != '\0')
    return std::string(x) + "/vidline";
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : "/tmp") + "/.local/state/vidline";
}

void remember_config(const std::string& config_path) {
  auto dir = state_dir();
  files::make_dirs(dir);
  files::write_atomic(dir + "/config", std::filesystem::absolute(config_path).string() + "\n");
}

config::cluster cluster_for(const std::string& config_path) {
  if (!config_path.empty())
    return config::load(config_path);
  auto remembered = state_dir() + "/config";
  std::string path;
  try {
    path = files::read_all(remembered);
  } catch (const std::exception&) {
    throw config::config_error("", "no --config given and none remembered in " + remembered
                                     + " (run `vidline run --config FILE ...` first)");
  }
  while (!path.empty() && (path.back() == '\n' || path.back() == '\r'))
    path.pop_back();
  return config::load(path);
}

// -- output ------------------------------------------------------------------------------------

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

/// A job's line: its shot named beside its index. Its times are on the run's clock: `sim s`
/// when that is the sim backend's scaled clock, so no line mixes it with real seconds.
std::string job_line(const json& j, bool sim) {
  std::ostringstream out;
  const char* unit = sim ? " sim s" : " s";
  out << job_label(j) << "  seed " << j["seed"].get<uint64_t>() << "  "
      << j["state"].get<std::string>();
  if (!j["pool"].is_null())
    out << "  pool " << j["pool"].get<std::string>();
  if (j.contains("workflow") && j["workflow"].is_string())
    out << "  workflow " << j["workflow"].get<std::string>()
        << (j.contains("model") && j["model"].is_string() ? " (model " + j["model"].get<std::string>() + ")" : "");
  if (j.contains("progress") && j["progress"].is_object())
    out << "  step " << j["progress"].value("step", 0) << "/" << j["progress"].value("steps", 0);
  auto& t = j["times"];
  if (!t["decode_end_s"].is_null())
    out << "  done at " << fmt("%.1f", t["decode_end_s"].get<double>()) << unit
        << " (sampling " << fmt("%.1f", t["sampling_s"].get<double>()) << unit << ", decode "
        << fmt("%.1f", t["decode_s"].get<double>()) << unit << ")";
  if (!j["output"].is_null())
    out << "  -> " << j["output"].get<std::string>();
  if (!j["error"].is_null())
    out << "  error: " << j["error"].get<std::string>();
  return out.str();
}

bool simulated(const json& st) {
  return st.contains("clock") && st["clock"].value("simulated", false);
}

bool final_state(const std::string& s) {
  return s == "succeeded" || s == "failed" || s == "cancelled";
}

} // namespace

actors::planner::gantt_chart run_gantt(const json& st) {
  actors::planner::gantt_chart c;
  // Lanes: the pools, then the decoders, in the order the config lists them for the run's
  // mode (the status's `lanes`); a status without them (an older coordinator): by name.
  std::map<std::string, std::string> host_of;  // lane -> host
  std::vector<std::string> pools, decoders;
  if (st.contains("lanes") && st["lanes"].is_object()) {
    for (auto [key, out] : {std::pair{"pools", &pools}, std::pair{"decoders", &decoders}})
      for (auto& l : st["lanes"].value(key, json::array())) {
        out->push_back(l.at("name").get<std::string>());
        if (l.contains("host") && l["host"].is_string())
          host_of[out->back()] = l["host"].get<std::string>();
      }
  }
  auto add = [](std::vector<std::string>& lanes, const json& name) {
    if (!name.is_string())
      return;
    auto n = name.get<std::string>();
    if (std::find(lanes.begin(), lanes.end(), n) == lanes.end())
      lanes.push_back(n);
  };
  const std::size_t listed_pools = pools.size(), listed_decoders = decoders.size();
  for (auto& j : st.at("jobs")) {
    auto index = j.at("index").get<uint32_t>();
    if (auto words = shot_words(j); !words.empty())
      c.job_names[index] = words;
    for (auto& t : j.value("takes_from", json::array()))
      if (t.is_object() && t.value("from_index", int64_t{-1}) >= 0)
        c.dependencies.push_back({static_cast<uint32_t>(t["from_index"].get<int64_t>()), index});
    for (const char* stage :
         {"conditioning", "sampling", "waiting", "handoff", "pending", "decode"}) {
      if (!j.at("stages").contains(stage))
        continue;  // an older coordinator's status: no waiting or pending
      auto& sp = j.at("stages").at(stage);
      if (sp.is_null())
        continue;
      const std::string st_name = stage;
      bool on_pool = st_name == "conditioning" || st_name == "sampling" || st_name == "waiting";
      auto& lane = j.at(on_pool ? "pool" : "decoder");
      add(on_pool ? pools : decoders, lane);
      c.spans.push_back({lane.get<std::string>(), stage, index, sp.at("start_s").get<double>(),
                         sp.at("end_s").get<double>()});
    }
    if (j.contains("running") && j["running"].is_object()) {
      auto& r = j["running"];
      auto stage = r.at("stage").get<std::string>();
      add(stage == "decoding" ? decoders : pools, r.at("lane"));
      double from = r.at("start_s").get<double>();
      c.running.push_back({r.at("lane").get<std::string>(), stage, index, from, from});
    }
    if (j.contains("failed_attempts"))
      for (auto& f : j["failed_attempts"]) {
        auto stage = f.at("stage").get<std::string>();
        add(stage == "sampling" ? pools : decoders, f.at("lane"));
        c.failures.push_back({f.at("lane").get<std::string>(), index, stage,
                              f.at("start_s").get<double>(), f.at("end_s").get<double>(),
                              f.value("reason", "")});
      }
  }
  // Lanes the status did not list, by name after the listed ones: the same every time.
  std::sort(pools.begin() + static_cast<std::ptrdiff_t>(listed_pools), pools.end());
  std::sort(decoders.begin() + static_cast<std::ptrdiff_t>(listed_decoders), decoders.end());
  for (auto* lanes : {&pools, &decoders})
    for (auto& name : *lanes)
      c.lanes.push_back(name);
  if (st.contains("outages"))
    for (auto& o : st["outages"]) {
      actors::planner::gantt_chart::outage out;
      out.host = o.at("host").get<std::string>();
      out.from = o.at("from_s").get<double>();
      out.to = o.at("to_s").is_null() ? -1 : o.at("to_s").get<double>();
      for (auto& lane : c.lanes)
        if (auto h = host_of.find(lane); h != host_of.end() && h->second == out.host)
          out.lanes.push_back(lane);
      c.outages.push_back(std::move(out));
    }
  if (st.value("state", "") == "running" && st.contains("now_s"))
    c.now = st["now_s"].get<double>();
  char makespan[32];
  std::snprintf(makespan, sizeof(makespan), "%.1f",
                st.at("summary").at("makespan_s").get<double>());
  // The sizes as they are: "12 x 416x736, 5 s" for one size, else the sizes counted.
  std::vector<std::pair<std::string, std::size_t>> sizes;
  for (auto& j : st.at("jobs")) {
    const auto size = std::to_string(j.at("width").get<uint32_t>()) + "x" +
                      std::to_string(j.at("height").get<uint32_t>()) + ", " +
                      std::to_string(j.at("seconds").get<uint32_t>()) + " s";
    auto it = std::find_if(sizes.begin(), sizes.end(), [&](auto& p) { return p.first == size; });
    if (it == sizes.end())
      sizes.push_back({size, 1});
    else
      ++it->second;
  }
  std::string what;
  if (sizes.size() == 1) {
    what = std::to_string(st.at("jobs").size()) + " x " + sizes[0].first;
  } else {
    what = std::to_string(st.at("jobs").size()) + " jobs of " + std::to_string(sizes.size()) +
           " sizes (";
    for (std::size_t i = 0; i < sizes.size() && i < 3; ++i)
      what += (i ? "; " : "") + std::to_string(sizes[i].second) + " x " + sizes[i].first;
    what += sizes.size() > 3 ? "; ...)" : ")";
  }
  c.title = "run " + st.at("run_id").get<std::string>() + " (" + st.at("mode").get<std::string>()
            + ", " + st.at("state").get<std::string>() + "): " + what + ", makespan " + makespan
            + " s";
  return c;
}

std::string format_status(const json& st) {
  std::ostringstream out;
  out << "run " << st["run_id"].get<std::string>() << "  mode " << st["mode"].get<std::string>()
      << "  " << st["state"].get<std::string>() << "\n";
  for (auto& o : st.value("outages", json::array()))
    if (o.value("to_s", json()).is_null())
      out << "  host " << o.value("host", "") << " is DOWN (since "
          << fmt("%.1f", o.value("from_s", 0.0)) << (simulated(st) ? " sim s" : " s")
          << "): its pools and decoders take no work until it is back\n";
  for (auto& j : st["jobs"])
    out << "  " << job_line(j, simulated(st)) << "\n";
  auto& s = st["summary"];
  out << "  " << s["succeeded"].get<int>() << " succeeded, " << s["failed"].get<int>()
      << " failed; first " << fmt("%.3f", s["first_finish_s"].get<double>()) << " s, makespan "
      << fmt("%.3f", s["makespan_s"].get<double>()) << " s, "
      << fmt("%.2f", s["clips_per_hour"].get<double>()) << " clips/hour";
  if (st["clock"]["simulated"].get<bool>())
    out << " (simulated seconds)";
  if (auto wh = s.value("wh_per_clip", json()); wh.is_number())
    out << "; " << fmt("%.2f", wh.get<double>()) << " Wh/clip ("
        << fmt("%.1f", s.value("clips_per_kwh", 0.0)) << " clips/kWh)";
  // A stage done twice, or a product removed because its lease had ended.
  const int twice = s.value("done_twice", 0), fenced = s.value("fenced", 0),
            retracted = s.value("products_retracted", 0);
  if (twice != 0 || fenced != 0 || retracted != 0)
    out << "; " << twice << " stages done twice, " << fenced
        << " products removed unpublished (lease ended), " << retracted
        << " videos retracted after publication (another won)";
  out << "\n";
  return out.str();
}

namespace {

/// When each job of a batch would finish by the plan (run-clock seconds, ascending), for
/// the ETA of `wait`; empty when it cannot be planned (or is too large to plan quickly).
std::vector<double> planned_finishes(const config::cluster& c, const json& st) {
  const auto& jobs = st["jobs"];
  if (jobs.empty() || jobs.size() > wait_plan_max_jobs)
    return {};
  try {
    auto est = actors::coordinator::estimates_for(c);
    auto s = actors::coordinator::initial_state(c, 1.0);
    std::map<std::string, std::string> policies;
    for (auto& m : c.modes)
      policies[m.name] = m.policy;
    actors::coordinator::configure(s, c, est, policies);
    actors::planner::request req;
    req.mode = st["mode"].get<std::string>();
    req.width = jobs[0]["width"].get<uint32_t>();
    req.height = jobs[0]["height"].get<uint32_t>();
    req.seconds = jobs[0]["seconds"].get<uint32_t>();
    req.count = static_cast<uint32_t>(jobs.size());
    req.seed = jobs[0]["seed"].get<uint64_t>();
    // A shot list (jobs of several sizes): each job planned as a shot of its own size.
    bool mixed = false;
    for (auto& j : jobs)
      mixed = mixed || j["width"] != jobs[0]["width"] || j["height"] != jobs[0]["height"]
              || j["seconds"] != jobs[0]["seconds"];
    if (mixed)
      for (auto& j : jobs) {
        msg::shot sh;
        sh.prompt = "job " + std::to_string(j["index"].get<uint32_t>());
        sh.width = j["width"].get<uint32_t>();
        sh.height = j["height"].get<uint32_t>();
        sh.seconds = j["seconds"].get<uint32_t>();
        sh.seed = j["seed"].get<uint64_t>();
        req.shots.push_back(std::move(sh));
      }
    auto p = actors::planner::plan(s, *est, req);
    if (!p.refused.empty() || !p.finished)
      return {};
    std::vector<double> out;
    for (auto& j : p.jobs)
      if (j.decode)
        out.push_back(j.decode->end);
    std::sort(out.begin(), out.end());
    return out;
  } catch (const std::exception&) {
    return {};  // no ETA: the wait itself goes on
  }
}

} // namespace

std::vector<double> planned_finish_times(const config::cluster& c, const json& st) {
  return planned_finishes(c, st);
}

std::string duration_text(double s) {
  char buf[48];
  if (s < 0)
    s = 0;
  if (s < 90)
    std::snprintf(buf, sizeof(buf), "%.0f s", s);
  else if (s < 5400)
    std::snprintf(buf, sizeof(buf), "%.0f min", s / 60);
  else
    std::snprintf(buf, sizeof(buf), "%.1f h", s / 3600);
  return buf;
}

std::string progress_line(const json& st, const std::vector<double>& planned) {
  std::map<std::string, std::size_t> n;
  std::size_t total = st["jobs"].size();
  if (st.contains("states") && st.contains("page")) {  // every job counted, whatever the page
    for (auto& [state, count] : st["states"].items())
      n[state] = count.get<std::size_t>();
    total = st["page"]["jobs_total"].get<std::size_t>();
  } else {
    for (auto& j : st["jobs"])
      ++n[j["state"].get<std::string>()];
  }
  const std::size_t done = n["succeeded"] + n["failed"] + n["cancelled"];
  std::ostringstream out;
  out << "run " << st["run_id"].get<std::string>() << ": " << done << "/" << total << " done ("
      << n["succeeded"] << " succeeded, " << n["failed"] << " failed";
  if (n["cancelled"] != 0)
    out << ", " << n["cancelled"] << " cancelled";
  out << "); " << n["sampling"]
      << " sampling, " << n["sampled"] << " sampled, " << n["decoding"] << " decoding, "
      << n["queued"] << " queued";
  if (!planned.empty() && planned.size() == total && done < total) {
    // Where the plan would be once `done` jobs are finished, and what it has left from there,
    // at the pace the real GPUs have kept so far (run clock now against the plan's time for
    // the jobs done): a line running twice as slow as planned shows twice the time left.
    double at = done == 0 ? 0 : planned[done - 1];
    double left = planned.back() - at;
    const double now_s = st.value("now_s", 0.0);
    double pace = 1;
    if (done > 0 && at > 0 && now_s > 0)
      pace = std::clamp(now_s / at, 0.2, 5.0);
    left *= pace;
    const auto& clock = st["clock"];
    if (clock.value("simulated", false))
      left *= clock.value("time_scale", 1.0);
    out << "; ETA " << duration_text(left) << " by the plan";
    if (std::abs(pace - 1) >= 0.05) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), " at the observed pace (x%.2f)", pace);
      out << buf;
    }
  }
  return out.str();
}

int wait_for_run(coordinator_client& cl, const std::string& run_id, const wait_options& o) {
  using clock = std::chrono::steady_clock;
  auto start = clock::now();
  auto last_answer = clock::now();
  bool answered = false;
  std::set<int> reported;
  std::map<int, uint32_t> steps_shown;  // a sampling job's last step shown
  const double unreachable_after_s = 30;
  std::FILE* out = o.json ? stderr : stdout;
  // On a terminal the progress is one line rewritten in place; elsewhere (a log, a pipe)
  // a plain line each time it changes.
  const bool tty = ::isatty(::fileno(out)) == 1;
  std::vector<double> planned;
  bool planned_tried = false;
  std::string last_progress;
  bool progress_shown = false;  // on a tty: the cursor is at the end of a progress line
  // A run above wait_line_max_jobs is followed from one small page (its `states`), with no
  // line per job; its jobs are read whole once, at the end, where --json asks for them.
  std::size_t jobs_total = 0;
  bool big_note_shown = false;
  auto clear_progress = [&] {
    if (tty && progress_shown) {
      std::fprintf(out, "\r\033[K");
      progress_shown = false;
    }
  };
  for (;;) {
    std::optional<json> st;
    try {
      // Until the run's size is known, one job's page tells it; a small run is then read
      // whole (every poll), a big one stays on the one-job page.
      const bool one_page = jobs_total == 0 || jobs_total > wait_line_max_jobs;
      if (one_page) {
        st = cl.status_page(run_id, 0, 1, 2000);
        if (st && st->contains("page"))
          jobs_total = (*st)["page"]["jobs_total"].get<std::size_t>();
      }
      if (!one_page || (st && (!st->contains("page") || jobs_total <= wait_line_max_jobs)))
        st = cl.status(run_id, 2000);
    } catch (const coordinator_error& e) {
      clear_progress();
      std::fprintf(stderr, "error: %s\n", e.what());
      return e.exit_code();
    } catch (const std::exception& e) {
      clear_progress();
      std::fprintf(stderr, "error: the coordinator's status of run %s is unreadable: %s\n",
                   run_id.c_str(), e.what());
      return exit_code::refused;
    }
    if (st) {
      answered = true;
      last_answer = clock::now();
      jobs_total = st->contains("page") ? (*st)["page"]["jobs_total"].get<std::size_t>()
                                        : (*st)["jobs"].size();
      const bool big = jobs_total > wait_line_max_jobs;
      if (!planned_tried && o.cluster != nullptr && !o.quiet && !big) {
        planned_tried = true;
        planned = planned_finishes(*o.cluster, *st);
      }
      if (big && !big_note_shown && !o.quiet) {
        big_note_shown = true;
        clear_progress();
        std::fprintf(out, "run %s has %zu jobs: progress only, no line per job (vidline status "
                          "%s lists them)\n",
                     run_id.c_str(), jobs_total, run_id.c_str());
      }
      static const json no_jobs = json::array();
      const json& listed = big ? no_jobs : (*st)["jobs"];
      for (auto& j : listed) {
        int idx = j["index"].get<int>();
        if (final_state(j["state"].get<std::string>()) && reported.insert(idx).second
            && !o.quiet) {
          clear_progress();
          std::fprintf(out, "%s\n", job_line(j, simulated(*st)).c_str());
        }
        // A sampling job's progress, as its backend reports it (a worker's steps): a line
        // each step in a log; on a terminal the progress line counts it in place.
        if (!tty && j.contains("progress") && j["progress"].is_object() && !o.quiet) {
          uint32_t step = j["progress"].value("step", 0u);
          auto it = steps_shown.find(idx);
          if (it == steps_shown.end() || it->second != step) {
            steps_shown[idx] = step;
            clear_progress();
            std::fprintf(out, "%s\n", job_line(j, simulated(*st)).c_str());
          }
        }
      }
      if (o.on_status)
        o.on_status(*st);
      const bool running = (*st)["state"].get<std::string>() == "running";
      if (!o.quiet) {
        auto line = progress_line(*st, planned);
        if (tty && running) {
          if (line != last_progress || !progress_shown)
            std::fprintf(out, "\r%s\033[K", line.c_str());
          progress_shown = true;
        } else if (line != last_progress) {
          clear_progress();
          std::fprintf(out, "%s\n", line.c_str());
        }
        last_progress = line;
        std::fflush(out);
      }
      if (!running) {
        if (tty && progress_shown) {
          std::fprintf(out, "\n");
          progress_shown = false;
        }
        if (o.json && big) {
          // The jobs, read whole once: the run is over, they no longer change.
          try {
            if (auto whole = cl.status((*st)["run_id"].get<std::string>(), 10000))
              st = std::move(whole);
          } catch (const std::exception& e) {
            std::fprintf(stderr, "error: the jobs of run %s could not be read: %s\n",
                         run_id.c_str(), e.what());
            return exit_code::refused;
          }
        }
        if (o.json) {
          std::printf("%s\n", st->dump(2).c_str());
        } else {
          auto& s = (*st)["summary"];
          std::printf("\n%-26s %6s %10s %10s %11s\n", "", "ok", "first", "makespan", "clips/hour");
          std::printf("%-26s %3d/%-2zu %10.3f %10.3f %11.2f\n", "vidline",
                      s["succeeded"].get<int>(), jobs_total,
                      s["first_finish_s"].get<double>(), s["makespan_s"].get<double>(),
                      s["clips_per_hour"].get<double>());
          if (o.reference_row != nullptr)
            std::printf("%s\n", o.reference_row);
          if ((*st)["clock"]["simulated"].get<bool>())
            std::printf("(vidline times are simulated seconds of the sim backend's scaled clock)\n");
        }
        std::fflush(stdout);
        const auto state = (*st)["state"].get<std::string>();
        return state == "succeeded"   ? exit_code::ok
               : state == "cancelled" ? exit_code::cancelled
                                      : exit_code::job_failed;
      }
    } else if (std::chrono::duration<double>(clock::now() - last_answer).count()
               > unreachable_after_s) {
      clear_progress();
      std::fprintf(stderr, "error: no answer from the coordinator at %s for %.0f s\n",
                   cl.endpoint().c_str(), unreachable_after_s);
      return exit_code::unreachable;
    }
    if (o.timeout_s > 0
        && std::chrono::duration<double>(clock::now() - start).count() > o.timeout_s) {
      clear_progress();
      if (!answered) {
        std::fprintf(stderr, "error: no answer from the coordinator at %s within --timeout %g s\n",
                     cl.endpoint().c_str(), o.timeout_s);
        return exit_code::unreachable;
      }
      std::fprintf(stderr, "timeout: run %s still running after %g s\n", run_id.c_str(),
                   o.timeout_s);
      return exit_code::timeout;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // polling pace, not sync
  }
}

} // namespace vidline::nodes::verbs
