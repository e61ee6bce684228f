// The status contract's JSON (records.hpp): a run's state, the runs listed, the cluster,
// and a run's status page.

#include "actors/coordinator/records.hpp"
#include "actors/coordinator/graph_records.hpp"

#include "config/shot_record.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <set>

namespace vidline::actors::coordinator {

using nlohmann::json;

namespace {

json null_if_empty(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

/// The prompt's opening, for the places that name a job (CLI lines, dashboard, review
/// cards): at most `prompt_start_bytes`, cut at a character boundary, "..." when cut.
constexpr std::size_t prompt_start_bytes = 160;
json prompt_start(const std::string& p) {
  if (p.size() <= prompt_start_bytes)
    return p;
  std::size_t n = prompt_start_bytes;
  while (n > 0 && (static_cast<unsigned char>(p[n]) & 0xC0) == 0x80)
    --n;  // not inside a UTF-8 sequence
  return p.substr(0, n) + "...";
}

/// A job's review in the status (null: none): the verdict, when (run clock and unix
/// seconds), the take its reject added (null: none) and its revision (1 for the first
/// verdict, one more for each change: the run index's lines say it too).
template <class Rel, class Unix>
json review_record(const job& j, const Rel& rel, const Unix& unix_of) {
  if (j.verdict.empty())
    return nullptr;
  return {{"verdict", j.verdict},
          {"at_s", rel(j.reviewed_at)},
          {"at_unix", unix_of(j.reviewed_at)},
          {"take_index", j.retake >= 0 ? json(j.retake) : json(nullptr)},
          {"revision", j.verdict_revision}};
}

} // namespace

json cluster_json(const state& s) {
  json pools = json::object();
  for (auto& [name, p] : s.pools)
    pools[name] = {{"host", p.host}, {"kind", p.kind}, {"alive", p.alive},
                   {"busy", p.assigned.has_value() || p.reported_busy != 0},
                   {"speed_factor", p.speed_factor}, {"speed_observed", p.speed_observed},
                   {"drained", p.drained},
                   {"model", !p.reported_model.empty() ? json(p.reported_model)
                             : p.warm                   ? json(p.model)
                                                        : json(nullptr)},
                   {"model_identity", null_if_empty(p.reported_identity)}};
  json decoders = json::object();
  for (auto& [name, d] : s.decoders)
    decoders[name] = {{"host", d.host}, {"kind", d.kind}, {"alive", d.alive},
                      {"credits", d.credits()}, {"holding", d.holding.size()},
                      {"pending", d.pending}, {"fenced", d.fenced}, {"unacked", d.unacked},
                      {"epoch", d.epoch}, {"seq", d.last_seq}, {"drained", d.drained}};
  json hosts = json::object();
  for (auto& [name, up] : s.hosts_up)
    hosts[name] = up;
  json drains = json::object();
  for (auto& [target, d] : s.drains) {
    json gpus = json::array();
    for (auto& g : d.sick_gpus)
      gpus.push_back(g);
    drains[target] = {{"by_hand", d.by_hand}, {"reason", d.reason}, {"sick_gpus", gpus},
                      {"since_s", d.since}};
  }
  return {{"pools", pools}, {"decoders", decoders}, {"hosts_up", hosts}, {"drains", drains}};
}

std::string run_state(const run& r) {
  if (!r.done)
    return "running";
  if (r.cancelled)
    return "cancelled";
  bool any_succeeded = false, any_cancelled = false;
  for (auto& j : r.jobs) {
    if (j.state == job_state::failed)
      return "failed";
    any_succeeded = any_succeeded || coordinator::has_output(j.state);
    any_cancelled = any_cancelled || j.state == job_state::cancelled;
  }
  // Some jobs cancelled one by one: the run succeeded when the rest did; every job
  // cancelled is a cancelled run.
  return any_cancelled && !any_succeeded ? "cancelled" : "succeeded";
}

namespace {
double ms3(double t) { return std::round(t * 1000) / 1000; }

/// An energy figure rounded to `decimals`, null when unknown (< 0).
json known(double v, int decimals) {
  if (v < 0)
    return nullptr;
  const double f = std::pow(10.0, decimals);
  return std::round(v * f) / f;
}
} // namespace

nlohmann::json runs_json(const state& s, double now, bool all,
                         const std::deque<run>& journaled) {
  json out = json::array();
  std::size_t finished_shown = 0;
  // Both lists are oldest first; merged by submission (the state's first on a tie).
  std::vector<std::pair<const run*, bool>> merged;
  merged.reserve(s.runs.size() + journaled.size());
  for (auto& r : s.runs)
    merged.emplace_back(&r, false);
  for (auto& r : journaled)
    merged.emplace_back(&r, true);
  std::stable_sort(merged.begin(), merged.end(), [](const auto& a, const auto& b) {
    return a.first->submitted_at < b.first->submitted_at;
  });
  for (auto it = merged.rbegin(); it != merged.rend(); ++it) {
    const auto& r = *it->first;
    if (r.done && !all && finished_shown >= 20)
      continue;
    finished_shown += r.done ? 1 : 0;
    uint32_t done = 0, succeeded = 0, failed = 0, cancelled = 0, queued = 0, running = 0;
    uint32_t reused = 0;  // counted in succeeded too: their videos are there
    uint64_t verdicts = 0;  // given, each change counted: a collector sees one more
    for (auto& j : r.jobs) {
      verdicts += j.verdict_revision;
      switch (j.state) {
        case job_state::succeeded: ++succeeded; break;
        case job_state::failed: ++failed; break;
        case job_state::cancelled: ++cancelled; break;
        case job_state::queued:
        case job_state::waiting: ++queued; break;
        case job_state::reused: ++succeeded; ++reused; break;
        default: ++running; break;
      }
    }
    done = succeeded + failed + cancelled;
    const auto sum = coordinator::summarize(r);
    const uint32_t total = static_cast<uint32_t>(r.jobs.size());
    // The ETA at the run's own pace so far (run-clock seconds): what is left at the rate
    // its jobs have finished since it was submitted. None before the first finish.
    json eta = nullptr;
    const double elapsed = (r.done && r.finished_at >= 0 ? r.finished_at : now) - r.submitted_at;
    if (!r.done && done > 0 && elapsed > 0)
      eta = ms3(elapsed / done * (total - done));
    else if (r.done)
      eta = 0.0;
    out.push_back({{"run_id", r.id},
                   {"state", run_state(r)},
                   {"mode", r.mode},
                   {"priority", r.priority},
                   {"done", done},
                   {"total", total},
                   {"succeeded", succeeded},
                   {"failed", failed},
                   {"cancelled", cancelled},
                   {"reused", reused},
                   {"queued", queued},
                   {"in_flight", running},
                   {"eta_s", eta},
                   {"age_s", ms3(now - r.submitted_at)},
                   {"from_journal", it->second},
                   {"wh_per_clip", known(sum.wh_per_clip, 3)},
                   {"clips_per_kwh", known(sum.clips_per_kwh, 2)},
                   {"verdicts", verdicts}});
  }
  // Oldest first, as submitted.
  std::reverse(out.begin(), out.end());
  return out;
}

namespace {

/// Milliseconds are what a status shows: rounded so it stays small and its numbers agree.
double ms(double t) { return std::round(t * 1000) / 1000; }

/// A job's energy by stage (joules, null where unknown): the pool's cards over conditioning
/// and sampling, the decoder's card over the decode, and their sum; null when none is known
/// (no telemetry: a status stays small).
json energy_json(const job& j) {
  double total = -1;
  for (double e : {j.sampling_energy_j, j.decode_energy_j})
    if (e >= 0)
      total = std::max(total, 0.0) + e;
  if (total < 0)
    return nullptr;
  return {{"sampling", known(j.sampling_energy_j, 1)}, {"decode", known(j.decode_energy_j, 1)},
          {"total", known(total, 1)}};
}

/// The lanes of a run's chart: the mode's pools (decoders) in the config's order, then any
/// other one its jobs name, by name.
json lanes_json(const state& s, const run& r) {
  auto lanes = [&](const std::map<std::string, std::vector<std::string>>& by_mode,
                   auto host_of, auto names_of_job) {
    std::vector<std::string> names;
    if (auto m = by_mode.find(r.mode); m != by_mode.end())
      names = m->second;
    std::set<std::string> extra;
    for (auto& j : r.jobs)
      for (auto& n : names_of_job(j))
        if (!n.empty() && std::find(names.begin(), names.end(), n) == names.end())
          extra.insert(n);
    names.insert(names.end(), extra.begin(), extra.end());
    json out = json::array();
    for (auto& n : names)
      out.push_back({{"name", n}, {"host", null_if_empty(host_of(n))}});
    return out;
  };
  auto named = [](const job& j, const std::string& current, const char* stage) {
    std::vector<std::string> out{current};
    for (auto& f : j.failures)
      if (f.stage == stage)
        out.push_back(f.lane);
    return out;
  };
  auto pool_host = [&](const std::string& n) {
    auto it = s.pools.find(n);
    return it == s.pools.end() ? std::string() : it->second.host;
  };
  auto decoder_host = [&](const std::string& n) {
    auto it = s.decoders.find(n);
    return it == s.decoders.end() ? std::string() : it->second.host;
  };
  return {{"pools", lanes(s.modes, pool_host,
                          [&](const job& j) { return named(j, j.pool, "sampling"); })},
          {"decoders", lanes(s.mode_decoders, decoder_host,
                             [&](const job& j) { return named(j, j.decoder, "decode"); })}};
}

} // namespace

json status_json(const state& s, const run& r, const clock_note& clock,
                 double now, status_page page) {
  const double scale = clock.time_scale;
  auto rel = [&](double t) { return ms(t - r.submitted_at); };
  auto unix_of = [&](double t) { return ms(t * scale); };
  json jobs = json::array();
  const std::size_t first = std::min(page.offset, r.jobs.size());
  const std::size_t last =
    page.limit == 0 ? r.jobs.size() : std::min(r.jobs.size(), first + page.limit);
  std::map<std::string, std::size_t> states;
  for (auto& j : r.jobs)
    ++states[std::string(coordinator::to_string(j.state))];
  for (std::size_t ix = first; ix < last; ++ix) {
    const auto& j = r.jobs[ix];
    const auto& c = j.ran;
    // One record per stage, from the stamps of the attempts that made the latent and the
    // video (stage_clock); `times` is read off these, so the two always agree.
    // Conditioning and pending are null when they took no time (cached; decoder idle).
    auto span = [&](double a, double b, bool may_be_empty) -> json {
      if (a < 0 || b < 0 || b < a || (may_be_empty && rel(b) - rel(a) <= 0))
        return nullptr;
      return {{"start_s", rel(a)}, {"end_s", rel(b)}, {"start_unix", unix_of(a)},
              {"end_unix", unix_of(b)}};
    };
    const bool decoded = c.decode_end >= 0;
    json stages = {{"conditioning", span(c.pool_start, c.sampler_start, true)},
                   {"sampling", span(c.sampler_start, c.sampler_end, false)},
                   {"waiting", j.state == job_state::sampled
                                 ? json(nullptr)
                                 : span(c.sampler_end, c.decode_ordered, false)},
                   {"handoff", decoded ? span(c.fetch_start, c.fetched, false) : json(nullptr)},
                   {"pending", decoded ? span(c.fetched, c.decode_start, true) : json(nullptr)},
                   {"decode", decoded ? span(c.decode_start, c.decode_end, false) : json(nullptr)}};
    auto at = [&](const char* stage, const char* end) -> json {
      auto& sp = stages[stage];
      return sp.is_null() ? json(nullptr) : sp[end];
    };
    auto length = [&](const char* stage) {
      auto& sp = stages[stage];
      return sp.is_null() ? 0.0 : ms(sp["end_s"].get<double>() - sp["start_s"].get<double>());
    };
    // What runs now: the open stage, from when it began as far as the coordinator knows.
    json running = nullptr;
    auto open = [&](const char* stage, const std::string& lane, double from) {
      if (from >= 0)
        running = {{"stage", stage}, {"lane", lane}, {"start_s", rel(from)},
                   {"start_unix", unix_of(from)}};
    };
    if (j.state == job_state::sampling)
      open("sampling", j.pool, j.attempt_at);
    else if (j.state == job_state::sampled)
      open("waiting", j.pool, c.sampler_end >= 0 ? c.sampler_end : j.sample_end);
    else if (j.state == job_state::decoding)
      open("decoding", j.decoder, j.attempt_at);
    json failed = json::array();
    for (auto& f : j.failures)
      failed.push_back({{"stage", f.stage}, {"lane", f.lane}, {"start_s", rel(f.start)},
                        {"end_s", rel(f.end)}, {"reason", f.reason}});
    auto sample_start = at("conditioning", "start_s");
    if (sample_start.is_null())
      sample_start = at("sampling", "start_s");
    json times = {{"sample_start_s", sample_start},
                  {"sample_end_s", at("sampling", "end_s")},
                  {"decode_start_s", at("decode", "start_s")},
                  {"decode_end_s", at("decode", "end_s")},
                  {"conditioning_s", length("conditioning")},
                  {"sampling_s", length("sampling")},
                  {"handoff_s", length("handoff")},
                  {"decode_s", length("decode")}};
    jobs.push_back({{"index", j.spec.index},
                    {"seed", j.spec.seed},
                    {"width", j.spec.width},
                    {"height", j.spec.height},
                    {"seconds", j.spec.seconds},
                    {"name", null_if_empty(j.spec.name)},
                    {"shot", null_if_empty(j.spec.shot)},
                    {"take", j.spec.take},
                    {"prompt_start", prompt_start(j.spec.prompt)},
                    {"reference_sha256", null_if_empty(j.spec.reference_sha256)},
                    {"prompt_sha256", null_if_empty(j.spec.prompt_sha256)},
                    {"state", coordinator::to_string(j.state)},
                    {"pool", null_if_empty(j.pool)},
                    {"decoder", null_if_empty(j.decoder)},
                    {"attempts", j.sample_attempts},
                    {"decode_attempts", j.decode_attempts},
                    {"latent_sha256", null_if_empty(j.latent_sha256)},
                    {"latent_bytes", j.latent_bytes},
                    {"latent_host", null_if_empty(j.latent_host)},
                    {"output", null_if_empty(j.output)},
                    {"output_sha256", null_if_empty(j.output_sha256)},
                    {"reused_from", null_if_empty(j.reused_from)},
                    {"error", j.state == job_state::failed ? null_if_empty(j.error)
                                                                   : json(nullptr)},
                    {"cold", j.cold},
                    {"progress", j.state == job_state::sampling &&
                                     j.progress_attempt == j.attempt && j.progress_steps > 0
                                   ? json{{"step", j.progress_step}, {"steps", j.progress_steps}}
                                   : json(nullptr)},
                    {"done_twice", j.duplicates},
                    {"fenced", j.fenced},
                    {"products_retracted", j.retracted},
                    {"gpu_s_paid_twice", std::round(j.gpu_s_redone * 1000) / 1000},
                    {"checkpoint", j.checkpoints.empty()
                                     ? json(nullptr)
                                     : json{{"step", j.checkpoints.back().ref.step},
                                            {"steps", j.checkpoints.back().ref.steps},
                                            {"host", j.checkpoints.back().ref.host}}},
                    {"resumed_from_step", j.resumed_step},
                    {"preemptions", j.preemptions},
                    {"times", std::move(times)},
                    {"energy_j", energy_json(j)},
                    {"stages", std::move(stages)},
                    {"running", std::move(running)},
                    {"failed_attempts", std::move(failed)},
                    {"review", review_record(j, rel, unix_of)},
                    {"retake_of", j.retake_of >= 0 ? json(j.retake_of) : json(nullptr)}});
    // What its output is made from (workflow, model, params, input digests, ident, version).
    jobs.back().update(config::shot_record(j.spec));
    // Which weights made its latent, as its pool's backend said (null: it cannot tell).
    jobs.back()["model_identity"] = null_if_empty(j.model_identity);
    if (!j.sampled_model.empty() && j.sampled_model != j.spec.model)
      jobs.back()["sampled_model"] = j.sampled_model;
    // Only the newest failures are kept (coordinator::max_failures_kept): the count of all, when
    // some were left out.
    if (j.failures_total > j.failures.size())
      jobs.back()["failed_attempts_total"] = j.failures_total;
    put_graph_status(jobs.back(), j.spec);
    if (j.state == job_state::waiting && !j.error.empty())
      jobs.back()["error"] = j.error;
  }
  // Hosts down while the run ran (or still down).
  const double until = r.done && r.finished_at >= 0 ? r.finished_at : now;
  json outages = json::array();
  for (auto& o : s.outages) {
    const double to = o.to < 0 ? now : o.to;
    if (to < r.submitted_at || o.from > until)
      continue;
    outages.push_back({{"host", o.host}, {"from_s", rel(o.from)},
                       {"to_s", o.to < 0 ? json(nullptr) : json(rel(o.to))},
                       {"from_unix", unix_of(o.from)},
                       {"to_unix", o.to < 0 ? json(nullptr) : json(unix_of(o.to))}});
  }
  auto sum = coordinator::summarize(r);
  json out = {{"run_id", r.id},
          {"state", run_state(r)},
          {"mode", r.mode},
          {"priority", r.priority},
          {"clock", {{"simulated", clock.simulated},
                     {"time_scale", clock.time_scale},
                     {"submitted_unix", unix_of(r.submitted_at)},
                     {"note", clock.simulated
                                ? "times are simulated seconds of the sim backend's scaled clock"
                                : "times are real seconds"}}},
          {"now_s", rel(now)},
          {"lanes", lanes_json(s, r)},
          {"outages", std::move(outages)},
          {"jobs", jobs},
          {"page", {{"offset", first}, {"jobs", last - first}, {"jobs_total", r.jobs.size()}}},
          {"states", states},
          {"summary", {{"succeeded", sum.succeeded},
                       {"failed", sum.failed},
                       {"cancelled", sum.cancelled},
                       {"reused", sum.reused},
                       {"done_twice", sum.done_twice},
                       {"fenced", sum.fenced},
                       {"products_retracted", sum.products_retracted},
                       {"gpu_s_paid_twice", std::round(sum.gpu_s_paid_twice * 1000) / 1000},
                       {"first_finish_s", sum.first_finish_s},
                       {"makespan_s", sum.makespan_s},
                       {"clips_per_hour", sum.clips_per_hour},
                       {"energy_j", known(sum.energy_j, 1)},
                       {"wh_per_clip", known(sum.wh_per_clip, 3)},
                       {"clips_per_kwh", known(sum.clips_per_kwh, 2)}}}};
  put_sequences_status(out, r);
  return out;
}

} // namespace vidline::actors::coordinator
