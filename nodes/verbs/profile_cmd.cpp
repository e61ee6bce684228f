#include "nodes/verbs/profile_cmd.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include "config/profile/kinds.hpp"
#include "config/profile/profile.hpp"
#include "common/files.hpp"
#include "nodes/verbs/exit_codes.hpp"
#include "nodes/state/journal_sqlite.hpp"

namespace vidline::nodes::verbs {

using nlohmann::json;

namespace {

/// Measured seconds of one kind x size x cold/warm, and the runs they came from.
struct samples {
  std::vector<double> s;
  std::set<std::string> runs;
  void add(double v, const std::string& run) {
    s.push_back(v);
    runs.insert(run);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// "run-a, run-b" (the first five, then "and N more").
std::string runs_text(const std::set<std::string>& ids) {
  std::string out;
  int named = 0;
  for (auto& r : ids)
    if (named++ < 5)
      out += (out.empty() ? "" : ", ") + r;
  if (ids.size() > 5)
    out += " and " + std::to_string(ids.size() - 5) + " more";
  return out;
}

/// A TIMING: the median as the time, min and max as the spread, the runs as the source.
json timing_of(const samples& x, const std::string& what) {
  const std::string runs = runs_text(x.runs);
  auto [lo, hi] = std::minmax_element(x.s.begin(), x.s.end());
  return {{"s", median(x.s)}, {"min_s", *lo}, {"max_s", *hi},
          {"source", "measured: median of " + std::to_string(x.s.size()) + " " + what
                       + (x.s.size() == 1 ? "" : "s") + " in run" + (x.runs.size() == 1 ? " " : "s ")
                       + runs + "; min/max observed"}};
}

std::string size_of(const msg::job_spec& j) {
  return std::to_string(j.width) + "x" + std::to_string(j.height) + "x" + std::to_string(j.seconds);
}

uint64_t load_of(const std::string& size) {
  auto s = config::profile::job_size::parse(size);
  return s ? s->load() : 0;
}

/// The row of `rows` (an array of objects with "size") for `size`, appended when missing.
json& row_of(json& rows, const std::string& size) {
  for (auto& r : rows)
    if (r.value("size", "") == size)
      return r;
  rows.push_back({{"size", size}});
  return rows.back();
}

/// The energy telemetry measured over stages of one kind: joules over seconds.
struct energy {
  double joules = 0;
  double seconds = 0;
  std::size_t stages = 0;
  std::set<std::string> runs;
  void add(double j, double s, const std::string& run) {
    if (j < 0 || !(s > 0))
      return;  // no telemetry for that stage, or no length to divide by
    joules += j;
    seconds += s;
    ++stages;
    runs.insert(run);
  }
};

/// A POWER: the stages' energy over their total length (a long stage weighs more).
json power_of(const energy& e, const std::string& what, const std::string& note = "") {
  const std::string runs = runs_text(e.runs);
  char total[64];
  std::snprintf(total, sizeof(total), "%.0f J over %.1f s", e.joules, e.seconds);
  return {{"watts", e.joules / e.seconds},
          {"source", "measured: GPU telemetry of " + std::to_string(e.stages) + " " + what
                       + (e.stages == 1 ? "" : "s") + note + " (" + total + ") in run"
                       + (e.runs.size() == 1 ? " " : "s ") + runs}};
}

/// Everything history measured, grouped.
struct history {
  std::map<std::string, energy> pool_energy;     // pool kind: conditioning + sampling
  std::map<std::string, energy> decoder_energy;  // decoder kind: decode
  std::map<std::string, std::map<std::string, std::map<bool, samples>>> sampling;  // kind, size, cold
  /// The same per model: kind, model key, size, cold.
  std::map<std::string,
           std::map<std::string, std::map<std::string, std::map<bool, samples>>>> by_model;
  std::map<std::string, std::map<std::string, samples>> decode;                    // kind, size
  std::map<std::string, samples> conditioning;                                     // encoder kind
  std::map<bool, samples> handoff;                                                 // same host
  std::map<std::string, std::pair<uint64_t, std::string>> out_of_memory;  // kind -> smallest load, run
  std::size_t stages = 0;
};

history collect(const std::deque<actors::coordinator::run>& runs) {
  history h;
  for (auto& r : runs)
    for (auto& j : r.jobs) {
      for (auto& kind : j.capacity_failed) {
        auto load = actors::coordinator::job_load(j.spec);
        auto it = h.out_of_memory.find(kind);
        if (it == h.out_of_memory.end() || load < it->second.first)
          h.out_of_memory[kind] = {load, r.id + " (" + size_of(j.spec) + ")"};
      }
      // Records written before kinds were recorded say nothing about what measured them.
      bool sampled = j.sample_end >= 0 && !j.latent_sha256.empty() && !j.pool_kind.empty();
      if (sampled && j.sampling_s > 0) {
        h.sampling[j.pool_kind][size_of(j.spec)][j.cold].add(j.sampling_s, r.id);
        h.by_model[j.pool_kind][j.spec.model][size_of(j.spec)][j.cold].add(j.sampling_s, r.id);
        ++h.stages;
      }
      if (sampled) {
        // The span the energy was integrated over (scheduler: record_sampling).
        double span = j.ran.pool_start >= 0 && j.ran.sampler_end >= 0
                        ? j.ran.sampler_end - j.ran.pool_start
                        : j.conditioning_s + j.sampling_s;
        h.pool_energy[j.pool_kind].add(j.sampling_energy_j, span, r.id);
      }
      if (sampled && j.conditioning_s > 0 && !j.encoder_kind.empty()) {
        h.conditioning[j.encoder_kind].add(j.conditioning_s, r.id);
        ++h.stages;
      }
      if (j.state == actors::coordinator::job_state::succeeded && !j.decoder_kind.empty()) {
        h.decode[j.decoder_kind][size_of(j.spec)].add(j.decode_s, r.id);
        double span = j.ran.decode_start >= 0 && j.ran.decode_end >= 0
                        ? j.ran.decode_end - j.ran.decode_start
                        : j.decode_s;
        h.decoder_energy[j.decoder_kind].add(j.decode_energy_j, span, r.id);
        h.handoff[j.handoff_same_host].add(j.handoff_s, r.id);
        h.stages += 2;
      }
    }
  return h;
}

/// cold - warm averaged over the sizes of `kind` measured both ways (nullopt: none).
std::optional<json> cold_extra_of(const std::map<std::string, std::map<bool, samples>>& sizes) {
  std::vector<double> extra;
  std::string where;
  for (auto& [size, by_state] : sizes)
    if (by_state.count(true) && by_state.count(false)) {
      extra.push_back(median(by_state.at(true).s) - median(by_state.at(false).s));
      where += (where.empty() ? "" : ", ") + size;
    }
  if (extra.empty())
    return std::nullopt;
  double sum = 0;
  for (double e : extra)
    sum += e;
  auto [lo, hi] = std::minmax_element(extra.begin(), extra.end());
  double mean = std::max(0.0, sum / static_cast<double>(extra.size()));
  return json{{"s", mean}, {"min_s", std::min(mean, *lo)}, {"max_s", std::max(mean, *hi)},
              {"source", "measured: mean of cold - warm (medians) at " + where}};
}

void merge_pool(json& pools, const std::string& kind,
                const std::map<std::string, std::map<bool, samples>>& sizes) {
  if (!pools.contains(kind))
    pools[kind] = {{"description", "learned from history"},
                   {"capacity", {{"max_load", nullptr},
                                 {"fail_after_s", 0},
                                 {"source", "no out-of-memory result in history; fail_after_s "
                                            "not measured"}}},
                   {"sampling", json::array()}};
  json& p = pools[kind];
  if (auto extra = cold_extra_of(sizes))
    p["cold_extra"] = *extra;
  for (auto& [size, by_state] : sizes) {
    json& row = row_of(p["sampling"], size);
    for (auto& [cold, x] : by_state)
      row[cold ? "cold" : "warm"] = timing_of(x, cold ? "cold sampling" : "warm sampling");
  }
  // A size measured one way only needs cold_extra for the other; without it, leave it out.
  auto& rows = p["sampling"];
  for (std::size_t i = rows.size(); i-- > 0;)
    if (!(rows[i].contains("cold") && rows[i].contains("warm")) && !p.contains("cold_extra")) {
      std::fprintf(stderr, "warning: pool kind %s, size %s: only %s measured and no cold_extra "
                           "known; left out\n", kind.c_str(),
                   rows[i].value("size", "?").c_str(), rows[i].contains("cold") ? "cold" : "warm");
      rows.erase(i);
    }
}

/// Stages measured of one model on a kind.
std::size_t stages_of(const std::map<std::string, std::map<bool, samples>>& sizes) {
  std::size_t n = 0;
  for (auto& [size, by_state] : sizes)
    for (auto& [cold, x] : by_state)
      n += x.s.size();
  return n;
}

/// A kind measured with several models: its rows come from the model measured most (the
/// kind's own times), each other model becomes a `models` entry: its warm times over the
/// rows' at the sizes both were measured warm (the median of the ratios), and its load
/// (cold - warm) where it was measured both ways. Returns the sizes to merge as rows.
std::map<std::string, std::map<bool, samples>> split_models(
  json& pools, const std::string& kind,
  const std::map<std::string, std::map<std::string, std::map<bool, samples>>>& models) {
  auto base = std::max_element(models.begin(), models.end(), [](auto& a, auto& b) {
    return stages_of(a.second) < stages_of(b.second);
  });
  for (auto& [model, sizes] : models) {
    if (model == base->first)
      continue;
    std::vector<double> ratios;
    std::string where;
    std::set<std::string> runs;
    for (auto& [size, by_state] : sizes) {
      auto b = base->second.find(size);
      if (!by_state.count(false) || b == base->second.end() || !b->second.count(false))
        continue;
      ratios.push_back(median(by_state.at(false).s) / median(b->second.at(false).s));
      where += (where.empty() ? "" : ", ") + size;
      runs.insert(by_state.at(false).runs.begin(), by_state.at(false).runs.end());
    }
    if (ratios.empty()) {
      std::fprintf(stderr, "warning: pool kind %s, model %s: no warm stage at a size %s was "
                           "measured at too; left out\n",
                   kind.c_str(), model.c_str(), base->first.c_str());
      continue;
    }
    json entry = {{"warm_factor", median(ratios)},
                  {"source", "measured: warm sampling against model " + base->first + " at "
                               + where + " (median of the ratios of the medians) in "
                               + runs_text(runs)}};
    if (auto load = cold_extra_of(sizes))
      entry["load"] = *load;
    pools[kind]["models"][model] = entry;
  }
  return base->second;
}

/// Lowers `kind`'s max_load below the smallest load that ran out of memory, to the largest
/// load known to fit (a sampling row), and drops rows above it.
void merge_capacity(json& pools, const std::string& kind, uint64_t failed,
                    const std::string& where) {
  if (!pools.contains(kind))
    return;
  json& p = pools[kind];
  json& cap = p["capacity"];
  if (!cap["max_load"].is_null() && cap["max_load"].get<uint64_t>() < failed)
    return;  // already below it
  uint64_t fits = 0;
  for (auto& r : p["sampling"])
    if (auto l = load_of(r.value("size", "")); l < failed)
      fits = std::max(fits, l);
  uint64_t limit = fits > 0 ? fits : failed - 1;
  cap["max_load"] = limit;
  cap["source"] = "out of memory in run " + where + ", load " + std::to_string(failed)
                  + "; max_load is the largest load known to fit below it";
  auto& rows = p["sampling"];
  for (std::size_t i = rows.size(); i-- > 0;)
    if (load_of(rows[i].value("size", "")) > limit)
      rows.erase(i);
}

/// The base profile's kinds under their current names (config/profile/kinds.hpp), so the
/// kinds learned (the journal's, read under current names too) land on them. A kind under
/// both names is left as it is, for the reader to refuse.
void current_kind_names(json& base) {
  for (const char* table : {"pools", "encoders", "decoders"}) {
    if (!base.contains(table) || !base[table].is_object())
      continue;
    json& t = base[table];
    std::vector<std::pair<std::string, std::string>> moves;
    for (auto& [key, value] : t.items())
      if (auto now = config::profile::renamed(key); now && !t.contains(*now))
        moves.emplace_back(key, *now);
    for (auto& [old, now] : moves) {
      t[now] = std::move(t[old]);
      t.erase(old);
    }
  }
  if (base.contains("decoders") && base["decoders"].is_object())
    for (auto& [key, d] : base["decoders"].items())
      if (d.is_object() && d.contains("scale_of") && d["scale_of"].is_object()
          && d["scale_of"].value("decoder", json()).is_string())
        d["scale_of"]["decoder"] =
          config::profile::current_kind(d["scale_of"]["decoder"].get<std::string>());
}

} // namespace

json profile_from_history(const std::deque<actors::coordinator::run>& runs, json base,
                          const std::string& base_name) {
  auto h = collect(runs);
  if (h.stages == 0)
    throw std::runtime_error("the journal holds no measured stage with its pool, encoder or "
                             "decoder kind (" + std::to_string(runs.size()) + " runs)");
  current_kind_names(base);
  base["name"] = "history";
  base["notes"] = "Learned by `vidline profile build` from " + std::to_string(runs.size())
                  + " runs: every entry whose source says 'measured' comes from them; the "
                    "rest from the base profile '" + base_name + "'.";
  for (auto& [kind, sizes] : h.sampling) {
    const auto& models = h.by_model.at(kind);
    if (models.size() == 1) {
      merge_pool(base["pools"], kind, sizes);
      continue;
    }
    merge_pool(base["pools"], kind, {});  // the kind's entry, rows from its main model
    merge_pool(base["pools"], kind, split_models(base["pools"], kind, models));
  }
  for (auto& [kind, oom] : h.out_of_memory)
    merge_capacity(base["pools"], kind, oom.first, oom.second);
  for (auto it = base["pools"].begin(); it != base["pools"].end();)
    if (it.value()["sampling"].empty()) {
      std::fprintf(stderr, "warning: pool kind %s has no sampling time left; left out\n",
                   it.key().c_str());
      it = base["pools"].erase(it);
    } else {
      ++it;
    }
  for (auto& [kind, x] : h.conditioning)
    base["encoders"][kind] = timing_of(x, "conditioning");
  for (auto& [kind, sizes] : h.decode) {
    auto& d = base["decoders"][kind];
    if (!d.contains("decode"))
      d = {{"description", "learned from history"}, {"decode", json::array()}};
    for (auto& [size, x] : sizes) {
      json row = timing_of(x, "decode");
      row["size"] = size;
      row_of(d["decode"], size) = row;
    }
  }
  // Power only where a kind has timings too (a profile entry needs them).
  for (auto& [kind, e] : h.pool_energy)
    if (e.stages > 0 && base["pools"].contains(kind))
      base["pools"][kind]["power"] = power_of(e, "sampling stage", ", conditioning included");
  for (auto& [kind, e] : h.decoder_energy)
    if (e.stages > 0 && base["decoders"].contains(kind))
      base["decoders"][kind]["power"] = power_of(e, "decode");
  for (auto& [same_host, x] : h.handoff)
    base["handoff"][same_host ? "same_host" : "remote"] = timing_of(x, "handoff");
  return base;
}

int run_profile_build(const profile_build_options& o) {
  if (o.data_dir.empty() == o.journal.empty()) {
    std::fprintf(stderr, "error: give either --data DIR or --journal FILE\n");
    return exit_code::usage;
  }
  auto path = o.journal.empty() ? o.data_dir + "/journal/journal.db" : o.journal;
  if (!std::filesystem::is_regular_file(path)) {
    std::fprintf(stderr, "error: no journal at %s%s\n", path.c_str(),
                 o.journal.empty() ? " (--data names the coordinator host's data_dir)" : "");
    return exit_code::usage;
  }
  std::deque<actors::coordinator::run> runs;
  uint64_t next_attempt = 0;
  try {
    state::sqlite_journal(path).load(runs, next_attempt);
    auto base = json::parse(o.base.empty() ? std::string(config::profile::profile::reference_json())
                                           : files::read_all(o.base));
    auto learned = profile_from_history(runs, std::move(base),
                                        o.base.empty() ? "embedded reference" : o.base);
    config::profile::profile::from_json(learned);  // refuses what the reader would refuse
    files::write_atomic(o.out, learned.dump(2) + "\n");
  } catch (const config::profile::profile_error& e) {
    std::fprintf(stderr, "profile error: %s\n", e.what());
    return exit_code::usage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return exit_code::usage;
  }
  std::printf("profile learned from %zu runs of %s written to %s\n", runs.size(), path.c_str(),
              o.out.c_str());
  return exit_code::ok;
}

void add_profile_verbs(CLI::App& app, verb_list& out) {
  auto o = std::make_shared<profile_build_options>();
  auto* profile = app.add_subcommand("profile", "Timing profiles");
  profile->require_subcommand(1);
  auto* build = profile->add_subcommand(
    "build", "Learn a timing profile from the runs a coordinator's journal holds");
  build->add_option("--data", o->data_dir, "The coordinator host's data_dir");
  build->add_option("--journal", o->journal, "The journal file (journal/journal.db)");
  build->add_option("--base", o->base,
                    "Profile for what history did not measure (default: the embedded reference)");
  build->add_option("--out", o->out, "Where to write the profile (JSON)")->required();
  out.push_back({build, [o] { return run_profile_build(*o); }});
}

} // namespace vidline::nodes::verbs
