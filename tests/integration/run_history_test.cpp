// A run's history put to use: `vidline status RUN_ID --gantt` draws the finished run, and
// `vidline profile build` learns a profile from the journal that plans the stage times the
// line measured. Two real node processes, sim backend paced by a profile that is not the
// embedded reference (4 x T10 sampling 25% slower, the 3080 Ti decoding 50% slower), so a
// plan on the reference cannot pass for one on the learned profile.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>

#include "actors/coordinator/dispatch_setup.hpp"
#include "config/profile/profile.hpp"
#include "nodes/verbs/plan_cmd.hpp"
#include "tests/support/cluster.hpp"

using namespace testing_support;
using vidline::nodes::verbs::coordinator_client;

namespace {

/// The reference profile with every 416x736x5 time of `kind` scaled by `factor`.
void scale_416(json& prof, const std::string& section, const std::string& kind, double factor) {
  auto scale = [&](json& t) {
    for (const char* k : {"s", "min_s", "max_s"})
      if (t.contains(k))
        t[k] = t[k].get<double>() * factor;
  };
  if (section == "pools") {
    for (auto& row : prof["pools"][kind]["sampling"])
      if (row["size"] == "416x736x5")
        for (const char* state : {"cold", "warm"})
          if (row.contains(state))
            scale(row[state]);
  } else {
    for (auto& row : prof["decoders"][kind]["decode"])
      if (row["size"] == "416x736x5")
        scale(row);
  }
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

double length(const std::optional<vidline::actors::planner::planned_job::span>& s) {
  REQUIRE(s);
  return s->end - s->start;
}

} // namespace

TEST_CASE("a finished run: its Gantt chart, and a profile learned from it plans its times") {
  temp_dir dir;
  auto config = write_reference_config(dir.path(), 0.04);
  auto prof = json::parse(std::string(vidline::config::profile::profile::reference_json()));
  scale_416(prof, "pools", "t10x4", 1.25);
  scale_416(prof, "decoders", "rtx3080ti", 1.5);
  std::ofstream(dir.path() + "/slow.json") << prof.dump(2);
  auto cfg = json::parse(read_file(config));
  cfg["backends"]["sim"]["profile"] = dir.path() + "/slow.json";
  std::ofstream(config) << cfg.dump(2);
  auto cluster = vidline::config::load(config);

  auto a = start_node(dir.path(), config, "host_a");
  auto b = start_node(dir.path(), config, "host_b");
  coordinator_client cl(cluster);
  REQUIRE(coordinator_answers(cl, 30));
  std::this_thread::sleep_for(std::chrono::seconds(2));  // pools report (plan_vs_run_test)
  vidline::msg::submit_run req;
  req.mode = "four_four_xtx_plus_one";
  req.prompt = "run history";
  req.width = 416;
  req.height = 736;
  req.seconds = 5;
  req.count = 6;
  req.seed = 77;
  req.request_id = "run-history";
  auto run_id = cl.submit(req);
  auto st = wait_status(cl, run_id, 120, [](const json& s) { return s["state"] != "running"; });
  INFO(st.dump(2));
  REQUIRE(st["state"] == "succeeded");

  // The Gantt chart of the run: a lane per pool and decoder used, a bar per stage.
  process status({VIDLINE_BINARY, "status", run_id, "--config", config, "--gantt",
                  dir.path() + "/run.svg"},
                 dir.path() + "/status.out");
  REQUIRE(status.wait(30) == 0);
  auto svg = read_file(dir.path() + "/run.svg");
  CHECK(count(svg, "text-anchor=\"end\">") == 4);
  for (auto* lane : {"four_a", "four_b", "xtx", "rtx3080ti"})
    CHECK(count(svg, std::string("text-anchor=\"end\">") + lane + "</text>") == 1);
  std::size_t stages = 0;
  for (auto& j : st["jobs"]) {
    auto i = std::to_string(j["index"].get<int>());
    for (auto* stage : {"sampling", "waiting", "handoff", "decode"})
      CHECK(count(svg, "<title>job " + i + " " + stage + " ") == 1);
    stages += 4;
    if (j["times"]["conditioning_s"].get<double>() > 0) {
      CHECK(count(svg, "<title>job " + i + " conditioning ") == 1);
      ++stages;
    }
    if (j["stages"]["pending"].is_object()) {
      CHECK(count(svg, "<title>job " + i + " pending ") == 1);
      ++stages;
    }
  }
  CHECK(count(svg, "<title>job ") == stages);
  CHECK(count(svg, "class=\"now\"") == 0);  // a finished run: no now line

  // Stage times are the stages' own stamps: a decoder decodes one latent at a
  // time, so its decode spans never overlap; `times` agrees with `stages`; the stages of
  // a job follow each other.
  std::map<std::string, std::vector<std::pair<double, double>>> decodes;
  for (auto& j : st["jobs"]) {
    INFO("job " << j["index"]);
    auto& sg = j["stages"];
    auto& tm = j["times"];
    for (auto* stage : {"sampling", "waiting", "handoff", "decode"})
      REQUIRE(sg[stage].is_object());
    CHECK(tm["decode_start_s"] == sg["decode"]["start_s"]);
    CHECK(tm["decode_end_s"] == sg["decode"]["end_s"]);
    CHECK(tm["sample_end_s"] == sg["sampling"]["end_s"]);
    CHECK(sg["waiting"]["start_s"] == sg["sampling"]["end_s"]);
    CHECK(sg["handoff"]["start_s"].get<double>() >= sg["waiting"]["end_s"].get<double>());
    CHECK(sg["decode"]["start_s"].get<double>() >= sg["handoff"]["end_s"].get<double>());
    CHECK(sg["decode"]["end_unix"].get<double>() > 1.6e9);  // wall-clock unix seconds
    decodes[j["decoder"].get<std::string>()].emplace_back(sg["decode"]["start_s"].get<double>(),
                                                          sg["decode"]["end_s"].get<double>());
  }
  for (auto& [decoder, spans] : decodes) {
    std::sort(spans.begin(), spans.end());
    for (std::size_t k = 1; k < spans.size(); ++k) {
      INFO("decoder " << decoder << ": a decode from " << spans[k].first
                      << " s while the one before ran to " << spans[k - 1].second << " s");
      CHECK(spans[k].first >= spans[k - 1].second);
    }
  }

  a->signal(SIGTERM);
  b->signal(SIGTERM);
  CHECK(a->wait(20) == 0);
  CHECK(b->wait(20) == 0);

  // The profile learned from the coordinator's journal.
  auto learned = dir.path() + "/learned.json";
  process build({VIDLINE_BINARY, "profile", "build", "--data", dir.path() + "/host_a", "--out",
                 learned},
                dir.path() + "/build.out");
  REQUIRE(build.wait(30) == 0);
  INFO(read_file(learned));
  auto l = json::parse(read_file(learned));
  for (auto& row : l["pools"]["t10x4"]["sampling"])
    if (row["size"] == "416x736x5")
      CHECK_THAT(row["warm"]["source"].get<std::string>(), Catch::Contains(run_id));

  // Planned with it, every job's sampling and decode take what the run measured: exactly
  // the median of its group (what a profile learns), and each job's own time within the
  // spread a loaded machine puts on a scaled clock. Planned with the reference, the
  // 4 x T10 jobs do not.
  vidline::actors::planner::request pr{req.mode, req.width, req.height, req.seconds, req.count, req.seed};
  auto with_learned = vidline::nodes::verbs::load_plan_setup(config, learned);
  auto plan = vidline::actors::planner::plan(with_learned.state, *with_learned.est, pr);
  vidline::actors::coordinator::profile_estimates reference(with_learned.cluster,
                                                 vidline::config::profile::profile::reference());
  auto old = vidline::actors::planner::plan(with_learned.state, reference, pr);
  REQUIRE(plan.refused.empty());
  auto close = [](double planned, double measured) {
    return std::abs(planned - measured) <= 0.03 * measured + 0.5;
  };
  auto near = [](double planned, double measured) {
    return std::abs(planned - measured) <= 0.10 * measured + 1.0;
  };
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    auto n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  };
  // A profile learns per kind: the pool's kind and cold or warm, the decoder's kind.
  std::map<std::string, std::string> kind_of;
  for (auto& p : cluster.pools)
    kind_of[p.name] = p.profile_key;
  for (auto& d : cluster.decoders)
    kind_of[d.name] = d.profile_key;
  auto sampling_group = [&](const json& j) {
    return kind_of.at(j["pool"].get<std::string>()) + (j["cold"].get<bool>() ? " cold" : " warm");
  };
  auto decode_group = [&](const json& j) { return kind_of.at(j["decoder"].get<std::string>()); };
  std::map<std::string, std::vector<double>> sampled, decoded;
  for (auto& j : st["jobs"]) {
    sampled[sampling_group(j)].push_back(j["times"]["sampling_s"].get<double>());
    decoded[decode_group(j)].push_back(j["times"]["decode_s"].get<double>());
  }
  int reference_misses = 0;
  for (auto& j : st["jobs"]) {
    auto i = j["index"].get<std::size_t>();
    INFO("job " << i << " on " << j["pool"] << ", decoded on " << j["decoder"]);
    CHECK(plan.jobs[i].pool == j["pool"]);
    CHECK(plan.jobs[i].cold == j["cold"]);
    double sampling = j["times"]["sampling_s"].get<double>();
    double decode = j["times"]["decode_s"].get<double>();
    double sampling_median = median(sampled[sampling_group(j)]);
    double decode_median = median(decoded[decode_group(j)]);
    INFO("sampled " << sampling << " s (median " << sampling_median << "), planned "
                    << length(plan.jobs[i].sampling) << " s; decoded " << decode
                    << " s (median " << decode_median << "), planned "
                    << length(plan.jobs[i].decode) << " s");
    CHECK(close(length(plan.jobs[i].sampling), sampling_median));
    CHECK(close(length(plan.jobs[i].decode), decode_median));
    CHECK(near(length(plan.jobs[i].sampling), sampling));
    CHECK(near(length(plan.jobs[i].decode), decode));
    if (!close(length(old.jobs[i].sampling), sampling_median))
      ++reference_misses;
  }
  CHECK(reference_misses == 4);  // the four jobs of the 4 x T10 pools
}
