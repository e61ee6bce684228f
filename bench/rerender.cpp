// Re-rendering only what changed, live: an episode of 60 shots (bench/episode.hpp's sizes;
// 4 chains of 4 among them, each link taking the last frame of the one before as its first
// frame, at its head's size) run on two real node processes (the reference cluster, sim
// backend, clock scaled, loopback) through `vidline run --jobs`; then 3 shots are edited
// (their prompt changed: a chain's head, a chain's third link, an independent shot) and the
// list is run again on the same line. Job keys (docs/shots.md, "Job keys") should render
// exactly the edited shots and the shots downstream of them (the set computed from the
// list's graph) and reuse every other output, the same bytes. Prints
//   RESULT rerender_exact <0|1> bool target ==1
//   RESULT rerender_jobs_fraction <rendered / jobs> ratio target info
//   RESULT rerender_time_fraction <second makespan / first> ratio target info
// Usage: bench_rerender [TIME_SCALE (0.04)]
// At 0.04 the first run takes ~3.5 minutes of wall time, the second well under one.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "actors/coordinator/admission.hpp"
#include "actors/coordinator/dispatch_setup.hpp"
#include "bench/episode.hpp"
#include "bench/graph_bound.hpp"
#include "bench/live_line.hpp"
#include "nodes/verbs/plan_cmd.hpp"
#include "nodes/verbs/shot_file.hpp"
#include "tests/support/cluster.hpp"

using namespace vidline;
using namespace testing_support;
using json = nlohmann::json;

