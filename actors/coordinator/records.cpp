#include "actors/coordinator/records.hpp"
#include "actors/coordinator/graph_records.hpp"

#include "config/profile/kinds.hpp"
#include "config/shot_record.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <set>
#include <stdexcept>

namespace vidline::actors {

using nlohmann::json;

namespace {

json spec_record(const msg::job_spec& s) {
  json j = {{"run_id", s.run_id}, {"index", s.index}, {"seed", s.seed}, {"width", s.width},
          {"height", s.height}, {"seconds", s.seconds}, {"prompt", s.prompt},
          {"prompt_sha256", s.prompt_sha256}, {"reference", s.reference}, {"name", s.name},
          {"reference_sha256", s.reference_sha256}};
  if (s.reference_bytes != 0)  // an input the sampling host pulls (nodes/inputs.hpp)
    j["reference_bytes"] = s.reference_bytes;
  // The shot model's fields, each only when set (a journal older than them reads as unset).
  for (auto [key, v] : {std::pair<const char*, const std::string*>{"negative_prompt", &s.negative_prompt},
                        {"workflow", &s.workflow}, {"model", &s.model}, {"shot", &s.shot},
                        {"key", &s.key}, {"sequence", &s.sequence}})
    if (!v->empty())
      j[key] = *v;
  if (s.take != 0)
    j["take"] = s.take;
  if (!s.params.empty()) {
    json ps = json::array();
    for (auto& p : s.params)
      ps.push_back({{"name", p.name}, {"type", p.type}, {"text", p.text}});
    j["params"] = ps;
  }
  if (!s.inputs.empty()) {
    json is = json::array();
    for (auto& i : s.inputs)
      is.push_back({{"name", i.name}, {"sha256", i.sha256}, {"bytes", i.bytes}, {"path", i.path},
                    {"from", i.from}, {"from_index", i.from_index}, {"frame", i.frame},
                    {"latent", i.latent}});
    j["inputs"] = is;
  }
  return j;
}

msg::job_spec spec_from(const json& r) {
  msg::job_spec s;
  s.run_id = r.at("run_id").get<std::string>();
  s.index = r.at("index").get<uint32_t>();
  s.seed = r.at("seed").get<uint64_t>();
  s.width = r.at("width").get<uint32_t>();
  s.height = r.at("height").get<uint32_t>();
  s.seconds = r.at("seconds").get<uint32_t>();
  s.prompt = r.at("prompt").get<std::string>();
  s.prompt_sha256 = r.at("prompt_sha256").get<std::string>();
  s.reference = r.value("reference", "");
  s.name = r.value("name", "");  // a journal older than shot lists: unnamed
  s.reference_sha256 = r.value("reference_sha256", "");
  s.reference_bytes = r.value("reference_bytes", uint64_t{0});
  s.negative_prompt = r.value("negative_prompt", "");
  s.workflow = r.value("workflow", "");
  s.model = r.value("model", "");
  s.shot = r.value("shot", "");
  s.key = r.value("key", "");
  s.sequence = r.value("sequence", "");
  s.take = r.value("take", uint32_t{0});
  if (auto it = r.find("params"); it != r.end() && it->is_array())
    for (auto& p : *it)
      s.params.push_back({p.at("name").get<std::string>(), p.at("type").get<std::string>(),
                          p.at("text").get<std::string>()});
  if (auto it = r.find("inputs"); it != r.end() && it->is_array())
    for (auto& i : *it) {
      msg::job_input in;
      in.name = i.at("name").get<std::string>();
      in.sha256 = i.value("sha256", "");
      in.bytes = i.value("bytes", uint64_t{0});
      in.path = i.value("path", "");
      in.from = i.value("from", "");
      in.from_index = i.value("from_index", int64_t{-1});
      in.frame = i.value("frame", "");
      in.latent = i.value("latent", false);
      s.inputs.push_back(std::move(in));
    }
  return s;
}

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
json review_record(const sched::job& j, const Rel& rel, const Unix& unix_of) {
  if (j.verdict.empty())
    return nullptr;
  return {{"verdict", j.verdict},
          {"at_s", rel(j.reviewed_at)},
          {"at_unix", unix_of(j.reviewed_at)},
          {"take_index", j.retake >= 0 ? json(j.retake) : json(nullptr)},
          {"revision", j.verdict_revision}};
}

json clock_record(const sched::stage_clock& c) {
  return json::array({c.pool_start, c.sampler_start, c.sampler_end, c.decode_ordered,
                      c.fetch_start, c.fetched, c.decode_start, c.decode_end});
}

sched::stage_clock clock_from(const json& r) {
  sched::stage_clock c;
  if (!r.is_array())
    return c;
  double* f[] = {&c.pool_start, &c.sampler_start, &c.sampler_end, &c.decode_ordered,
                 &c.fetch_start, &c.fetched, &c.decode_start, &c.decode_end};
  for (std::size_t i = 0; i < std::size(f) && i < r.size(); ++i)
    *f[i] = r[i].get<double>();
  return c;
}

/// A job's kept checkpoints (sched::job::checkpoints), oldest first.
json checkpoints_record(const std::vector<sched::kept_checkpoint>& cs) {
  json out = json::array();
  for (auto& k : cs)
    out.push_back({{"step", k.ref.step}, {"steps", k.ref.steps}, {"sha256", k.ref.sha256},
                   {"bytes", k.ref.bytes}, {"host", k.ref.host},
                   {"made_unix_s", k.ref.made_unix_s}, {"attempt", k.ref.attempt},
                   {"kind", k.kind}});
  return out;
}

/// The same read back; a journal written before checkpoints has none.
std::vector<sched::kept_checkpoint> checkpoints_from(const json& r) {
  std::vector<sched::kept_checkpoint> out;
  if (!r.is_array())
    return out;
  for (auto& c : r) {
    sched::kept_checkpoint k;
    k.ref.step = c.at("step").get<uint32_t>();
    k.ref.steps = c.value("steps", 0u);
    k.ref.sha256 = c.at("sha256").get<std::string>();
    k.ref.bytes = c.value("bytes", uint64_t{0});
    k.ref.host = c.at("host").get<std::string>();
    k.ref.made_unix_s = c.value("made_unix_s", 0.0);
    k.ref.attempt = c.value("attempt", uint64_t{0});
    k.kind = profiles::current_kind(c.value("kind", ""));
    out.push_back(std::move(k));
  }
  return out;
}

json failures_record(const std::vector<sched::failed_attempt>& fs) {
  json out = json::array();
  for (auto& f : fs)
    out.push_back({{"stage", f.stage}, {"lane", f.lane}, {"start", f.start}, {"end", f.end},
                   {"reason", f.reason}});
  return out;
}

std::vector<sched::failed_attempt> failures_from(const json& r) {
  std::vector<sched::failed_attempt> out;
  if (!r.is_array())
    return out;
  for (auto& f : r)
    out.push_back({f.at("stage").get<std::string>(), f.at("lane").get<std::string>(),
                   f.at("start").get<double>(), f.at("end").get<double>(),
                   f.at("reason").get<std::string>()});
  return out;
}

} // namespace

json job_record(const sched::job& j) {
  json r = {{"spec", spec_record(j.spec)},
          {"state", sched::to_string(j.state)},
          {"attempt", j.attempt},
          {"sample_attempts", j.sample_attempts},
          {"decode_attempts", j.decode_attempts},
          {"corrupt_handoffs", j.corrupt_handoffs},
          {"lost_attempts", j.lost_attempts},
          {"handoff_failures", j.handoff_failures},
          {"pool", j.pool},
          {"decoder", j.decoder},
          {"latent_sha256", j.latent_sha256},
          {"latent_bytes", j.latent_bytes},
          {"latent_host", j.latent_host},
          {"output", j.output},
          {"output_sha256", j.output_sha256},
          {"reused_from", j.reused_from},
          {"error", j.error},
          {"capacity_failed", j.capacity_failed},
          {"cold", j.cold},
          {"sampled_model", j.sampled_model},
          {"model_identity", j.model_identity},
          {"sample_start", j.sample_start},
          {"sample_end", j.sample_end},
          {"decode_start", j.decode_start},
          {"decode_end", j.decode_end},
          {"conditioning_s", j.conditioning_s},
          {"sampling_s", j.sampling_s},
          {"handoff_s", j.handoff_s},
          {"decode_s", j.decode_s},
          {"pool_kind", j.pool_kind},
          {"encoder_kind", j.encoder_kind},
          {"decoder_kind", j.decoder_kind},
          {"handoff_same_host", j.handoff_same_host},
          {"latent_attempt", j.latent_attempt},
          {"duplicates", j.duplicates},
          {"fenced", j.fenced},
          {"retracted", j.retracted},
          {"gpu_s_redone", j.gpu_s_redone},
          {"counted_attempts", j.counted_attempts},
          {"attempt_at", j.attempt_at},
          {"ran", clock_record(j.ran)},
          {"failures", failures_record(j.failures)},
          {"failures_total", j.failures_total},
          {"verdict", j.verdict},
          {"reviewed_at", j.reviewed_at},
          {"retake", j.retake},
          {"retake_of", j.retake_of},
          {"sampling_energy_j", j.sampling_energy_j},
          {"decode_energy_j", j.decode_energy_j}};
  // The verdict's way to the run index (verdicts.hpp), only once there is one.
  if (j.verdict_revision != 0) {
    r["verdict_revision"] = j.verdict_revision;
    r["verdict_indexed"] = j.verdict_indexed;
  }
  // Sampling checkpoints (checkpoints.hpp), only once there are any.
  if (!j.checkpoints.empty())
    r["checkpoints"] = checkpoints_record(j.checkpoints);
  if (j.checkpoint_floor != 0)
    r["checkpoint_floor"] = j.checkpoint_floor;
  if (j.resumed_step != 0)
    r["resumed_step"] = j.resumed_step;
  if (j.preemptions != 0)
    r["preemptions"] = j.preemptions;
  return r;
}

sched::job job_from_record(const json& r) {
  sched::job j;
  j.spec = spec_from(r.at("spec"));
  auto st = sched::job_state_from(r.at("state").get<std::string>());
  if (!st)
    throw std::runtime_error("unknown job state " + r.at("state").get<std::string>());
  j.state = *st;
  j.attempt = r.at("attempt").get<uint64_t>();
  j.sample_attempts = r.at("sample_attempts").get<uint32_t>();
  j.decode_attempts = r.at("decode_attempts").get<uint32_t>();
  j.corrupt_handoffs = r.value("corrupt_handoffs", 0u);
  j.lost_attempts = r.value("lost_attempts", 0u);
  j.handoff_failures = r.value("handoff_failures", 0u);
  j.pool = r.at("pool").get<std::string>();
  j.decoder = r.at("decoder").get<std::string>();
  j.latent_sha256 = r.at("latent_sha256").get<std::string>();
  j.latent_bytes = r.at("latent_bytes").get<uint64_t>();
  j.latent_host = r.at("latent_host").get<std::string>();
  j.output = r.at("output").get<std::string>();
  j.output_sha256 = r.value("output_sha256", "");
  j.reused_from = r.value("reused_from", "");
  j.error = r.at("error").get<std::string>();
  // Kinds by their current names: a journal older than a kind's rename has its old one.
  for (const auto& kind : r.value("capacity_failed", std::set<std::string>{}))
    j.capacity_failed.insert(profiles::current_kind(kind));
  j.cold = r.value("cold", false);
  j.sampled_model = r.value("sampled_model", "");  // a journal older than it: unknown
  j.model_identity = r.value("model_identity", "");
  j.sample_start = r.at("sample_start").get<double>();
  j.sample_end = r.at("sample_end").get<double>();
  j.decode_start = r.at("decode_start").get<double>();
  j.decode_end = r.at("decode_end").get<double>();
  j.conditioning_s = r.value("conditioning_s", 0.0);
  j.sampling_s = r.value("sampling_s", 0.0);
  j.handoff_s = r.value("handoff_s", 0.0);
  j.decode_s = r.value("decode_s", 0.0);
  j.pool_kind = profiles::current_kind(r.value("pool_kind", ""));
  j.encoder_kind = profiles::current_kind(r.value("encoder_kind", ""));
  j.decoder_kind = profiles::current_kind(r.value("decoder_kind", ""));
  j.handoff_same_host = r.value("handoff_same_host", false);
  j.latent_attempt = r.value("latent_attempt", uint64_t{0});
  j.duplicates = r.value("duplicates", 0u);
  j.fenced = r.value("fenced", 0u);
  j.retracted = r.value("retracted", 0u);
  j.gpu_s_redone = r.value("gpu_s_redone", 0.0);
  j.counted_attempts = r.value("counted_attempts", std::set<uint64_t>{});
  j.attempt_at = r.value("attempt_at", -1.0);
  j.ran = clock_from(r.value("ran", json()));
  j.failures = failures_from(r.value("failures", json()));
  j.failures_total = r.value("failures_total", static_cast<uint32_t>(j.failures.size()));
  j.verdict = r.value("verdict", "");  // a journal older than the review: none
  j.reviewed_at = r.value("reviewed_at", -1.0);
  j.retake = r.value("retake", int64_t{-1});
  j.retake_of = r.value("retake_of", int64_t{-1});
  // A verdict journaled before verdicts were carried to the run index: its first revision,
  // not confirmed, so it is sent to its video's host now.
  j.verdict_revision = r.value("verdict_revision", j.verdict.empty() ? 0u : 1u);
  j.verdict_indexed = r.value("verdict_indexed", 0u);
  j.sampling_energy_j = r.value("sampling_energy_j", -1.0);
  j.decode_energy_j = r.value("decode_energy_j", -1.0);
  // A journal written before checkpoints: none kept, the job resumes from step 0.
  j.checkpoints = checkpoints_from(r.value("checkpoints", json()));
  j.checkpoint_floor = r.value("checkpoint_floor", uint64_t{0});
  j.resumed_step = r.value("resumed_step", 0u);
  j.preemptions = r.value("preemptions", 0u);
  return j;
}

namespace {

/// A run's collection folder's outputs by key, as the journal keeps them.
json collected_record(const std::map<std::string, sched::held_output>& c) {
  json out = json::object();
  for (auto& [key, h] : c)
    out[key] = {{"file", h.output}, {"sha256", h.sha256}, {"decoder", h.decoder},
                {"run_id", h.run_id}, {"index", h.index}};
  return out;
}

std::map<std::string, sched::held_output> collected_from(const json& j) {
  std::map<std::string, sched::held_output> out;
  if (!j.is_object())
    return out;
  for (auto& [key, h] : j.items())
    out[key] = sched::held_output{h.value("file", ""), h.value("sha256", ""),
                                  h.value("decoder", ""), h.value("run_id", ""),
                                  h.value("index", 0u), true};
  return out;
}

} // namespace

json run_record(const sched::run& r) {
  return {{"id", r.id}, {"mode", r.mode}, {"request_id", r.request_id},
          {"submitted_at", r.submitted_at}, {"finished_at", r.finished_at}, {"done", r.done},
          {"priority", r.priority}, {"cancelled", r.cancelled},
          {"added_requests", r.added_requests}, {"rerender", r.rerender},
          {"sequences", r.sequences}, {"collected", collected_record(r.collected)}};
}

sched::run run_from_record(const json& j) {
  sched::run r;
  r.id = j.at("id").get<std::string>();
  r.mode = j.at("mode").get<std::string>();
  r.request_id = j.value("request_id", "");
  r.submitted_at = j.at("submitted_at").get<double>();
  r.finished_at = j.at("finished_at").get<double>();
  r.done = j.at("done").get<bool>();
  r.priority = j.value("priority", 0);
  r.cancelled = j.value("cancelled", false);
  r.added_requests = j.value("added_requests", std::map<std::string, uint32_t>{});
  r.rerender = j.value("rerender", false);
  r.sequences = j.value("sequences", std::map<std::string, std::vector<uint32_t>>{});
  r.collected = collected_from(j.value("collected", json::object()));
  return r;
}

json cluster_json(const sched::state& s) {
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

std::string run_state(const sched::run& r) {
  if (!r.done)
    return "running";
  if (r.cancelled)
    return "cancelled";
  bool any_succeeded = false, any_cancelled = false;
  for (auto& j : r.jobs) {
    if (j.state == sched::job_state::failed)
      return "failed";
    any_succeeded = any_succeeded || sched::has_output(j.state);
    any_cancelled = any_cancelled || j.state == sched::job_state::cancelled;
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

nlohmann::json runs_json(const sched::state& s, double now, bool all,
                         const std::deque<sched::run>& journaled) {
  json out = json::array();
  std::size_t finished_shown = 0;
  // Both lists are oldest first; merged by submission (the state's first on a tie).
  std::vector<std::pair<const sched::run*, bool>> merged;
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
        case sched::job_state::succeeded: ++succeeded; break;
        case sched::job_state::failed: ++failed; break;
        case sched::job_state::cancelled: ++cancelled; break;
        case sched::job_state::queued:
        case sched::job_state::waiting: ++queued; break;
        case sched::job_state::reused: ++succeeded; ++reused; break;
        default: ++running; break;
      }
    }
    done = succeeded + failed + cancelled;
    const auto sum = sched::summarize(r);
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
json energy_json(const sched::job& j) {
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
json lanes_json(const sched::state& s, const sched::run& r) {
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
  auto named = [](const sched::job& j, const std::string& current, const char* stage) {
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
                          [&](const sched::job& j) { return named(j, j.pool, "sampling"); })},
          {"decoders", lanes(s.mode_decoders, decoder_host,
                             [&](const sched::job& j) { return named(j, j.decoder, "decode"); })}};
}

} // namespace

json status_json(const sched::state& s, const sched::run& r, const clock_note& clock,
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
    ++states[std::string(sched::to_string(j.state))];
  for (std::size_t ix = first; ix < last; ++ix) {
    const auto& j = r.jobs[ix];
    const auto& c = j.ran;
    // One record per stage, from the stamps of the attempts that made the latent and the
    // video (sched::stage_clock); `times` is read off these, so the two always agree.
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
                   {"waiting", j.state == sched::job_state::sampled
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
    if (j.state == sched::job_state::sampling)
      open("sampling", j.pool, j.attempt_at);
    else if (j.state == sched::job_state::sampled)
      open("waiting", j.pool, c.sampler_end >= 0 ? c.sampler_end : j.sample_end);
    else if (j.state == sched::job_state::decoding)
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
                    {"state", sched::to_string(j.state)},
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
                    {"error", j.state == sched::job_state::failed ? null_if_empty(j.error)
                                                                   : json(nullptr)},
                    {"cold", j.cold},
                    {"progress", j.state == sched::job_state::sampling &&
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
    // Only the newest failures are kept (sched::max_failures_kept): the count of all, when
    // some were left out.
    if (j.failures_total > j.failures.size())
      jobs.back()["failed_attempts_total"] = j.failures_total;
    put_graph_status(jobs.back(), j.spec);
    if (j.state == sched::job_state::waiting && !j.error.empty())
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
  auto sum = sched::summarize(r);
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

} // namespace vidline::actors
