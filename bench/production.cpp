// A production episode with models: 60 shots over 3 workflows and 2 models (text-to-video
// on one model; image-to-video and first+last-frame on the other), 70% 5 s and 30% 10 s,
// two sizes, each shot its own prompt, negative prompt, params and input images. On the
// reference cluster's profile (sim backend), where a model switch is a cold stage costing
// what the reference's cold-model job did over a warm one (229.814 - 110.395 s), it is
//   - planned model-aware (auto, placement by model: the default),
//   - planned model-blind (the same auto mode with model_wait_s 0: jobs in shot order,
//     whatever model the pool holds),
//   - planned with every shot on one model: a bound no placement beats,
//   - run live on two real node processes (loopback, sim clock scaled) model-aware,
// and prints the model switches, the makespans and
//   RESULT production_aware_over_blind <aware / blind makespan> ratio target <= 0.85
//   RESULT production_live_over_plan <live / plan makespan> ratio target 0.97..1.03
//   RESULT production_model_idle_wait_s <longest wait of a job while a pool that holds its
//          size idled, over one stage of the longest job> ratio target <= 1
// Usage: bench_production [SHOTS (60)] [TIME_SCALE (0.04)] [--plan-only] [--detail]
// (--detail: each plan pool by pool, its jobs, switches, idle time and the tail)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "actors/coordinator/admission.hpp"
#include "actors/coordinator/dispatch_setup.hpp"
#include "bench/episode.hpp"
#include "bench/live_line.hpp"
#include "nodes/verbs/plan_cmd.hpp"
#include "nodes/verbs/shot_file.hpp"
#include "tests/support/cluster.hpp"

using namespace vidline;
using namespace testing_support;
using json = nlohmann::json;

