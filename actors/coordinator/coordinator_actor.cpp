#include "actors/coordinator/coordinator_actor.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/coordinator/records.hpp"
#include "actors/coordinator/input_maker.hpp"
#include "config/shot_graph.hpp"
#include "actors/inbound.hpp"
#include "actors/coordinator/admission.hpp"
#include "actors/coordinator/dispatch_setup.hpp"
#include "actors/coordinator/gpu_view.hpp"
#include "common/metrics.hpp"
#include "common/sha256.hpp"
#include "common/text.hpp"
#include "messages/actor_types.hpp"
#include "messages/gpu_actor_types.hpp"
#include "messages/input_actor_types.hpp"
#include "messages/review_actor_types.hpp"

namespace vidline::actors {
namespace {

struct shell {
  context ctx;
  std::shared_ptr<journal> jnl;
  sched::state st;
  clock_note clock;
  /// The state's counters as last put in the registry (its counters take the growth).
  uint64_t forgotten_seen = 0, unknown_seen = 0, reused_seen = 0;
  double gpu_s_seen = 0;  ///< sched::state::gpu_s_redone at the last look
  /// The forgotten run read last from the journal: a client reading a big one page by page
  /// reads the journal once. A forgotten run does not change; the copy goes when its
  /// records are dropped or it is resumed (back in the state).
  std::optional<sched::run> recent;
  gpu_view gpus;  ///< every host's newest GPU report
  /// Makes the inputs of shots that follow shots; a real video's off this actor's thread.
  /// Last: destroyed first, so its thread ends before the rest of the shell goes.
  std::unique_ptr<input_maker> maker;
};

/// Executes effects: everything to persist goes to the journal in one transaction first,
/// then messages leave. A journal failure throws: the supervisor restarts the coordinator,
/// which reloads the journal, and nothing unrecorded was sent.
void execute(shell& sh, const std::vector<sched::effect>& fx) {
  std::vector<const sched::run*> runs;
  std::vector<const sched::job*> jobs;
  std::set<std::pair<std::string, uint32_t>> seen_jobs;
  std::set<std::string> seen_runs;
  for (auto& e : fx) {
    if (auto* p = std::get_if<sched::fx_persist_job>(&e)) {
      if (seen_jobs.insert({p->run_id, p->index}).second)
        if (auto* j = sh.st.find_job(p->run_id, p->index))
          jobs.push_back(j);
    } else if (auto* r = std::get_if<sched::fx_persist_run>(&e)) {
      if (seen_runs.insert(r->run_id).second)
        if (auto* run = sh.st.find_run(r->run_id))
          runs.push_back(run);
    }
  }
  if (!runs.empty() || !jobs.empty())
    sh.jnl->write(runs, jobs, sh.st.next_attempt);
  for (auto& e : fx)
    if (std::holds_alternative<sched::fx_persist_drains>(e)) {
      sh.jnl->write_drains(sh.st.drains);
      break;
    }
  for (auto& e : fx) {
    if (auto* s = std::get_if<sched::fx_send_sample>(&e))
      sh.ctx.out->send(s->host, "pool:" + s->order.pool, s->order);
    else if (auto* d = std::get_if<sched::fx_send_decode>(&e))
      sh.ctx.out->send(d->host, "decoder:" + d->order.decoder, d->order);
    else if (auto* a = std::get_if<sched::fx_ack>(&e))
      sh.ctx.out->send(a->host, a->target, msg::result_ack{a->target, a->attempt, a->discard});
    else if (auto* g = std::get_if<sched::fx_grant>(&e))
      sh.ctx.out->send(g->host, g->target, g->grant);
    else if (auto* v = std::get_if<sched::fx_send_verdict>(&e))
      sh.ctx.out->send(v->host, "decoder:" + v->v.decoder, v->v);
    else if (auto* rl = std::get_if<sched::fx_release>(&e))
      sh.ctx.out->send(rl->host, "latents", msg::latent_release{rl->host, rl->sha256s});
    else if (auto* dc = std::get_if<sched::fx_drain_changed>(&e))
      metrics::global().add("vidline_drain_changes_total",
                            {{"target", dc->target}, {"drained", dc->drained ? "1" : "0"}});
    else if (auto* l = std::get_if<sched::fx_log>(&e))
      spdlog::log(static_cast<spdlog::level::level_enum>(l->level), "coordinator: {}", l->text);
    else if (auto* dr = std::get_if<sched::fx_drop_runs>(&e)) {
      if (sh.recent && std::count(dr->run_ids.begin(), dr->run_ids.end(), sh.recent->id) != 0)
        sh.recent.reset();
      sh.jnl->drop(dr->run_ids);  // throws like write: a restart loads and drops them again
      metrics::global().add("vidline_journal_runs_dropped_total", {},
                            static_cast<double>(dr->run_ids.size()));
    }
  }
}

/// Jobs and runs by state, hosts up: read off the state each tick (docs/metrics.md).
void observe(const shell& sh) {
  std::map<std::string, double> jobs, runs;
  for (auto s : {sched::job_state::queued, sched::job_state::sampling, sched::job_state::sampled,
                 sched::job_state::decoding, sched::job_state::succeeded, sched::job_state::failed,
                 sched::job_state::waiting, sched::job_state::reused})
    jobs[sched::to_string(s)] = 0;
  for (auto s : {"running", "succeeded", "failed"})
    runs[s] = 0;
  for (auto& r : sh.st.runs) {
    runs[run_state(r)] += 1;
    for (auto& j : r.jobs)
      jobs[sched::to_string(j.state)] += 1;
  }
  auto& reg = metrics::global();
  for (auto& [state, n] : jobs)
    reg.set("vidline_jobs", {{"state", state}}, n);
  for (auto& [state, n] : runs)
    reg.set("vidline_runs", {{"state", state}}, n);
  for (auto& [host, up] : sh.st.hosts_up)
    reg.set("vidline_host_up", {{"host", host}}, up ? 1 : 0);
  reg.clear("vidline_drained");
  for (auto& [name, p] : sh.st.pools)
    reg.set("vidline_drained", {{"target", "pool:" + name}}, p.drained ? 1 : 0);
  for (auto& [name, d] : sh.st.decoders)
    reg.set("vidline_drained", {{"target", "decoder:" + name}}, d.drained ? 1 : 0);
}

/// Counters of the state since the last look (observe's counterpart for counters).
void count(shell& sh) {
  auto& reg = metrics::global();
  reg.add("vidline_runs_forgotten_total", {},
          static_cast<double>(sh.st.runs_forgotten - sh.forgotten_seen));
  reg.add("vidline_unknown_job_results_total", {},
          static_cast<double>(sh.st.unknown_job_results - sh.unknown_seen));
  reg.add("vidline_gpu_seconds_paid_twice_total", {}, sh.st.gpu_s_redone - sh.gpu_s_seen);
  sh.gpu_s_seen = sh.st.gpu_s_redone;
  reg.add("vidline_jobs_reused_total", {}, static_cast<double>(sh.st.jobs_reused - sh.reused_seen));
  sh.reused_seen = sh.st.jobs_reused;
  sh.forgotten_seen = sh.st.runs_forgotten;
  sh.unknown_seen = sh.st.unknown_job_results;
}

/// A run the state no longer holds (forgotten, docs/reliability.md "Retention"), as the
/// journal recorded it; nullopt when it has none. `error` says why a read failed.
std::optional<sched::run> from_journal(shell& sh, const std::string& run_id, std::string& error) {
  if (sh.recent && sh.recent->id == run_id)
    return sh.recent;
  try {
    auto r = sh.jnl->load_run(run_id);
    if (r)
      sh.recent = r;
    return r;
  } catch (const std::exception& e) {
    error = std::string("cannot read run ") + run_id + " from the journal: " + e.what();
    return std::nullopt;
  }
}

/// Steps the scheduler and executes its effects; the machine's answer to a submit or an
/// add of jobs (fx_accepted), when it gave one.
std::optional<sched::fx_accepted> handle(shell& sh, const sched::event& e) {
  auto fx = sched::step(sh.st, e, sh.ctx.run_now(), sh.ctx.mono_now());
  std::optional<sched::fx_accepted> accepted;
  std::vector<sched::fx_make_input> inputs;
  for (auto& x : fx)
    if (auto* a = std::get_if<sched::fx_accepted>(&x))
      accepted = *a;
    else if (auto* m = std::get_if<sched::fx_make_input>(&x))
      inputs.push_back(*m);
  execute(sh, std::move(fx));
  // Inputs of shots that follow shots, made once the state that asked for them is durable:
  // a sim video's at once, a real one's answered later (msg::input_made).
  for (auto& m : inputs)
    if (auto made = sh.maker->ask(m))
      handle(sh, *made);
  return accepted;
}

std::string new_run_id(const context& ctx) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d%02d%02d-%02d%02d%02d-%04x", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<unsigned>(ctx.random64() & 0xffff));
  return buf;
}

/// The size of the coordinator host's copy of input `sha` (<data_dir>/inputs/<sha>, put
/// there by an upload: nodes/inputs.hpp), none when it has none.
std::optional<uint64_t> stored_input_size(const shell& sh, const std::string& sha) {
  if (!is_sha256_hex(sha))
    return std::nullopt;
  std::error_code ec;
  const std::string path = input_dir(sh.ctx) + "/" + sha;
  if (!std::filesystem::is_regular_file(path, ec))
    return std::nullopt;
  const auto n = std::filesystem::file_size(path, ec);
  if (ec || n == 0)
    return std::nullopt;
  return static_cast<uint64_t>(n);
}

/// Every input a run names by digest (its reference, each shot's reference and inputs) is
/// one this host holds: "" and `sizes` filled (digest -> bytes), or the first that is not,
/// named by its shot and field.
std::string check_inputs(const shell& sh, const msg::submit_run& req,
                         std::map<std::string, uint64_t>& sizes) {
  auto need = [&](const std::string& sha, const std::string& who) -> std::string {
    if (sha.empty() || sizes.count(sha))
      return "";
    auto n = stored_input_size(sh, sha);
    if (!n)
      return who + " " + sha + " names no input the coordinator holds "
             "(upload the file first: `vidline run` does, or PUT /v1/inputs/" + sha + ")";
    sizes[sha] = *n;
    return "";
  };
  if (auto why = need(req.reference_sha256, "reference_sha256"); !why.empty())
    return why;
  for (std::size_t i = 0; i < req.shots.size(); ++i) {
    const std::string at = "shot " + std::to_string(i + 1) + ": ";
    if (auto why = need(req.shots[i].reference_sha256, at + "reference_sha256"); !why.empty())
      return why;
    for (auto& in : req.shots[i].inputs)
      if (auto why = need(in.sha256, at + "inputs." + in.name + ".sha256"); !why.empty())
        return why;
  }
  return "";
}

msg::submit_reply submit(shell& sh, const msg::submit_run& req) {
  if (auto why = check_submit(*sh.ctx.cluster, req); !why.empty())
    return {"", why};
  if (auto why = req.shots.empty()
                   ? dispatching::capacity_refusal(sh.st, req.mode, req.width, req.height, req.seconds)
                   : dispatching::shots_capacity_refusal(sh.st, req.mode, req.shots);
      !why.empty())
    return {"", why};
  if (!req.request_id.empty()) {
    // A retried submit is answered before the queue's limits are asked (the machine would
    // answer it too: ev_submit is idempotent by request id).
    if (auto* r = sched::run_of_request(sh.st, req.request_id))
      return {r->id, ""};
    // A run forgotten since (finished): the journal still knows the request.
    if (auto id = sh.jnl->find_request(req.request_id))
      return {*id, ""};
  }
  if (auto why = check_queue(sh.st, sh.ctx.cluster->knobs, req); !why.empty())
    return {"", why};
  std::map<std::string, uint64_t> input_sizes;
  if (auto why = check_inputs(sh, req, input_sizes); !why.empty())
    return {"", why};
  sched::run r;
  r.id = new_run_id(sh.ctx);
  r.mode = req.mode;
  r.request_id = req.request_id;
  r.priority = req.priority;
  r.rerender = req.rerender;
  if (auto why = dispatching::collected_outputs(req.collected, r.collected); !why.empty())
    return {"", why};
  const auto cat = dispatching::run_catalog(*sh.ctx.cluster, req.mode);
  if (!req.shots.empty()) {
    std::map<std::string, std::string> sha_of;  // prompt -> its SHA-256 (the cache key)
    for (auto& spec : dispatching::shot_jobs(req.shots, r.id, req.reference, req.reference_sha256,
                                             &cat)) {
      sched::job j;
      j.spec = std::move(spec);
      auto it = sha_of.find(j.spec.prompt);
      if (it == sha_of.end())
        it = sha_of.emplace(j.spec.prompt, to_hex(sha256_of(j.spec.prompt))).first;
      j.spec.prompt_sha256 = it->second;
      r.jobs.push_back(std::move(j));
    }
    std::vector<msg::job_spec> specs;
    for (auto& j : r.jobs)
      specs.push_back(j.spec);
    r.sequences = config::graph::sequence_parts(req.shots, specs);
  }
  auto prompt_sha = req.shots.empty() ? to_hex(sha256_of(req.prompt)) : std::string();
  for (uint32_t i = 0; req.shots.empty() && i < req.count; ++i) {
    sched::job j;
    j.spec = msg::job_spec{r.id, i, req.seed + i, req.width, req.height, req.seconds,
                           req.prompt, prompt_sha, req.reference};
    j.spec.reference_sha256 = req.reference_sha256;
    dispatching::resolve_uniform_job(cat, j.spec);
    r.jobs.push_back(std::move(j));
  }
  for (auto& j : r.jobs)
    dispatching::set_input_sizes(j.spec, input_sizes);
  auto id = r.id;
  auto a = handle(sh, sched::ev_submit{std::move(r)});
  return {a ? a->run_id : id, ""};
}

/// `vidline submit RUN ...`: jobs added to an open run, checked as a run's submit is.
msg::submit_jobs_reply add_jobs(shell& sh, const msg::submit_jobs& req) {
  msg::submit_jobs_reply out;
  out.run_id = req.run_id;
  auto* r = sh.st.find_run(req.run_id);
  if (r == nullptr) {
    std::string err;
    if (auto old = from_journal(sh, req.run_id, err)) {
      out.error = "run " + old->id + " is " + run_state(*old) + ": jobs go only to an open run";
      return out;
    }
    out.error = err.empty() ? "no run " + req.run_id : err;
    out.code = msg::reply_code::no_such_run;
    return out;
  }
  if (!req.request_id.empty())
    if (auto it = r->added_requests.find(req.request_id); it != r->added_requests.end()) {
      out.first_index = it->second;
      out.count = req.count;
      for (auto& shot : req.shots)
        out.count += shot.takes;
      return out;  // a retried submit: added before
    }
  if (r->done || r->cancelled) {
    out.error = "run " + r->id + " is " + run_state(*r) + ": jobs go only to an open run";
    return out;
  }
  msg::submit_run as_run;
  as_run.mode = r->mode;
  as_run.prompt = req.prompt;
  as_run.reference = req.reference;
  as_run.width = req.width;
  as_run.height = req.height;
  as_run.seconds = req.seconds;
  as_run.count = req.count;
  as_run.seed = req.seed;
  as_run.request_id = req.request_id;
  as_run.reference_sha256 = req.reference_sha256;
  as_run.shots = req.shots;  // the shot form: each shot its own prompt, size, seed and takes
  uint64_t adding = req.count;
  for (auto& s : req.shots)
    adding += s.takes;
  std::string why = check_submit(*sh.ctx.cluster, as_run);
  std::map<std::string, uint64_t> input_sizes;
  if (why.empty())
    why = check_inputs(sh, as_run, input_sizes);
  if (why.empty() && uint64_t{r->jobs.size()} + adding > sh.ctx.cluster->knobs.max_jobs_per_run)
    why = "the run has " + std::to_string(r->jobs.size()) + " jobs; " + std::to_string(adding)
          + " more is over max_jobs_per_run ("
          + std::to_string(sh.ctx.cluster->knobs.max_jobs_per_run) + ")";
  if (why.empty())
    why = req.shots.empty()
            ? dispatching::capacity_refusal(sh.st, r->mode, req.width, req.height, req.seconds)
            : dispatching::shots_capacity_refusal(sh.st, r->mode, req.shots);
  if (why.empty())
    why = dispatching::added_names_problem(*r, req.shots);
  as_run.priority = r->priority;
  if (why.empty())
    why = check_queue(sh.st, sh.ctx.cluster->knobs, as_run, false);
  if (!why.empty()) {
    out.error = why;
    return out;
  }
  sched::ev_add_jobs ev;
  ev.run_id = r->id;
  const auto cat = dispatching::run_catalog(*sh.ctx.cluster, r->mode);
  auto prompt_sha = to_hex(sha256_of(req.prompt));
  for (uint32_t i = 0; i < req.count; ++i) {
    sched::job j;
    j.spec = msg::job_spec{r->id, 0, req.seed + i, req.width, req.height, req.seconds,
                           req.prompt, prompt_sha, req.reference};
    j.spec.reference_sha256 = req.reference_sha256;
    dispatching::resolve_uniform_job(cat, j.spec);
    ev.jobs.push_back(std::move(j));
  }
  for (auto& spec : dispatching::shot_jobs(req.shots, r->id, "", "", &cat)) {
    sched::job j;
    j.spec = std::move(spec);
    j.spec.index = 0;  // the machine numbers added jobs after the run's own
    j.spec.prompt_sha256 = to_hex(sha256_of(j.spec.prompt));
    ev.jobs.push_back(std::move(j));
  }
  for (auto& j : ev.jobs)
    dispatching::set_input_sizes(j.spec, input_sizes);
  out.count = static_cast<uint32_t>(ev.jobs.size());
  ev.request_id = req.request_id;  // the machine records it with the run (journaled)
  if (auto a = handle(sh, ev)) {
    out.first_index = a->first_index;
    out.count = a->count;
  } else {
    out.error = "run " + req.run_id + " took no jobs";
  }
  return out;
}

/// `vidline cancel RUN [--job I]`.
msg::cancel_reply cancel(shell& sh, const msg::cancel_run& req) {
  msg::cancel_reply out;
  out.run_id = req.run_id;
  auto* r = sh.st.find_run(req.run_id);
  std::string err;
  if (r == nullptr)
    if (auto old = from_journal(sh, req.run_id, err)) {
      // Forgotten, so finished: nothing is left to cancel.
      if (req.one_job && req.index >= old->jobs.size()) {
        out.error = "run " + old->id + " has no job " + std::to_string(req.index) + " (it has "
                    + std::to_string(old->jobs.size()) + ")";
        out.code = msg::reply_code::no_such_run;
        return out;
      }
      out.state = run_state(*old);
      return out;
    }
  if (r == nullptr) {
    out.error = err.empty() ? "no run " + req.run_id : err;
    out.code = msg::reply_code::no_such_run;
    return out;
  }
  if (req.one_job && req.index >= r->jobs.size()) {
    out.error = "run " + r->id + " has no job " + std::to_string(req.index) + " (it has "
                + std::to_string(r->jobs.size()) + ")";
    out.code = msg::reply_code::no_such_run;
    return out;
  }
  for (auto& j : r->jobs) {
    if ((req.one_job && j.spec.index != req.index) || sched::is_final(j.state))
      continue;
    ++out.cancelled;
    if (j.state == sched::job_state::sampling || j.state == sched::job_state::decoding)
      ++out.in_flight;
  }
  sched::ev_cancel ev{r->id, std::nullopt};
  if (req.one_job)
    ev.job = req.index;
  handle(sh, ev);
  r = sh.st.find_run(req.run_id);
  out.state = run_state(*r);
  return out;
}

/// JSON text for a client. Invalid UTF-8 is replaced, never thrown on: a byte that slipped
/// past the inbound checks must not kill the coordinator.
std::string dump_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// Room for the envelope and the reply's own fields around a status's JSON in one frame.
constexpr std::size_t status_frame_headroom = 4096;

/// A status reply, or an error when its JSON would not fit a frame: the client's socket
/// would drop the frame and the client could only time out.
msg::status_reply status_or_too_large(shell& sh, const std::string& what, std::string text) {
  const std::size_t limit = sh.ctx.cluster->knobs.max_frame_bytes;
  if (text.size() + status_frame_headroom <= limit)
    return {std::move(text), "", ""};
  return {"",
          "the status of " + what + " is " + std::to_string(text.size())
            + " bytes, over max_frame_bytes " + std::to_string(limit)
            + " (less 4096 for the envelope); raise knobs.max_frame_bytes or split the batch",
          msg::reply_code::too_large};
}

msg::status_reply status(shell& sh, const std::string& run_id, status_page page) {
  if (run_id == "@cluster") {
    auto c = cluster_json(sh.st);
    c["hosts_up"][sh.ctx.cluster->coordinator] = true;  // the host answering is up
    c["gpus"] = gpus_json(sh.gpus, *sh.ctx.cluster, sh.st, sh.ctx.run_now());
    return status_or_too_large(sh, "the cluster", dump_text(c));
  }
  const sched::run* r = nullptr;
  if (run_id.empty()) {
    if (!sh.st.runs.empty())
      r = &sh.st.runs.back();
  } else {
    r = sh.st.find_run(run_id);
  }
  // A run the state forgot: its records in the journal answer (the newest one recorded,
  // when none is asked for and none is in memory).
  std::optional<sched::run> old;
  std::string err;
  if (r == nullptr) {
    if (run_id.empty()) {
      try {
        auto newest = sh.jnl->load_newest(1, {});
        if (!newest.empty())
          old = std::move(newest.back());
      } catch (const std::exception& e) {
        err = std::string("cannot read the journal: ") + e.what();
      }
    } else {
      old = from_journal(sh, run_id, err);
    }
    if (old)
      r = &*old;
  }
  if (r == nullptr)
    return {"", !err.empty() ? err : run_id.empty() ? "no runs yet" : "no run " + run_id,
            msg::reply_code::no_such_run};
  auto j = status_json(sh.st, *r, sh.clock, sh.ctx.run_now(), page);
  j["from_journal"] = old.has_value();
  return status_or_too_large(sh, "run " + r->id + " (" + std::to_string(r->jobs.size()) + " jobs)",
                             dump_text(j));
}

/// `vidline runs`: the runs in memory and, beside them, those only the journal holds.
msg::runs_reply runs(shell& sh, bool all) {
  std::set<std::string> here;
  for (auto& r : sh.st.runs)
    here.insert(r.id);
  std::deque<sched::run> old;
  try {
    // Without --all the listing shows 20 finished runs: no more can come from the journal.
    old = sh.jnl->load_newest(all ? 0 : 20, here);
  } catch (const std::exception& e) {
    return {"", std::string("cannot read the journal: ") + e.what(), ""};
  }
  auto text = dump_text(runs_json(sh.st, sh.ctx.run_now(), all, old));
  if (text.size() + status_frame_headroom > sh.ctx.cluster->knobs.max_frame_bytes)
    return {"", "the run list is " + std::to_string(text.size())
                  + " bytes, over max_frame_bytes; ask without --all",
            msg::reply_code::too_large};
  return {text, "", ""};
}

/// `vidline resume RUN`: a forgotten run is recalled from the journal (when it has failed
/// jobs and was not cancelled) and resumed.
msg::resume_reply resume(shell& sh, const std::string& run_id) {
  msg::resume_reply reply{run_id, 0, "", "", ""};
  auto failed = [](const sched::run& r) {
    return std::count_if(r.jobs.begin(), r.jobs.end(), [](const sched::job& j) {
      return j.state == sched::job_state::failed;
    });
  };
  sched::ev_resume ev{run_id, std::nullopt};
  long before = 0;
  if (auto* r = sh.st.find_run(run_id)) {
    before = failed(*r);
  } else {
    std::string err;
    ev.recalled = from_journal(sh, run_id, err);
    if (!ev.recalled) {
      reply.error = err.empty() ? "no run " + run_id : err;
      reply.code = msg::reply_code::no_such_run;
      return reply;
    }
    before = failed(*ev.recalled);
    reply.state = run_state(*ev.recalled);
  }
  handle(sh, ev);
  sh.recent.reset();  // perhaps recalled: the state holds it now, and it will change
  if (auto* r = sh.st.find_run(run_id)) {
    reply.reopened = static_cast<uint32_t>(before - failed(*r));
    reply.state = run_state(*r);
  }
  return reply;
}

/// A reviewer's verdict (review_take): recorded by the machine, which adds the take a
/// reject asks for and sends the verdict to the run index on the video's host (verdicts.hpp);
/// a run the state forgot comes back from the journal.
msg::review_reply review(shell& sh, const msg::review_take& req) {
  msg::review_reply out;
  out.run_id = req.run_id;
  out.index = req.index;
  sched::ev_review ev{req.run_id, req.index, req.verdict, req.another_take, std::nullopt};
  const sched::run* r = sh.st.find_run(req.run_id);
  if (r == nullptr) {
    std::string err;
    ev.recalled = from_journal(sh, req.run_id, err);
    if (!ev.recalled) {
      out.error = err.empty() ? "no run " + req.run_id : err;
      out.code = msg::reply_code::no_such_run;
      return out;
    }
    r = &*ev.recalled;
  }
  const auto max_jobs = sh.ctx.cluster->knobs.max_jobs_per_run;
  if (req.another_take && req.index < r->jobs.size() && r->jobs[req.index].retake < 0
      && r->jobs.size() + 1 > max_jobs) {
    out.error = "the run has " + std::to_string(r->jobs.size()) + " jobs: another take is over "
                "max_jobs_per_run (" + std::to_string(max_jobs) + ")";
    out.code = "not_reviewable";
    return out;
  }
  auto fx = sched::step(sh.st, ev, sh.ctx.run_now(), sh.ctx.mono_now());
  for (auto& x : fx)
    if (auto* a = std::get_if<sched::fx_review_answer>(&x)) {
      out.error = a->error;
      out.code = a->code;
      out.verdict = a->verdict;
      out.take_index = a->take;
      out.take_seed = a->take_seed;
    }
  execute(sh, fx);
  sh.recent.reset();  // perhaps recalled: the state holds it now
  if (auto* now = sh.st.find_run(req.run_id))
    out.state = run_state(*now);
  return out;
}

} // namespace

