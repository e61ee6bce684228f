// Shots that follow shots, planned: 12 chains of 5 linked segments (each link takes the last
// frame of the one before as its first frame; one size per chain: 416x736x5, 736x1280x5 or
// 416x736x10) and 20 independent shots (bench/episode.hpp's sizes), in story order (a
// chain's links together, chains among the independent shots), on the reference cluster
// (embedded reference profile, mode auto). The list is written as a shot file and read by
// `vidline plan --jobs`'s code, then
//   - planned as a run dispatches it (critical path first: a shot that starts a longer
//     chain goes first among equals),
//   - planned in file order (the ranks left out: actors::planner::request::critical_path_first),
//   - unless --plan-only, run live on two real node processes (loopback, sim clock scaled)
//     through `vidline run --jobs`: every link gets its parent's frame and renders,
// against a lower bound no schedule beats, the larger of
//   - the critical path: the longest chain's links one after the other, each at its least
//     time: conditioning + warm sampling + handoff + decode on the fastest pool and decoder
//     pair that holds its size (a link cannot start before its parent's video exists),
//   - the work: the sampling work against the pools' summed rate (GPU-seconds: pools that
//     share GPUs cannot sample at once; a job holds its pool through its conditioning and
//     warm sampling; each job on the pool where it costs least; split fractionally between
//     the GPU groups, which only lowers the bound; cold loads left out),
//   - the decode work over the decoders (each video on its fastest decoder).
// Prints
//   RESULT chains_makespan_over_lower_bound <x> ratio target <= 1.10
//   RESULT chains_makespan_over_file_order <x> ratio target info
//   RESULT chains_live_over_plan <x> ratio target 0.97..1.03 (live only)
// Usage: bench_chains [TIME_SCALE (0.04)] [--plan-only]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "actors/coordinator/admission.hpp"
#include "actors/coordinator/dispatch_setup.hpp"
#include "bench/episode.hpp"
#include "bench/graph_bound.hpp"
#include "bench/live_line.hpp"
#include "common/sha256.hpp"
#include "config/shot_graph.hpp"
#include "nodes/verbs/plan_cmd.hpp"
#include "nodes/verbs/shot_file.hpp"
#include "tests/support/cluster.hpp"

using namespace vidline;
using namespace testing_support;
using json = nlohmann::json;