namespace {

/// The line owner's three workflows, two models: text-to-video has its own model; the
/// image-to-video and first+last-frame workflows share theirs.
json workflows() {
  json steps = {{"type", "integer"}, {"min", 1}, {"max", 100}, {"default", 30}};
  json lora = {{"type", "string"}, {"choices", {"none", "turbo", "film-grain"}}, {"default", "none"}};
  json strength = {{"type", "number"}, {"min", 0}, {"max", 2}, {"default", 1.0}};
  json params = {{"steps", steps}, {"lora", lora}, {"lora_strength", strength}};
  return json::array({
    {{"name", "t2v"}, {"model", "wan-t2v-14b"}, {"default", true}, {"params", params}},
    {{"name", "i2v"}, {"model", "wan-i2v-14b"}, {"params", params},
     {"inputs", {{"first_frame", {{"required", true}}}}}},
    {{"name", "fl2v"}, {"model", "wan-i2v-14b"}, {"params", params},
     {"inputs", {{"first_frame", {{"required", true}}}, {"last_frame", {{"required", true}}}}}},
  });
}

/// Shot i's workflow: a fixed pseudo-random mix, about a third each, in no useful order
/// (an editor's list is in story order, not model order).
std::string workflow_of(uint32_t i) {
  static const char* names[] = {"t2v", "i2v", "fl2v"};
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return names[x % 3];
}

void write_image(const std::string& path, const std::string& what) {
  std::ofstream(path, std::ios::binary) << std::string("\x89PNG\r\n\x1a\n", 8) << what << '\n';
}

/// The episode as DIR/episode.jsonl with its images under DIR/frames/.
std::string write_episode(const std::string& dir, uint32_t shots) {
  std::filesystem::create_directories(dir + "/frames");
  std::ofstream list(dir + "/episode.jsonl");
  uint32_t i = 0;
  for (const auto& s : bench::episode(shots)) {
    const std::string wf = workflow_of(i++);
    json shot = {{"prompt", s.prompt}, {"width", s.width}, {"height", s.height},
                 {"seconds", s.seconds}, {"seed", s.seed}, {"name", s.name},
                 {"workflow", wf},
                 {"negative_prompt", "blurry, extra limbs, text, watermark, shot " + s.name},
                 {"params", {{"steps", wf == "t2v" ? 30 : 8},
                             {"lora", i % 4 == 0 ? "film-grain" : "turbo"},
                             {"lora_strength", 0.5 + 0.1 * (i % 6)}}}};
    if (wf != "t2v") {
      const std::string first = "frames/" + s.name + "-first.png";
      write_image(dir + "/" + first, "first frame of " + s.name);
      shot["inputs"]["first_frame"] = first;
    }
    if (wf == "fl2v") {
      const std::string last = "frames/" + s.name + "-last.png";
      write_image(dir + "/" + last, "last frame of " + s.name);
      shot["inputs"]["last_frame"] = last;
    }
    list << shot.dump() << '\n';
  }
  return dir + "/episode.jsonl";
}

struct job_view {
  std::string pool, model;
  uint32_t width = 0, height = 0, seconds = 0;
  double sample_start = -1, sample_end = -1;
  bool cold = false;
};

/// Model switches: cold stages after a pool's first (a pool's first load is not a switch).
std::size_t switches(const std::vector<job_view>& jobs) {
  std::map<std::string, std::vector<std::pair<double, const job_view*>>> by_pool;
  for (auto& j : jobs)
    by_pool[j.pool].push_back({j.sample_start, &j});
  std::size_t n = 0;
  for (auto& [pool, js] : by_pool) {
    std::sort(js.begin(), js.end(), [](auto& a, auto& b) { return a.first < b.first; });
    for (std::size_t k = 1; k < js.size(); ++k)
      n += js[k].second->model != js[k - 1].second->model ? 1 : 0;
  }
  return n;
}

/// The longest time a job waited (from submission, 0) while some pool that can hold its size
/// (`fits`) was idle: the longest continuous stretch within [0, its sampling start] during
/// which such a pool sampled nothing.
double longest_idle_wait(const std::vector<job_view>& jobs,
                         const std::function<bool(const std::string&, const job_view&)>& fits) {
  std::map<std::string, std::vector<std::pair<double, double>>> busy;
  for (auto& j : jobs)
    busy[j.pool].push_back({j.sample_start, j.sample_end});
  for (auto& [p, v] : busy)
    std::sort(v.begin(), v.end());
  double worst = 0;
  for (auto& j : jobs)
    for (auto& [p, v] : busy) {
      if (!fits(p, j))
        continue;
      double t = 0;  // walk p's idle gaps before j started
      for (auto& [s, e] : v) {
        if (s > t)
          worst = std::max(worst, std::min(s, j.sample_start) - t);
        t = std::max(t, e);
        if (t >= j.sample_start)
          break;
      }
      if (t < j.sample_start)
        worst = std::max(worst, j.sample_start - t);
    }
  return worst;
}

/// Where a plan's time goes, pool by pool: each pool's jobs in order (start, end, size,
/// model, cold), its model switches, its busy and idle sampling seconds up to the plan's
/// last sampling end, and the tail from there (or from the pool's last job) to the
/// makespan: what `--detail` prints.
void print_detail(const char* what, const actors::planner::plan_result& p) {
  std::map<std::string, std::vector<const actors::planner::planned_job*>> by_pool;
  double last_sample = 0;
  for (auto& j : p.jobs)
    if (j.sampling) {
      by_pool[j.pool].push_back(&j);
      last_sample = std::max(last_sample, j.sampling->end);
    }
  std::printf("\n%s: makespan %.1f s, last sampling end %.1f s (tail %.1f s)\n", what,
              p.summary.makespan_s, last_sample, p.summary.makespan_s - last_sample);
  for (auto& [pool, js] : by_pool) {
    std::sort(js.begin(), js.end(),
              [](auto* a, auto* b) { return a->sampling->start < b->sampling->start; });
    double busy = 0, idle = 0, t = 0;
    std::size_t sw = 0, cold = 0;
    std::string line;
    for (std::size_t k = 0; k < js.size(); ++k) {
      const auto& j = *js[k];
      busy += j.sampling->end - j.sampling->start;
      if (j.sampling->start > t + 1e-6)
        idle += j.sampling->start - t;
      t = std::max(t, j.sampling->end);
      sw += k > 0 && j.model != js[k - 1]->model ? 1 : 0;
      cold += j.cold ? 1 : 0;
      char buf[160];
      std::snprintf(buf, sizeof buf, "    %7.1f-%7.1f %4ux%-4ux%-2u %-12s%s job %u\n",
                    j.sampling->start, j.sampling->end, j.width, j.height, j.seconds,
                    j.model.c_str(), j.cold ? " cold" : "     ", j.index);
      line += buf;
    }
    std::printf("  %-8s %2zu jobs, %zu switches, %zu cold, busy %.1f s, idle before %.1f s, "
                "ends %.1f s (%.1f s before the last sampling end)\n%s",
                pool.c_str(), js.size(), sw, cold, busy, idle, t, last_sample - t, line.c_str());
  }
  double decode_end = 0;
  std::map<std::string, double> dec_busy;
  for (auto& j : p.jobs)
    if (j.decode) {
      decode_end = std::max(decode_end, j.decode->end);
      dec_busy[j.decoder] += j.decode->end - j.decode->start;
    }
  for (auto& [d, b] : dec_busy)
    std::printf("  decoder %-10s busy %.1f s\n", d.c_str(), b);
}

std::vector<job_view> from_plan(const actors::planner::plan_result& p) {
  std::vector<job_view> out;
  for (auto& pj : p.jobs) {
    job_view v;
    v.pool = pj.pool;
    v.model = pj.model;
    v.width = pj.width, v.height = pj.height, v.seconds = pj.seconds;
    if (pj.sampling)
      v.sample_start = pj.sampling->start, v.sample_end = pj.sampling->end;
    v.cold = pj.cold;
    out.push_back(v);
  }
  return out;
}

int run(uint32_t shots, double time_scale, bool plan_only, bool detail) {
  temp_dir dir("vl-production");
  std::string config = write_reference_config(dir.path(), time_scale);
  {
    // The reference profile, where loading either model costs what the reference's cold-model
    // job cost over a warm one: 229.814 - 110.395 s (the kinds' own cold_extra, 34-89 s, is
    // a first load within one process; a switch between 14B models is the larger figure).
    auto prof = json::parse(std::string(config::profile::profile::reference_json()));
    for (auto& [kind, pool] : prof["pools"].items())
      for (const char* model : {"wan-t2v-14b", "wan-i2v-14b"})
        pool["models"][model] = {
          {"load", {{"s", 229.814 - 110.395},
                    {"source", "the reference's cold-model job, 229.814 s, against 110.395 s "
                               "warm (416x736x5)"}}},
          {"source", "bench_production: a model switch as the reference measured one"}};
    std::ofstream(dir.path() + "/models-profile.json") << prof.dump(2);
    auto cfg = json::parse(read_file(config));
    cfg["backends"]["sim"]["workflows"] = workflows();
    cfg["backends"]["sim"]["profile"] = dir.path() + "/models-profile.json";
    std::ofstream(config) << cfg.dump(2);
  }
  const std::string list_path = write_episode(dir.path(), shots);

  auto setup = nodes::verbs::load_plan_setup(config, "");
  const auto cat = actors::coordinator::run_catalog(setup.cluster, actors::coordinator::auto_mode);
  nodes::verbs::shot_list list;
  if (auto why = nodes::verbs::read_shot_file(list_path, setup.cluster.knobs, nodes::verbs::run_max_jobs, list,
                                       &cat);
      !why.empty()) {
    std::fprintf(stderr, "the shot file: %s\n", why.c_str());
    return 1;
  }
  actors::planner::request pr;
  pr.mode = actors::coordinator::auto_mode;
  pr.shots = list.shots;
  pr.catalog = &cat;
  auto aware = actors::planner::plan(setup.state, *setup.est, pr);
  // The bound no placement beats: the same list with every workflow on one model.
  auto one_cat = cat;
  for (auto& w : one_cat.workflows)
    w.model = "wan-t2v-14b";
  auto one_pr = pr;
  one_pr.catalog = &one_cat;
  auto one = actors::planner::plan(setup.state, *setup.est, one_pr);
  auto blind_state = setup.state;
  blind_state.p.model_wait_s = 0;
  auto blind = actors::planner::plan(blind_state, *setup.est, pr);
  if (!aware.refused.empty() || !blind.refused.empty()) {
    std::fprintf(stderr, "the plan refused the list: %s%s\n", aware.refused.c_str(),
                 blind.refused.c_str());
    return 1;
  }
  const auto& prof = setup.est->profile();
  std::map<std::string, std::string> kind_of;
  for (auto& [name, p] : setup.state.pools)
    kind_of[name] = p.kind;
  auto fits = [&](const std::string& pool, const job_view& j) {
    return prof.fits(kind_of.at(pool), {j.width, j.height, j.seconds});
  };
  // One stage of the longest job: its cold sampling on the slowest kind that holds it.
  double longest_stage = 0;
  for (auto& s : list.shots)
    for (auto& [name, kind] : kind_of)
      if (prof.fits(kind, {s.width, s.height, s.seconds}))
        longest_stage = std::max(
          longest_stage,
          prof.sampling(kind, {s.width, s.height, s.seconds}, config::profile::model_state::cold).s);

  std::map<std::string, int> per_workflow;
  for (auto& s : list.shots)
    ++per_workflow[s.workflow];
  const auto va = from_plan(aware), vb = from_plan(blind);
  std::printf("%u shots: t2v %d, i2v %d, fl2v %d (models wan-t2v-14b, wan-i2v-14b); reference "
              "cluster, mode auto\n",
              shots, per_workflow["t2v"], per_workflow["i2v"], per_workflow["fl2v"]);
  std::printf("%-22s %12s %10s %10s\n", "", "makespan s", "switches", "cold");
  auto colds = [](const std::vector<job_view>& v) {
    return std::count_if(v.begin(), v.end(), [](const job_view& j) { return j.cold; });
  };
  std::printf("%-22s %12.1f %10zu %10ld\n", "plan, model-aware", aware.summary.makespan_s,
              switches(va), colds(va));
  std::printf("%-22s %12.1f %10zu %10ld\n", "plan, model-blind", blind.summary.makespan_s,
              switches(vb), colds(vb));
  const auto vo = from_plan(one);
  std::printf("%-22s %12.1f %10zu %10ld\n", "plan, one model (bound)", one.summary.makespan_s,
              switches(vo), colds(vo));
  std::printf("model-aware over the one-model bound: %.4f\n",
              aware.summary.makespan_s / one.summary.makespan_s);
  if (detail) {
    print_detail("plan, model-aware", aware);
    print_detail("plan, model-blind", blind);
    print_detail("plan, one model (bound)", one);
  }
  const double ratio = aware.summary.makespan_s / blind.summary.makespan_s;
  const double idle_plan = longest_idle_wait(va, fits);
  int status = ratio <= 0.85 ? 0 : 3;

  double live_ratio = 0, idle_live = 0;
  if (!plan_only) {
    bench::live_line line(dir.path(), config, setup.cluster);
    const auto st = line.up ? line.run(dir.path(), config, list_path,
                                       aware.summary.makespan_s * time_scale * 3 + 120)
                            : json();
    if (st.is_null()) {
      dir.keep();
      return 1;
    }
    std::vector<job_view> vl;
    for (auto& j : st["jobs"]) {
      job_view v;
      v.pool = j["pool"].get<std::string>();
      v.model = j.value("model", std::string());
      v.width = j["width"].get<uint32_t>();
      v.height = j["height"].get<uint32_t>();
      v.seconds = j["seconds"].get<uint32_t>();
      const json& sp = j["stages"]["sampling"];  // from submission, as the plan's
      if (!sp.is_object())
        continue;
      v.sample_start = sp["start_s"].get<double>();
      v.sample_end = sp["end_s"].get<double>();
      v.cold = j.value("cold", false);
      vl.push_back(v);
    }
    const double live = st["summary"]["makespan_s"].get<double>();
    live_ratio = live / aware.summary.makespan_s;
    idle_live = longest_idle_wait(vl, fits);
    std::printf("%-22s %12.1f %10zu %10ld\n", "live, model-aware", live, switches(vl),
                colds(vl));
    std::printf("live / plan %.4f (%+.2f%%), clock x%g\n", live_ratio, (live_ratio - 1) * 100,
                time_scale);
    std::printf("RESULT production_live_over_plan %.4f ratio target 0.97..1.03\n", live_ratio);
    if (std::abs(live_ratio - 1) > 0.03)
      status = 3;
  }
  std::printf("RESULT production_aware_over_blind %.4f ratio target <= 0.85\n", ratio);
  const double idle = std::max(idle_plan, idle_live);
  std::printf("longest wait of a job while a pool that holds its size idled: plan %.1f s, "
              "live %.1f s; one stage of the longest job %.1f s\n",
              idle_plan, idle_live, longest_stage);
  std::printf("RESULT production_model_idle_wait_s %.4f ratio target <= 1\n",
              idle / longest_stage);
  if (idle > longest_stage)
    status = 3;
  return status;
}

} // namespace

int main(int argc, char** argv) {
  try {
    bool plan_only = false, detail = false;
    std::vector<std::string> args;
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--plan-only") == 0)
        plan_only = true;
      else if (std::strcmp(argv[i], "--detail") == 0)
        detail = true;
      else
        args.push_back(argv[i]);
    }
    const uint32_t shots = !args.empty() ? static_cast<uint32_t>(std::stoul(args[0])) : 60;
    const double time_scale = args.size() > 1 ? std::stod(args[1]) : 0.04;
    if (shots == 0 || shots > 10000 || !(time_scale > 0 && time_scale <= 1)) {
      std::fprintf(stderr,
                   "usage: bench_production [SHOTS 1..10000] [TIME_SCALE (0,1]] [--plan-only] "
                   "[--detail]\n");
      return 2;
    }
    return run(shots, time_scale, plan_only, detail);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_production: %s\n", e.what());
    return 1;
  }
}