void adopt_in_flight(sched::state& s, double now, double mono) {
  for (auto& r : s.runs)
    for (auto& j : r.jobs) {
      // A worker may have been granted a lease just before the restart: a whole one.
      if (j.state == sched::job_state::sampling || j.state == sched::job_state::decoding)
        j.lease_until = mono + s.p.lease_s;
      if (j.state == sched::job_state::sampling) {
        auto it = s.pools.find(j.pool);
        if (it != s.pools.end())
          it->second.assigned = std::make_pair(r.id, j.spec.index);
        j.order_sent_at = now;
      } else if (j.state == sched::job_state::decoding) {
        auto it = s.decoders.find(j.decoder);
        if (it != s.decoders.end())
          it->second.ordered[j.attempt] = now;
        j.order_sent_at = now;
      }
    }
}

namespace {
std::string check_uniform(const config::cluster& c, const msg::submit_run& r);
} // namespace

std::string check_submit(const config::cluster& c, const msg::submit_run& r) {
  if (!dispatching::resolve_mode(c, r.mode))
    return "unknown mode '" + r.mode + "' (known: " + dispatching::known_modes(c) + ")";
  if (!r.shots.empty()) {
    if (!r.prompt.empty() || r.width != 0 || r.height != 0 || r.seconds != 0 || r.count != 0
        || r.seed != 0)
      return "a shot list comes without prompt, width, height, seconds, count or seed";
    if (r.shots.size() > c.knobs.max_jobs_per_run)
      return "the shot list has " + std::to_string(r.shots.size())
             + " shots, over max_jobs_per_run (" + std::to_string(c.knobs.max_jobs_per_run) + ")";
    if (auto why = dispatching::shots_problem(r.shots, c.knobs, c.knobs.max_jobs_per_run);
        !why.empty())
      return why;
  } else if (auto why = inbound::check_size(r.width, r.height, r.seconds); !why.empty())
    return why;
  else if (auto why = check_uniform(c, r); !why.empty())
    return why;
  if (r.request_id.size() > 128)
    return "request_id is too long";
  if (!text::is_valid_utf8(r.request_id) || !text::is_single_line(r.request_id))
    return "request_id holds control characters or invalid UTF-8";
  if (auto why = inbound::check_reference(r.reference); !why.empty())
    return why;
  if (!r.reference_sha256.empty() && !is_sha256_hex(r.reference_sha256))
    return "reference_sha256 must be 64 lowercase hex digits";
  if (r.priority < -max_priority || r.priority > max_priority)
    return "priority " + std::to_string(r.priority) + " is out of range (-"
           + std::to_string(max_priority) + " .. " + std::to_string(max_priority) + ")";
  // Last: the workflows the run's pools declare (the same check as the CLI's and the API's).
  const auto cat = dispatching::run_catalog(c, r.mode);
  return r.shots.empty()
           ? dispatching::uniform_workflow_problem(cat, r.reference, r.reference_sha256)
           : dispatching::shots_workflow_problem(cat, r.shots, r.reference, r.reference_sha256);
}

