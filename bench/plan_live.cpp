// The production shot list planned, then run live, side by side: the list of
// bench/episode.hpp written as a shot file with a real reference image per shot, planned by
// `vidline plan`'s code (load_plan_setup + read_shot_file + actors::planner::plan), and run by two
// real node processes on loopback (the reference cluster, sim backend, clock scaled) through
// `vidline run --jobs`. Prints each job's planned and live pool and ends with
//   RESULT plan_live_makespan_ratio <live / plan> ratio target 0.98..1.02
//   RESULT plan_live_same_pool <share of jobs on the planned pool> share target (none)
// Usage: bench_plan_live [SHOTS (64)] [TIME_SCALE (0.04)]
// The clock runs at TIME_SCALE of real time: 64 shots plan to ~5,300 run-clock seconds, so
// ~212 s of wall time at 0.04. A slower clock (smaller TIME_SCALE) makes the real delays
// (messages, latents crossing the loopback, a loaded machine) count for more.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

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

/// Writes the episode as DIR/episode.jsonl, each shot's reference a distinct small image
/// file under DIR/refs/; returns the shot file's path.
std::string write_episode(const std::string& dir, uint32_t shots) {
  std::filesystem::create_directories(dir + "/refs");
  std::ofstream list(dir + "/episode.jsonl");
  for (const auto& s : bench::episode(shots)) {
    const std::string ref = "refs/" + s.name + ".png";
    std::ofstream(dir + "/" + ref, std::ios::binary)
      << std::string("\x89PNG\r\n\x1a\n", 8) << "reference of " << s.name << '\n';
    list << json{{"prompt", s.prompt}, {"width", s.width}, {"height", s.height},
                 {"seconds", s.seconds}, {"seed", s.seed}, {"name", s.name},
                 {"reference", ref}}.dump()
         << '\n';
  }
  return dir + "/episode.jsonl";
}

int run_live(uint32_t shots, double time_scale) {
  temp_dir dir("vl-plan-live");
  const std::string config = write_reference_config(dir.path(), time_scale);
  const std::string list_path = write_episode(dir.path(), shots);

  auto setup = nodes::verbs::load_plan_setup(config, "");
  nodes::verbs::shot_list list;
  if (auto why = nodes::verbs::read_shot_file(list_path, setup.cluster.knobs, nodes::verbs::run_max_jobs, list);
      !why.empty()) {
    std::fprintf(stderr, "the shot file: %s\n", why.c_str());
    return 1;
  }
  actors::planner::request pr;
  pr.mode = actors::coordinator::auto_mode;
  pr.shots = list.shots;
  auto plan = actors::planner::plan(setup.state, *setup.est, pr);
  if (!plan.refused.empty()) {
    std::fprintf(stderr, "the plan refused the list: %s\n", plan.refused.c_str());
    return 1;
  }

  bench::live_line line(dir.path(), config, setup.cluster);
  const auto st = line.up ? line.run(dir.path(), config, list_path,
                                     plan.summary.makespan_s * time_scale * 3 + 120)
                          : json();
  if (st.is_null()) {
    dir.keep();
    return 1;
  }

  std::printf("%5s %-14s %-12s %-12s %10s %10s\n", "job", "size", "plan pool", "live pool",
              "plan end", "live end");
  std::size_t same = 0;
  for (auto& j : st["jobs"]) {
    const auto i = j["index"].get<std::size_t>();
    const auto& pj = plan.jobs.at(i);
    const std::string live_pool = j["pool"].get<std::string>();
    same += live_pool == pj.pool;
    char size[32];
    std::snprintf(size, sizeof(size), "%ux%ux%u", pj.width, pj.height, pj.seconds);
    std::printf("%5zu %-14s %-12s %-12s %10.1f %10.1f\n", i, size, pj.pool.c_str(),
                live_pool.c_str(), pj.decode ? pj.decode->end : -1.0,
                j["decode_end"].is_number() ? j["decode_end"].get<double>() : -1.0);
  }
  const double live = st["summary"]["makespan_s"].get<double>();
  const double planned = plan.summary.makespan_s;
  std::printf("\n%u shots (auto, reference cluster, sim clock x%g): plan %.1f s, live %.1f s "
              "(%+.2f%%); %zu of %zu jobs on the planned pool\n",
              shots, time_scale, planned, live, (live / planned - 1) * 100, same,
              st["jobs"].size());
  std::printf("RESULT plan_live_makespan_ratio %.4f ratio target 0.98..1.02\n", live / planned);
  std::printf("RESULT plan_live_same_pool %.3f share target none\n",
              static_cast<double>(same) / static_cast<double>(st["jobs"].size()));
  return std::abs(live / planned - 1) <= 0.02 ? 0 : 3;
}

} // namespace

int main(int argc, char** argv) {
  try {
    const uint32_t shots = argc > 1 ? static_cast<uint32_t>(std::stoul(argv[1])) : 64;
    const double time_scale = argc > 2 ? std::stod(argv[2]) : 0.04;
    if (shots == 0 || shots > 10000 || !(time_scale > 0 && time_scale <= 1)) {
      std::fprintf(stderr, "usage: bench_plan_live [SHOTS 1..10000] [TIME_SCALE (0,1]]\n");
      return 2;
    }
    return run_live(shots, time_scale);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_plan_live: %s\n", e.what());
    return 1;
  }
}
