#include "actors/pool/pool_actor.hpp"

#include <atomic>
#include <chrono>
#include <algorithm>
#include <filesystem>
#include <memory>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/encoder/encoder_actor.hpp"
#include "actors/inbound.hpp"
#include "actors/inputs.hpp"
#include "actors/pool/checkpoint_store.hpp"
#include "actors/pool/pool_machine.hpp"
#include "actors/warm_start.hpp"
#include "actors/worker.hpp"
#include "backends/backend.hpp"
#include <mutex>

#include "common/files.hpp"
#include "common/metrics.hpp"
#include "common/stage_records.hpp"
#include "config/workflows.hpp"
#include "messages/actor_types.hpp"

namespace vidline::actors::pool {
namespace {

/// Everything the shell keeps beside the pure state.
struct shell {
  context ctx;
  config::pool pool;
  pool::state st;
  std::shared_ptr<backends::sampler_backend> backend;
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
  /// Set by fx_preempt_stage: the running sampler checkpoints and stops at its next step.
  std::shared_ptr<std::atomic<bool>> preempt = std::make_shared<std::atomic<bool>>(false);
  /// Set when the actor ends: a warm start still waiting for its load gives up.
  std::shared_ptr<std::atomic<bool>> stopping = std::make_shared<std::atomic<bool>>(false);
  /// The running attempt's progress, set from its stage thread, read by each report.
  struct progress_box {
    std::mutex m;
    uint64_t attempt = 0;
    uint32_t step = 0, steps = 0;
  };
  std::shared_ptr<progress_box> progress = std::make_shared<progress_box>();
  std::string coordinator_host;
  std::vector<std::string> devices;
  std::string vendor;
  uint64_t refused = 0;  ///< orders refused by inbound::check_order
  /// What the metrics last saw of the state (read off it after each step: the machine
  /// itself never touches the registry).
  struct watch {
    bool busy = false;
    double mark = -1;                 ///< monotonic s the busy/idle time was counted to
    double sampling_started_at = -1;  ///< the state's, at the last look
    uint64_t stalls = 0;              ///< the state's, at the last look
  } seen;
};

/// Busy or idle seconds up to now, and the conditioning that just ended (docs/metrics.md).
void observe(shell& sh) {
  auto& reg = metrics::global();
  const metrics::labels lane{{"pool", sh.pool.name}};
  const double mono = sh.ctx.mono_now();
  if (sh.seen.mark >= 0 && mono > sh.seen.mark)
    reg.add(sh.seen.busy ? "vidline_pool_busy_seconds_total" : "vidline_pool_idle_seconds_total",
            lane, mono - sh.seen.mark);
  sh.seen.mark = mono;
  if (sh.st.stalls > sh.seen.stalls)
    reg.add("vidline_sampling_stalls_total", lane, static_cast<double>(sh.st.stalls - sh.seen.stalls));
  sh.seen.stalls = sh.st.stalls;
  sh.seen.busy = sh.st.at != pool::phase::idle;
  if (sh.st.sampling_started_at != sh.seen.sampling_started_at) {
    sh.seen.sampling_started_at = sh.st.sampling_started_at;
    if (sh.st.sampling_started_at >= 0 && sh.st.started_at >= 0)
      reg.observe("vidline_stage_duration_seconds", {{"stage", "conditioning"}, {"lane", sh.pool.name}},
                  sh.st.sampling_started_at - sh.st.started_at);
  }
}

void log_at(int level, const std::string& who, const std::string& text) {
  spdlog::log(static_cast<spdlog::level::level_enum>(level), "{}: {}", who, text);
}

void report(shell& sh) {
  auto st = sh.st.status(sh.ctx.mono_now());
  {
    std::lock_guard<std::mutex> l(sh.progress->m);
    if (st.busy_attempt != 0 && sh.progress->attempt == st.busy_attempt) {
      st.step = sh.progress->step;
      st.steps = sh.progress->steps;
    }
  }
  if (auto m = sh.backend->loaded_model()) {
    st.model = m->first;
    st.model_identity = m->second;
  }
  sh.ctx.out->send(sh.coordinator_host, "coordinator", st);
}

/// The warm start's answer comes back as a stage_done of attempt 0, which no order has.
constexpr uint64_t warm_attempt = 0;

/// Whether this pool loads its model at start (config backend `warm_start`): only the first
/// such pool (in the config's order) of each GPU, so pools that share a card do not load two
/// models on it at once.
bool warms_at_start(const shell& sh, const config::backend& b) {
  if (!config::warm_start_of(b))
    return false;
  for (auto& other : sh.ctx.cluster->pools) {
    if (other.name == sh.pool.name)
      return true;
    auto* ob = sh.ctx.cluster->find_backend(other.backend);
    if (other.host != sh.pool.host || ob == nullptr || !config::warm_start_of(*ob))
      continue;
    for (auto& g : other.gpus)
      if (std::find(sh.pool.gpus.begin(), sh.pool.gpus.end(), g) != sh.pool.gpus.end()) {
        spdlog::info("pool {}: no warm start: pool {} loads its model on GPU {} first",
                     sh.pool.name, other.name, g);
        return false;
      }
  }
  return true;
}

/// Loads the model of the backend's default workflow now, on a thread of its own; a first
/// order meanwhile waits for the load in its backend call and finds the model loaded.
void warm_start(pool_role::pointer self, const std::shared_ptr<shell>& sh,
                const config::backend& b) {
  auto flows = config::workflows_of(b);
  if (flows.empty())
    return;
  const config::workflow* w = &flows.front();
  for (auto& f : flows)
    if (f.is_default)
      w = &f;
  backends::warm_request req;
  req.workflow = w->name;
  req.model = w->model;
  req.env.work_dir = work_dir(sh->ctx) + "/warm";
  req.env.devices = sh->devices;
  req.env.vendor = sh->vendor;
  req.env.cancel = sh->stopping.get();
  warm_in_background(self, sh->backend, std::move(req), "pool " + sh->pool.name, sh->stopping);
}

void execute(pool_role::pointer self, const std::shared_ptr<shell>& sh,
           std::vector<pool::effect> fx);

void condition(pool_role::pointer self, const std::shared_ptr<shell>& sh,
               const msg::sample_order& o) {
  // Typed: the compiler checks the request and its answer against the encoder's contract.
  auto enc = caf::actor_cast<encoder::encoder_role>(sh->ctx.out->local("encoder"));
  uint64_t attempt = o.attempt;
  if (!enc) {
    execute(self, sh, pool::step(sh->st, pool::ev_conditioned{attempt, false, "", 0,
                                                                   "no encoder on this host"},
                                  sh->ctx.run_now()));
    return;
  }
  auto timeout = std::chrono::milliseconds(
    sh->ctx.real_ms(sh->ctx.cluster->knobs.sample_timeout_s) + 1000);
  self->request(enc, timeout, msg::encode_request{o.job.prompt_sha256, o.job.prompt})
    .then(
      [self, sh, attempt](msg::encode_reply& r) {
        execute(self, sh, pool::step(sh->st,
                                      pool::ev_conditioned{attempt, r.error.empty(),
                                                              r.conditioning_path, r.encode_s,
                                                              r.error},
                                      sh->ctx.run_now()));
      },
      [self, sh, attempt](caf::error& err) {
        execute(self, sh, pool::step(sh->st,
                                      pool::ev_conditioned{attempt, false, "", 0,
                                                              to_string(err)},
                                      sh->ctx.run_now()));
      });
}

void sample(pool_role::pointer self, const std::shared_ptr<shell>& sh,
            const msg::sample_order& o, const std::string& conditioning_path) {
  backends::stage_env env;
  env.work_dir = work_dir(sh->ctx) + "/" + std::to_string(o.attempt);
  env.output_path = env.work_dir + "/latent";
  env.devices = sh->devices;
  env.vendor = sh->vendor;
  env.timeout_s = sh->ctx.cluster->knobs.sample_timeout_s;
  env.cancel = sh->cancel.get();
  env.progress = [box = sh->progress, attempt = o.attempt](uint32_t step, uint32_t steps) {
    std::lock_guard<std::mutex> l(box->m);
    box->attempt = attempt;
    box->step = step;
    box->steps = steps;
  };
  auto backend = sh->backend;
  // One attempt at a time: a cancel of the one before (fx_cancel_stage) is over.
  *sh->cancel = false;
  *sh->preempt = false;
  auto cancel = sh->cancel;  // keeps the flag alive as long as the worker runs
  auto preempt = sh->preempt;
  env.preempt = preempt.get();
  // Checkpoints (checkpoint_store.hpp): each one durable in the latent store before the
  // sampler goes on, then reported by the machine.
  env.checkpoint_dir = env.work_dir + "/checkpoints";
  env.checkpoint_interval_s = sh->ctx.cluster->knobs.checkpoint_interval_s;
  env.checkpoint = [ctx = sh->ctx, job = o.job, attempt = o.attempt,
                    me = caf::actor_cast<caf::actor>(self)](uint32_t step, uint32_t steps,
                                                            const std::string& file) {
    auto c = store_checkpoint(ctx, job.run_id, job.index, attempt, step, steps, file);
    if (!c)
      return false;
    caf::anon_send(me, msg::checkpoint_saved{attempt, *c});
    return true;
  };
  const msg::checkpoint_ref resume = o.resume;
  auto latents = latent_dir(sh->ctx);
  auto data_dir = sh->ctx.data_dir;
  auto job = o.job;
  uint64_t attempt = o.attempt;
  auto pool = sh->pool.name;
  auto ctx = sh->ctx;
  auto source = sh->coordinator_host;
  run_on_worker(
    self,
    [backend, cancel, preempt, env, job, conditioning_path, latents, data_dir, attempt, pool, ctx,
     source, resume]() mutable {
      // A latent this host finished before (for any attempt, any pool) is not paid twice.
      if (auto r = records::reuse(data_dir, "sampled", job.run_id, job.index, attempt)) {
        spdlog::info("pool {}: {}/{} reuses latent {} sampled before", pool, job.run_id,
                     job.index, r->sha256);
        return msg::stage_done{attempt, msg::outcome::ok, "", r->sha256, r->bytes, 0, false,
                               r->product, ""};
      }
      // Every input (the reference image among them) travels by digest: the backend is
      // given this host's verified copy, pulled from the coordinator's host when it is not
      // here (docs/shots.md). An input without a size (journaled by a coordinator older than
      // inputs) keeps its path.
      for (auto& in : job.inputs) {
        if (in.sha256.empty() || in.bytes == 0)
          continue;
        auto got = ensure_input(ctx, source, in.sha256, in.bytes, cancel.get());
        if (!got.error.empty()) {
          spdlog::warn("pool {}: {}/{}: input {}: {}", pool, job.run_id, job.index, in.name,
                       got.error);
          const std::string what = in.name == "reference" ? "reference: " : "input " + in.name + ": ";
          return msg::stage_done{attempt, msg::outcome::transient, what + got.error, "",
                                 0, 0, false, "", ""};
        }
        in.path = got.path;
        if (in.name == "reference")
          job.reference = got.path;
      }
      const bool listed = std::any_of(job.inputs.begin(), job.inputs.end(),
                                      [](const auto& i) { return i.name == "reference"; });
      if (!listed && !job.reference_sha256.empty() && job.reference_bytes != 0) {
        auto in = ensure_input(ctx, source, job.reference_sha256, job.reference_bytes,
                               cancel.get());
        if (!in.error.empty()) {
          spdlog::warn("pool {}: {}/{}: {}", pool, job.run_id, job.index, in.error);
          return msg::stage_done{attempt, msg::outcome::transient, "reference: " + in.error, "",
                                 0, 0, false, "", ""};
        }
        job.reference = in.path;
      }
      files::make_dirs(env.work_dir);
      files::make_dirs(env.checkpoint_dir);
      if (resume.step > 0) {
        auto from = make_resume_file(ctx, job, resume, cancel.get());
        if (!from.bad.empty()) {
          spdlog::warn("pool {}: {}/{}: checkpoint {} (step {}) did not verify: {}", pool,
                       job.run_id, job.index, resume.sha256, resume.step, from.note);
          msg::stage_done d{attempt, msg::outcome::transient,
                            "checkpoint " + resume.sha256 + " did not verify: " + from.note,
                            "", 0, 0, false, "", "", "", "", ""};
          d.bad_checkpoint = from.bad;
          return d;
        }
        if (from.path.empty()) {
          spdlog::warn("pool {}: {}/{}: checkpoint at step {} not available ({}): sampling "
                       "from step 0", pool, job.run_id, job.index, resume.step, from.note);
        } else {
          env.resume_step = resume.step;
          env.resume_file = from.path;
          env.resume_sha256 = resume.sha256;
          spdlog::info("pool {}: {}/{} resumes from step {} (checkpoint {})", pool, job.run_id,
                       job.index, resume.step, resume.sha256);
        }
      }
      auto r = backend->sample(job, conditioning_path, env);
      msg::stage_done d{attempt, r.outcome, r.error, r.sha256, r.bytes, r.elapsed_s, r.cold, "", "",
                        r.model, r.model_identity, ""};
      // An ok latent stays in the work folder until the lease decides (commit_latent).
      if (r.outcome == msg::outcome::ok) {
        d.product_path = env.output_path;
      } else {
        std::error_code ec;
        std::filesystem::remove_all(env.work_dir, ec);
      }
      return d;
    },
    [attempt](const std::string& what) {
      return msg::stage_done{attempt, msg::outcome::transient, "sampler: " + what, "", 0, 0,
                             false, "", ""};
    });
}

/// Publishes a latent within its lease: into the store under its digest, receipt, ledger
/// (records::publish, the sequence the decoder's videos follow too).
void commit_latent(shell& sh, const pool::fx_commit& c) {
  const auto& job = c.order.job;
  const std::string latents = latent_dir(sh.ctx);
  const std::string work = work_dir(sh.ctx) + "/" + std::to_string(c.order.attempt);
  if (c.staged.rfind(work + "/", 0) != 0)
    return;  // reused: committed by an earlier attempt
  // Content-addressed: the latent's name is its digest, so a second copy of the same
  // latent is the same file.
  files::make_dirs(latents);
  // The job it belongs to, for the latents actor's reports: after a restart that lost this
  // result, the coordinator can still adopt the latent (re-offer). Written first, so no
  // latent is ever seen without it.
  files::write_atomic(data_paths::latent_job_file(latents, c.sha256),
                      job.run_id + " " + std::to_string(job.index) + "\n");
  records::publish({sh.ctx.data_dir, "sampled", job.run_id, job.index, c.order.attempt,
                    c.staged, data_paths::latent_file(latents, c.sha256), c.sha256, ""});
  std::error_code ec;
  std::filesystem::remove_all(work, ec);
}

/// Removes a latent whose lease ended: logged (by the machine), counted in the ledger.
void discard_latent(shell& sh, const pool::fx_discard& d) {
  const std::string work = work_dir(sh.ctx) + "/" + std::to_string(d.order.attempt);
  if (d.staged.rfind(work + "/", 0) != 0)
    return;  // reused: another attempt's latent, not this one's to remove
  records::retract(sh.ctx.data_dir, "sampled", d.order.job.run_id, d.order.job.index,
                   d.order.attempt, work, false);
}

void execute(pool_role::pointer self, const std::shared_ptr<shell>& sh,
           std::vector<pool::effect> fx) {
  for (auto& e : fx) {
    if (auto* c = std::get_if<pool::fx_commit>(&e)) {
      commit_latent(*sh, *c);
      continue;
    }
    if (auto* d = std::get_if<pool::fx_discard>(&e)) {
      discard_latent(*sh, *d);
      continue;
    }
    if (auto* x = std::get_if<pool::fx_preempt_stage>(&e)) {
      if (sh->st.current && sh->st.current->attempt == x->attempt)
        *sh->preempt = true;
      continue;
    }
    if (auto* x = std::get_if<pool::fx_cancel_stage>(&e)) {
      // The backend returns promptly with "cancelled" (backends/backend.hpp).
      if (sh->st.current && sh->st.current->attempt == x->attempt)
        *sh->cancel = true;
      continue;
    }
    if (auto* c = std::get_if<pool::fx_condition>(&e))
      condition(self, sh, c->order);
    else if (auto* s = std::get_if<pool::fx_sample>(&e))
      sample(self, sh, s->order, s->conditioning_path);
    else if (std::holds_alternative<pool::fx_report>(e))
      report(*sh);
    else if (auto* l = std::get_if<pool::fx_log>(&e))
      log_at(l->level, "pool " + sh->pool.name, l->text);
  }
  observe(*sh);
}

} // namespace

pool_role::behavior_type pool_actor(pool_role::pointer self, context ctx, config::pool pool) {
  auto sh = std::make_shared<shell>();
  sh->ctx = std::move(ctx);
  sh->pool = std::move(pool);
  sh->st.pool = sh->pool.name;
  sh->st.host = sh->ctx.host;
  sh->st.time_scale = sh->ctx.time_scale;  // the unix stamps of its results
  sh->st.epoch = sh->ctx.random64();
  sh->coordinator_host = sh->ctx.cluster->coordinator;
  if (auto* h = sh->ctx.cluster->find_host(sh->ctx.host))
    for (auto& id : sh->pool.gpus)
      for (auto& g : h->gpus)
        if (g.id == id) {
          sh->devices.push_back(std::to_string(g.index));
          sh->vendor = g.vendor;
        }
  auto* b = sh->ctx.cluster->find_backend(sh->pool.backend);
  if (b == nullptr)
    throw std::runtime_error("pool " + sh->pool.name + ": unknown backend " + sh->pool.backend);
  const auto& knobs = sh->ctx.cluster->knobs;
  sh->backend = backends::make_sampler({*b, sh->pool.profile_key, sh->pool.name, sh->pool.host,
                                        sh->pool.gpus, knobs.log_file_bytes, knobs.log_files});
  sh->st.stall_s = knobs.stall_timeout_s;
  sh->st.steps_expected = sh->backend->reports_steps();
  // A restarted or stopped pool abandons its running attempt.
  self->attach_functor([cancel = sh->cancel, stopping = sh->stopping] {
    *cancel = true;
    *stopping = true;
  });
  if (warms_at_start(*sh, *b))
    warm_start(self, sh, *b);
  auto interval = std::chrono::milliseconds(sh->ctx.cluster->knobs.status_interval_ms);
  self->send(self, msg::status_atom::value);
  spdlog::info("pool {}: up (epoch {:x})", sh->pool.name, sh->st.epoch);
  return {
    [self, sh](msg::sample_order& o) {
      // Its names become receipt, work and log paths and a command's argv: a hostile
      // order stops here. The coordinator never sends one (check_submit holds runs to the
      // same rules), so nothing waits for an answer.
      if (auto why = inbound::check_order(o, sh->ctx.cluster->knobs); !why.empty()) {
        if (++sh->refused <= 10 || sh->refused % 1000 == 0)
          spdlog::warn("pool {}: order {} refused: {} ({} refused so far)", sh->pool.name,
                       o.attempt, why, sh->refused);
        return;
      }
      execute(self, sh, pool::step(sh->st, pool::ev_order{std::move(o)}, sh->ctx.run_now()));
    },
    [self, sh](msg::result_ack& a) {
      execute(self, sh, pool::step(sh->st, pool::ev_ack{a.attempt}, sh->ctx.run_now()));
    },
    [self, sh](msg::stage_done& d) {
      if (d.attempt == warm_attempt) {
        report(*sh);  // the coordinator learns the loaded model now
        return;
      }
      if (sh->st.current && sh->st.current->attempt == d.attempt) {
        const double now = sh->ctx.run_now();
        if (sh->st.sampling_started_at >= 0 && d.outcome == msg::outcome::ok)
          metrics::global().observe("vidline_stage_duration_seconds",
                                    {{"stage", "sampling"}, {"lane", sh->pool.name}},
                                    now - sh->st.sampling_started_at);
        metrics::global().add("vidline_stage_attempts_total",
                              {{"stage", "sampling"}, {"lane", sh->pool.name},
                               {"outcome", d.outcome}});
      }
      execute(self, sh,
            pool::step(sh->st,
                          pool::ev_sampled{d.attempt, d.outcome, d.error, d.sha256, d.bytes,
                                              d.elapsed_s, d.cold, d.product_path,
                                              sh->ctx.mono_now(), d.model, d.model_identity,
                                              d.bad_checkpoint},
                          sh->ctx.run_now()));
    },
    [self, sh](msg::checkpoint_saved& c) {
      execute(self, sh, pool::step(sh->st, pool::ev_checkpoint{c.attempt, std::move(c.c)},
                                      sh->ctx.run_now()));
    },
    [self, sh](msg::lease_grant& g) {
      execute(self, sh, pool::step(sh->st, pool::ev_grant{std::move(g), sh->ctx.mono_now()},
                                      sh->ctx.run_now()));
    },
    [self, sh](msg::latent_budget b) {
      execute(self, sh, pool::step(sh->st, pool::ev_budget{b.accepting}, sh->ctx.run_now()));
    },
    [self, sh, interval](msg::status_atom) {
      if (sh->st.current) {  // the watchdog's look at the running sampler's steps
        pool::ev_progress p{sh->st.current->attempt, 0};
        {
          std::lock_guard<std::mutex> l(sh->progress->m);
          if (sh->progress->attempt == p.attempt)
            p.step = sh->progress->step;
        }
        execute(self, sh, pool::step(sh->st, p, sh->ctx.run_now()));
      }
      observe(*sh);
      report(*sh);
      self->delayed_send(self, interval, msg::status_atom::value);
    },
    [](msg::crash_atom) -> caf::result<void> {
      throw std::runtime_error("crash requested");
    },
  };
}

} // namespace vidline::actors::pool