namespace {

/// The uniform form's own checks (count, seed range, prompt).
std::string check_uniform(const config::cluster& c, const msg::submit_run& r) {
  if (r.count == 0)
    return "count must be at least 1";
  if (r.count > c.knobs.max_jobs_per_run)
    return "count " + std::to_string(r.count) + " is over max_jobs_per_run ("
           + std::to_string(c.knobs.max_jobs_per_run) + ")";
  if (r.seed > UINT64_MAX - (r.count - 1))
    return "seed " + std::to_string(r.seed) + " with count " + std::to_string(r.count)
           + ": the last job's seed would pass 2^64-1";
  if (r.prompt.empty())
    return "the prompt is empty";
  if (r.prompt.size() > c.knobs.max_prompt_bytes)
    return "the prompt is " + std::to_string(r.prompt.size()) + " bytes, over max_prompt_bytes ("
           + std::to_string(c.knobs.max_prompt_bytes) + ")";
  // The prompt goes into the journal's JSON and into every job's order: text only.
  if (!text::is_valid_utf8(r.prompt))
    return "the prompt is not valid UTF-8";
  return "";
}

} // namespace

std::string check_queue(const sched::state& s, const config::knobs& k, const msg::submit_run& r,
                        bool new_run) {
  uint64_t unfinished = 0, queued = 0;
  for (const auto& run : s.runs) {
    if (run.done)
      continue;
    ++unfinished;
    // Each job carries its prompt (a shot list's jobs differ in theirs).
    for (const auto& j : run.jobs)
      queued += j.spec.prompt.size();
  }
  if (new_run && unfinished >= k.max_runs)
    return "too many unfinished runs (knob max_runs)";
  uint64_t adding = uint64_t{r.count} * r.prompt.size();
  for (const auto& sh : r.shots)
    adding += uint64_t{sh.takes} * sh.prompt.size();
  if (queued + adding > k.max_queued_prompt_bytes)
    return "the run's prompt text (" + std::to_string(adding) + " bytes over its jobs) does not"
           " fit beside the " +
           std::to_string(queued) + " bytes held for unfinished runs (knob "
           "max_queued_prompt_bytes: " + std::to_string(k.max_queued_prompt_bytes) + ")";
  return "";
}