namespace {

constexpr uint32_t shot_count = 60, chain_len = 4;
constexpr const char* model = "wan-14b";
/// Where each chain starts in the episode (shot indices, 0-based).
constexpr uint32_t chain_heads[] = {4, 18, 32, 46};
/// The shots edited for the second run: chain 1's head, chain 3's third link, an
/// independent shot.
constexpr uint32_t edited[] = {4, 34, 25};

/// One model for both workflows: only the graph and the keys are measured here.
json workflows() {
  return json::array({
    {{"name", "t2v"}, {"model", model}, {"default", true}},
    {{"name", "i2v"}, {"model", model}, {"inputs", {{"first_frame", {{"required", true}}}}}},
  });
}

/// The episode as shot lines, edited shots' prompts changed when `edit`.
std::vector<json> episode_lines(bool edit) {
  auto shots = bench::episode(shot_count);
  std::vector<json> out;
  for (uint32_t i = 0; i < shots.size(); ++i) {
    auto& s = shots[i];
    json line = {{"prompt", s.prompt}, {"width", s.width}, {"height", s.height},
                 {"seconds", s.seconds}, {"seed", s.seed}, {"name", s.name}};
    for (uint32_t h : chain_heads)
      if (i > h && i < h + chain_len) {
        line["width"] = shots[h].width;
        line["height"] = shots[h].height;
        line["seconds"] = shots[h].seconds;
        line["workflow"] = "i2v";
        line["inputs"]["first_frame"] = {{"from", shots[i - 1].name}, {"frame", "last"}};
      }
    if (edit && std::find(std::begin(edited), std::end(edited), i) != std::end(edited))
      line["prompt"] = s.prompt + ", at dusk instead";
    out.push_back(std::move(line));
  }
  return out;
}

std::string write_list(const std::string& path, const std::vector<json>& lines) {
  std::ofstream f(path);
  for (auto& l : lines)
    f << l.dump() << '\n';
  return path;
}

/// The edited shots and every shot downstream of them (taking a frame from one of them, or
/// from a shot that does, ...), by name.
std::set<std::string> must_render(const std::vector<json>& lines) {
  std::set<std::string> out;
  for (uint32_t i : edited)
    out.insert(lines.at(i)["name"].get<std::string>());
  for (bool grew = true; grew;) {
    grew = false;
    for (auto& l : lines)
      if (l.contains("inputs"))
        for (auto& [name, in] : l["inputs"].items())
          if (in.is_object() && out.count(in["from"].get<std::string>())
              && out.insert(l["name"].get<std::string>()).second)
            grew = true;
  }
  return out;
}

struct job_seen {
  std::string state, key, output_sha256;
};

/// Submits the list, waits for the run to end; its jobs by name and its makespan, or an
/// empty map when it did not succeed.
std::map<std::string, job_seen> run_list(bench::live_line& line, const std::string& dir,
                                         const std::string& config, const std::string& list,
                                         double wall_limit, double& makespan) {
  const auto st = line.run(dir, config, list, wall_limit);
  if (st.is_null())
    return {};
  std::map<std::string, job_seen> out;
  auto str = [](const json& v) { return v.is_string() ? v.get<std::string>() : std::string(); };
  for (auto& j : st["jobs"])
    out[j["name"].get<std::string>()] = {j["state"].get<std::string>(), str(j["key"]),
                                          str(j["output_sha256"])};
  makespan = st["summary"]["makespan_s"].get<double>();
  return out;
}

int run(double time_scale) {
  temp_dir dir("vl-rerender");
  const std::string config = write_reference_config(dir.path(), time_scale);
  {
    auto cfg = json::parse(read_file(config));
    cfg["backends"]["sim"]["workflows"] = workflows();
    std::ofstream(config) << cfg.dump(2);
  }
  const auto first_lines = episode_lines(false), second_lines = episode_lines(true);
  const std::string first_list = write_list(dir.path() + "/episode.jsonl", first_lines);
  const std::string second_list = write_list(dir.path() + "/episode-edited.jsonl", second_lines);
  const auto expected = must_render(second_lines);
  auto setup = nodes::verbs::load_plan_setup(config, "");
  // The second run's critical path: the shots it renders, the reused ones at 0.
  const auto cat = actors::coordinator::run_catalog(setup.cluster, actors::coordinator::auto_mode);
  nodes::verbs::shot_list edited_list;
  if (auto why = nodes::verbs::read_shot_file(second_list, setup.cluster.knobs, nodes::verbs::run_max_jobs,
                                       edited_list, &cat);
      !why.empty()) {
    std::fprintf(stderr, "the shot file: %s\n", why.c_str());
    return 1;
  }
  std::vector<bool> renders;
  for (auto& sh : edited_list.shots)
    renders.push_back(expected.count(sh.name) > 0);
  const auto second_path = bench::critical_path_of(setup.state, *setup.est, actors::coordinator::auto_mode,
                                                   edited_list.shots, model, renders);

  auto line = std::make_unique<bench::live_line>(dir.path(), config, setup.cluster);
  if (!line->up) {
    dir.keep();
    return 1;
  }
  // The list takes ~5,500 run-clock seconds on this cluster; a generous wall limit.
  const double wall_limit = 6000 * time_scale * 3 + 120;
  double first_makespan = 0, second_makespan = 0;
  const auto first = run_list(*line, dir.path(), config, first_list, wall_limit, first_makespan);
  const auto second =
    first.empty() ? first : run_list(*line, dir.path(), config, second_list, wall_limit,
                                     second_makespan);
  line.reset();  // the nodes stopped
  if (first.size() != shot_count || second.size() != shot_count) {
    std::fprintf(stderr, "a run did not finish every shot (logs in %s)\n", dir.path().c_str());
    dir.keep();
    return 1;
  }

  std::size_t rendered = 0, reused = 0, wrong = 0;
  std::string rendered_names;
  for (auto& [name, j] : second) {
    const auto& before = first.at(name);
    const bool expect_render = expected.count(name) > 0;
    bool ok;
    if (j.state == "succeeded") {
      ++rendered;
      rendered_names += (rendered_names.empty() ? "" : " ") + name;
      // A new key and a new video.
      ok = expect_render && j.key != before.key && j.output_sha256 != before.output_sha256;
    } else if (j.state == "reused") {
      ++reused;
      // The same key, the same bytes as the first run's.
      ok = !expect_render && j.key == before.key && j.output_sha256 == before.output_sha256;
    } else {
      ok = false;
    }
    if (!ok) {
      ++wrong;
      std::fprintf(stderr, "%s: %s, expected %s\n", name.c_str(), j.state.c_str(),
                   expect_render ? "rendered" : "reused with the first run's key and video");
    }
  }
  std::size_t first_rendered = 0;
  for (auto& [name, j] : first)
    first_rendered += j.state == "succeeded";
  const bool exact = wrong == 0 && first_rendered == shot_count;
  std::string expected_names;
  for (auto& n : expected)
    expected_names += (expected_names.empty() ? "" : " ") + n;
  std::printf("%u shots (4 chains of %u among them), reference cluster, mode auto, sim clock "
              "x%g, two node processes\n",
              shot_count, chain_len, time_scale);
  std::printf("first run:  %zu rendered, makespan %.1f s\n", first_rendered, first_makespan);
  std::printf("edited: %s, %s, %s -> expected to render: %s\n",
              first_lines[edited[0]]["name"].get<std::string>().c_str(),
              first_lines[edited[1]]["name"].get<std::string>().c_str(),
              first_lines[edited[2]]["name"].get<std::string>().c_str(), expected_names.c_str());
  std::printf("second run: %zu rendered (%s), %zu reused, makespan %.1f s\n", rendered,
              rendered_names.c_str(), reused, second_makespan);
  std::printf("second run's critical path (what it renders, each at its least time; ends at "
              "%s): %.1f s, its makespan over it %.3f\n",
              second_path.last.c_str(), second_path.seconds, second_makespan / second_path.seconds);
  std::printf("RESULT rerender_exact %d bool target ==1\n", exact ? 1 : 0);
  std::printf("RESULT rerender_jobs_fraction %.4f ratio target info\n",
              double(rendered) / shot_count);
  std::printf("RESULT rerender_time_fraction %.4f ratio target info\n",
              second_makespan / first_makespan);
  return exact ? 0 : 3;
}

} // namespace

int main(int argc, char** argv) {
  try {
    const double time_scale = argc > 1 ? std::stod(argv[1]) : 0.04;
    if (argc > 2 || !(time_scale > 0 && time_scale <= 1)) {
      std::fprintf(stderr, "usage: bench_rerender [TIME_SCALE (0,1]]\n");
      return 2;
    }
    return run(time_scale);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_rerender: %s\n", e.what());
    return 1;
  }
}