namespace {

constexpr uint32_t chain_count = 12, links = 5, independent = 20;
constexpr const char* model = "wan-14b";

/// Text-to-video (the default) and image-to-video, one model: the graph, not model
/// switches, is what this bench measures.
json workflows() {
  return json::array({
    {{"name", "t2v"}, {"model", model}, {"default", true}},
    {{"name", "i2v"}, {"model", model}, {"inputs", {{"first_frame", {{"required", true}}}}}},
  });
}

struct size3 { uint32_t width, height, seconds; };

size3 chain_size(uint32_t c) {
  static const size3 sizes[] = {{416, 736, 5}, {736, 1280, 5}, {416, 736, 10}};
  return sizes[c % 3];
}

/// The list as DIR/chains.jsonl in story order: 32 scenes in groups of 8, scenes 1, 4 and 6
/// of each group a chain (its 5 links one after the other), the others independent shots.
std::string write_list(const std::string& dir) {
  const auto ep = bench::episode(independent);
  std::ofstream list(dir + "/chains.jsonl");
  uint32_t c = 0, i = 0;
  for (uint32_t scene = 0; scene < chain_count + independent; ++scene) {
    const uint32_t at = scene % 8;
    if ((at == 1 || at == 4 || at == 6) && c < chain_count) {
      const size3 z = chain_size(c);
      for (uint32_t k = 0; k < links; ++k) {
        const std::string name = "ch" + std::to_string(c + 1) + "-" + std::to_string(k + 1);
        json s = {{"prompt", "chain " + std::to_string(c + 1) + ", segment " + std::to_string(k + 1)
                               + ": the camera follows her down the street"},
                  {"width", z.width}, {"height", z.height}, {"seconds", z.seconds},
                  {"seed", 5000 + 10 * c + k}, {"name", name}};
        if (k > 0) {
          s["workflow"] = "i2v";
          s["inputs"]["first_frame"] = {
            {"from", "ch" + std::to_string(c + 1) + "-" + std::to_string(k)}, {"frame", "last"}};
        }
        list << s.dump() << '\n';
      }
      ++c;
    } else {
      const auto& s = ep.at(i++);
      list << json{{"prompt", s.prompt}, {"width", s.width}, {"height", s.height},
                   {"seconds", s.seconds}, {"seed", s.seed}, {"name", s.name}}.dump()
           << '\n';
    }
  }
  return dir + "/chains.jsonl";
}

struct bound {
  double critical_path = 0, work = 0, decode = 0;
  std::string longest_chain;
  double value() const { return std::max({critical_path, work, decode}); }
};

/// The lower bound of the header on the pools and decoders of `mode`.
bound lower_bound(const actors::coordinator::state& s, const actors::coordinator::profile_estimates& est,
                  const std::string& mode, const std::vector<msg::shot>& shots) {
  const auto& pools = s.modes.at(mode);
  const auto& decoders = s.mode_decoders.at(mode);
  const double inf = std::numeric_limits<double>::infinity();
  auto spec_of = [](const msg::shot& sh) {
    msg::job_spec j;
    j.width = sh.width, j.height = sh.height, j.seconds = sh.seconds;
    j.model = model;
    return j;
  };
  bound b;
  const auto cp = bench::critical_path_of(s, est, mode, shots, model);
  b.critical_path = cp.seconds;
  b.longest_chain = cp.last;
  // Work: GPUs joined by pools that share them are one group; a job costs a group its
  // GPUs x (conditioning + warm sampling) on the group's cheapest pool for it (a pool is
  // held through its job's conditioning, and a pool that holds GPUs keeps every pool
  // sharing them idle); a group gives its GPU count of GPU-seconds a second.
  std::map<std::string, std::string> group;  // host/gpu -> its group's first host/gpu
  std::function<std::string(const std::string&)> root = [&](const std::string& g) {
    auto it = group.find(g);
    if (it == group.end() || it->second == g)
      return g;
    return it->second = root(it->second);
  };
  std::map<std::string, std::vector<std::string>> gpus_of;
  for (auto& p : pools) {
    gpus_of[p] = s.pools.at(p).cards;
    for (auto& g : gpus_of[p])
      group.emplace(g, g);
    for (auto& g : gpus_of[p])
      group[root(g)] = root(gpus_of[p].front());
  }
  std::map<std::string, double> group_gpus;
  for (auto& [g, r] : group)
    group_gpus[root(g)] += 1;
  std::vector<std::string> groups;
  for (auto& [g, n] : group_gpus)
    groups.push_back(g);
  std::vector<std::vector<double>> cost(shots.size(), std::vector<double>(groups.size(), inf));
  for (std::size_t i = 0; i < shots.size(); ++i)
    for (auto& p : pools) {
      const auto& pv = s.pools.at(p);
      auto warm = est.sampling(pv.kind, spec_of(shots[i]), false);
      if (!warm)
        continue;
      const auto g = std::find(groups.begin(), groups.end(), root(gpus_of[p].front()))
                     - groups.begin();
      cost[i][g] = std::min(cost[i][g], (est.conditioning(pv.host) + *warm)
                                          * double(gpus_of[p].size()));
    }
  if (groups.size() == 2) {
    // The least T at which a fractional split fits: jobs in the order of their relative cost
    // on group 0, the cheapest there first; the split point balances the two loads.
    const double g0 = group_gpus[groups[0]], g1 = group_gpus[groups[1]];
    std::vector<std::size_t> order(shots.size());
    for (std::size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    auto rel = [&](std::size_t i) { return (cost[i][0] / g0) / (cost[i][1] / g1); };
    std::sort(order.begin(), order.end(), [&](auto a, auto b) { return rel(a) < rel(b); });
    double best = inf, load0 = 0, load1 = 0;
    for (auto i : order)
      load1 += cost[i][1] / g1;
    // Each prefix on group 0; within the boundary job the balance may fall between.
    for (std::size_t k = 0; k <= order.size(); ++k) {
      if (k > 0) {
        const auto i = order[k - 1];
        const double a = cost[i][0] / g0, c = cost[i][1] / g1;
        // Moving a share f of job i: load0 + f a = load1 - f c.
        if (std::isfinite(a) && std::isfinite(c)) {
          const double f = std::clamp((load1 - load0) / (a + c), 0.0, 1.0);
          best = std::min(best, std::max(load0 + f * a, load1 - f * c));
        }
        load0 += a, load1 -= c;
      }
      best = std::min(best, std::max(load0, load1));
    }
    b.work = best;
  } else {
    // Any number of groups: all GPU-seconds together, each job at its least (weaker).
    double total = 0, gpus = 0;
    for (auto& row : cost)
      total += *std::min_element(row.begin(), row.end());
    for (auto& [g, n] : group_gpus)
      gpus += n;
    b.work = total / gpus;
  }
  double decode = 0;
  for (auto& sh : shots) {
    double best = inf;
    for (auto& d : decoders)
      best = std::min(best, est.decode(s.decoders.at(d), spec_of(sh)));
    decode += best;
  }
  b.decode = decode / double(decoders.size());
  return b;
}

/// The finish of the last link of each chain in a plan, and when its head started.
void print_chains(const actors::planner::plan_result& p, const char* what) {
  double last_head = 0, last_end = 0;
  for (auto& j : p.jobs) {
    const bool head = j.name.rfind("ch", 0) == 0 && j.name.size() > 2
                      && j.name.substr(j.name.find('-') + 1) == "1";
    if (head && j.sampling)
      last_head = std::max(last_head, j.conditioning ? j.conditioning->start : j.sampling->start);
    if (j.name.rfind("ch", 0) == 0 && j.decode)
      last_end = std::max(last_end, j.decode->end);
  }
  std::printf("%-26s %12.1f %16.1f %16.1f\n", what, p.summary.makespan_s, last_head, last_end);
}

int run(double time_scale, bool plan_only) {
  temp_dir dir("vl-chains");
  const std::string config = write_reference_config(dir.path(), time_scale);
  {
    auto cfg = json::parse(read_file(config));
    cfg["backends"]["sim"]["workflows"] = workflows();
    std::ofstream(config) << cfg.dump(2);
  }
  const std::string list_path = write_list(dir.path());
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
  const auto ranked = actors::planner::plan(setup.state, *setup.est, pr);
  pr.critical_path_first = false;
  const auto file_order = actors::planner::plan(setup.state, *setup.est, pr);
  for (auto* p : {&ranked, &file_order})
    if (!p->refused.empty() || !p->finished || !p->violations.empty()
        || p->summary.succeeded != list.shots.size()) {
      std::fprintf(stderr, "the plan did not finish the list: %s\n", p->refused.c_str());
      return 1;
    }
  const bound lb = lower_bound(setup.state, *setup.est, actors::coordinator::auto_mode, list.shots);

  std::printf("%u chains of %u links (416x736x5, 736x1280x5, 416x736x10 in turn) and %u "
              "independent shots, %zu jobs; reference cluster, embedded profile, mode auto\n",
              chain_count, links, independent, list.shots.size());
  std::printf("lower bound %.1f s: critical path %.1f s (%s's chain), pool work %.1f s, "
              "decode work %.1f s\n",
              lb.value(), lb.critical_path, lb.longest_chain.c_str(), lb.work, lb.decode);
  std::printf("%-26s %12s %16s %16s\n", "", "makespan s", "last head start", "last chain end");
  print_chains(ranked, "plan, critical path first");
  print_chains(file_order, "plan, file order");
  const double over_bound = ranked.summary.makespan_s / lb.value();
  const double over_file = ranked.summary.makespan_s / file_order.summary.makespan_s;
  int status = over_bound <= 1.10 ? 0 : 3;

  if (!plan_only) {
    bench::live_line line(dir.path(), config, setup.cluster);
    const auto st = line.up ? line.run(dir.path(), config, list_path,
                                       ranked.summary.makespan_s * time_scale * 3 + 120)
                            : json();
    if (st.is_null()) {
      dir.keep();
      return 1;
    }
    // Every link rendered from its parent's last frame (the sim contract's frame of the
    // parent's video, by its digest), after that video was made.
    std::map<std::string, json> by_name;
    for (auto& j : st["jobs"])
      by_name[j["name"].get<std::string>()] = j;
    std::size_t linked = 0, rendered = 0;
    for (auto& [name, j] : by_name) {
      rendered += j["state"] == "succeeded" && j["output_sha256"].is_string();
      if (j["takes_from"].empty())
        continue;
      const auto& parent = by_name.at(j["takes_from"][0]["from"].get<std::string>());
      const auto frame = config::graph::sim_frame(
        parent["output_sha256"].get<std::string>(),
        config::graph::frames_of(parent["seconds"].get<uint32_t>()) - 1);
      const bool same = j["inputs"]["first_frame"] == to_hex(sha256_of(frame));
      const bool after = j["times"]["sample_start_s"].get<double>()
                         >= parent["times"]["decode_end_s"].get<double>();
      linked += same && after;
      if (!same || !after)
        std::fprintf(stderr, "%s: %s\n", name.c_str(),
                     !same ? "its first frame is not its parent's last" : "started early");
    }
    const double live = st["summary"]["makespan_s"].get<double>();
    const double ratio = live / ranked.summary.makespan_s;
    std::printf("%-26s %12.1f   (%zu videos, %zu of them from their parent's last frame; "
                "clock x%g)\n",
                "live, critical path first", live, rendered, linked, time_scale);
    std::printf("RESULT chains_live_over_plan %.4f ratio target 0.97..1.03\n", ratio);
    if (std::abs(ratio - 1) > 0.03 || rendered != list.shots.size()
        || linked != chain_count * (links - 1))
      status = 3;
  }
  std::printf("RESULT chains_makespan_over_lower_bound %.4f ratio target <= 1.10\n", over_bound);
  std::printf("RESULT chains_makespan_over_file_order %.4f ratio target info\n", over_file);
  return status;
}

} // namespace

int main(int argc, char** argv) {
  try {
    bool plan_only = false;
    std::vector<std::string> args;
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--plan-only") == 0)
        plan_only = true;
      else
        args.push_back(argv[i]);
    }
    const double time_scale = !args.empty() ? std::stod(args[0]) : 0.04;
    if (!(time_scale > 0 && time_scale <= 1)) {
      std::fprintf(stderr, "usage: bench_chains [TIME_SCALE (0,1]] [--plan-only]\n");
      return 2;
    }
    return run(time_scale, plan_only);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_chains: %s\n", e.what());
    return 1;
  }
}