caf::behavior coordinator_actor(caf::event_based_actor* self, context ctx,
                                std::shared_ptr<journal> jnl, input_fetchers fetch) {
  auto sh = std::make_shared<shell>();
  sh->ctx = std::move(ctx);
  sh->jnl = std::move(jnl);
  // The maker answers from its own thread; a weak address, so a pending answer never keeps
  // a stopped coordinator alive (its answer is then dropped, and the input asked again).
  sh->maker = std::make_unique<input_maker>(
    sh->ctx, std::move(fetch.video), [me = self->address()](sched::ev_input_made e) {
      if (auto a = caf::actor_cast<caf::actor>(me))
        caf::anon_send(a, msg::input_made{std::move(e.run_id), e.index, std::move(e.name),
                                          std::move(e.sha256), e.bytes, std::move(e.error)});
    }, std::move(fetch.latent));
  sh->st = dispatching::initial_state(*sh->ctx.cluster, sh->ctx.time_scale);
  dispatching::configure_dispatch(sh->st, *sh->ctx.cluster);
  sh->jnl->load(sh->st.runs, sh->st.next_attempt);
  dispatching::name_default_workflows(*sh->ctx.cluster, sh->st.runs);
  sched::restore_drains(sh->st, sh->jnl->load_drains());
  adopt_in_flight(sh->st, sh->ctx.run_now(), sh->ctx.mono_now());
  bool simulated = true;
  for (auto& [name, b] : sh->ctx.cluster->backends)
    if (b.type != "sim")
      simulated = false;
  sh->clock = clock_note{simulated, sh->ctx.time_scale};
  std::size_t unfinished = 0;
  for (auto& r : sh->st.runs)
    unfinished += r.done ? 0 : 1;
  spdlog::info("coordinator: up; journal holds {} runs ({} unfinished), next attempt {}",
               sh->st.runs.size(), unfinished, sh->st.next_attempt);
  auto interval = std::chrono::milliseconds(sh->ctx.cluster->knobs.status_interval_ms);
  self->send(self, msg::tick_atom::value);
  return {
    // Reports come from other hosts: repaired before anything of them reaches the journal.
    [sh](msg::pool_status& s) {
      inbound::repair(s);
      handle(*sh, sched::ev_pool_status{std::move(s)});
    },
    [sh](msg::decoder_status& s) {
      inbound::repair(s);
      handle(*sh, sched::ev_decoder_status{std::move(s)});
    },
    [sh](msg::sample_result& r) {
      inbound::repair(r);
      handle(*sh, sched::ev_sample_result{std::move(r)});
    },
    [sh](msg::decode_result& r) {
      inbound::repair(r);
      handle(*sh, sched::ev_decode_result{std::move(r)});
    },
    [sh](msg::latent_holdings& h) { handle(*sh, sched::ev_latent_holdings{std::move(h)}); },
    [sh](msg::verdict_indexed& a) { handle(*sh, sched::ev_verdict_indexed{std::move(a)}); },
    [sh](msg::peer_event& p) { handle(*sh, sched::ev_peer{p.host, p.up}); },
    [sh](msg::input_made& m) {
      handle(*sh, sched::ev_input_made{std::move(m.run_id), m.index, std::move(m.name),
                                       std::move(m.sha256), m.bytes, std::move(m.error)});
    },
    [sh](msg::gpu_report& r) {
      std::vector<sched::ev_gpu_health> health;
      if (!take_report(sh->gpus, *sh->ctx.cluster, r, sh->ctx.run_now(), health))
        return;
      for (auto& e : health)
        handle(*sh, std::move(e));
      if (auto power = power_readings(r); !power.readings.empty())
        handle(*sh, std::move(power));
    },
    [sh](msg::client_call<msg::drain_request>& c) {
      auto fx = sched::step(sh->st, sched::ev_drain{c.body.kind, c.body.name, c.body.drain,
                                                    c.body.reason},
                            sh->ctx.run_now(), sh->ctx.mono_now());
      msg::drain_reply reply;
      for (auto& x : fx)
        if (auto* a = std::get_if<sched::fx_drain_answer>(&x)) {
          reply.targets = a->targets;
          reply.error = a->error;
          reply.code = a->error.empty() ? "" : "not_found";
        }
      execute(*sh, fx);
      sh->ctx.out->reply(c.reply_to, c.correlation, reply);
    },
    [sh](msg::client_call<msg::review_take>& c) {
      sh->ctx.out->reply(c.reply_to, c.correlation, review(*sh, c.body));
    },
    [sh](msg::client_call<msg::submit_run>& c) {
      auto reply = submit(*sh, c.body);
      sh->ctx.out->reply(c.reply_to, c.correlation, reply);
    },
    [sh](msg::client_call<msg::resume_run>& c) {
      sh->ctx.out->reply(c.reply_to, c.correlation, resume(*sh, c.body.run_id));
    },
    [sh](msg::client_call<msg::cancel_run>& c) {
      sh->ctx.out->reply(c.reply_to, c.correlation, cancel(*sh, c.body));
    },
    [sh](msg::client_call<msg::submit_jobs>& c) {
      sh->ctx.out->reply(c.reply_to, c.correlation, add_jobs(*sh, c.body));
    },
    [sh](msg::client_call<msg::runs_query>& c) {
      sh->ctx.out->reply(c.reply_to, c.correlation, runs(*sh, c.body.all));
    },
    [sh](msg::client_call<msg::status_query>& c) {
      sh->ctx.out->reply(c.reply_to, c.correlation,
                         status(*sh, c.body.run_id, status_page{c.body.offset, c.body.limit}));
    },
    [self, sh, interval](msg::tick_atom) {
      handle(*sh, sched::ev_tick{});
      observe(*sh);
      count(*sh);
      self->delayed_send(self, interval, msg::tick_atom::value);
    },
    [](msg::crash_atom) -> caf::result<void> { throw std::runtime_error("crash requested"); },
  };
}

} // namespace vidline::actors
