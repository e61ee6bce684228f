#include "actors/planner/line_sim.hpp"

#include <chrono>
#include <cstdio>
#include <queue>
#include <random>
#include <set>
#include <variant>

#include "actors/decoder/decoder_machine.hpp"
#include "actors/pool/pool_machine.hpp"
#include "common/sha256.hpp"
#include "config/shot_graph.hpp"

namespace vidline::actors::planner {
namespace {

// -- what travels on the simulated network or fires on a timer ----------------------------

struct to_coordinator { coordinator::event e; };
struct to_pool { std::string pool; pool::event e; uint64_t epoch = 0; };  // epoch 0 = any
struct to_decoder { std::string decoder; decoder::event e; uint64_t epoch = 0; };
struct status_timer {};
using payload = std::variant<to_coordinator, to_pool, to_decoder, status_timer>;

struct queued {
  double at;
  uint64_t seq;
  payload p;
  bool operator>(const queued& o) const { return at != o.at ? at > o.at : seq > o.seq; }
};

/// The encoder of one host: prompts it has, and when each becomes ready.
struct encoder_model {
  std::map<std::string, double> ready_at;
  double free_at = 0;
};

class line {
public:
  line(coordinator::state s, const timing& t, const faults& f, const sim_options& o)
      : s_(std::move(s)), t_(t), f_(f), o_(o), rng_(f.seed) {
    for (auto& [name, p] : s_.pools) {
      pool::state ps;
      ps.pool = name;
      ps.host = p.host;
      ps.epoch = ++epochs_;
      pools_[name] = ps;
    }
    for (auto& [name, d] : s_.decoders) {
      decoder::state ds;
      ds.decoder = name;
      ds.host = d.host;
      ds.epoch = ++epochs_;
      decoders_[name] = ds;
    }
  }

  result run(std::vector<coordinator::run> rs, double max_time) {
    for (auto& [name, p] : pools_)
      send(to_coordinator{coordinator::ev_pool_status{p.status(now_)}});
    for (auto& [name, d] : decoders_)
      send(to_coordinator{coordinator::ev_decoder_status{d.status(now_)}});
    run_id_ = rs.front().id;
    jobs_ = rs.front().jobs.size();
    finals_.assign(jobs_, false);
    final_state_.assign(jobs_, no_final);
    std::vector<std::string> ids;
    for (auto& r : rs) {
      ids.push_back(r.id);
      open_.insert(r.id);
      schedule(0, to_coordinator{coordinator::ev_submit{std::move(r)}});
    }
    if (faulty())
      schedule(f_.status_interval_s, status_timer{});
    while (!q_.empty() && !done_) {
      auto ev = q_.top();
      q_.pop();
      if (ev.at > max_time)
        break;
      now_ = ev.at;
      ++res_.events;
      std::visit([&](auto& p) { on(p); }, ev.p);
      maybe_crash();
      const std::string* decoder = nullptr;
      if (auto* d = std::get_if<to_decoder>(&ev.p))
        decoder = &d->decoder;
      check(std::holds_alternative<to_coordinator>(ev.p), decoder);
    }
    // The state ends here: move the run out rather than copy a million jobs.
    for (std::size_t k = 1; k < ids.size(); ++k)
      if (auto* run = s_.find_run(ids[k]))
        res_.others.push_back(*run);
    if (auto* run = s_.find_run(run_id_))
      res_.run = std::move(*run);
    res_.end_time = now_;
    res_.finished = done_;
    return std::move(res_);
  }

private:
  bool faulty() const {
    return f_.drop > 0 || f_.duplicate > 0 || f_.max_delay_s > 0 || f_.crash > 0;
  }

  double uniform() { return std::uniform_real_distribution<double>(0, 1)(rng_); }

  void schedule(double at, payload p) { q_.push(queued{at, ++seq_, std::move(p)}); }

  /// A message on the simulated network: maybe lost, maybe twice, maybe late.
  void send(payload p) {
    if (f_.drop > 0 && uniform() < f_.drop)
      return;
    int copies = (f_.duplicate > 0 && uniform() < f_.duplicate) ? 2 : 1;
    for (int i = 0; i < copies; ++i)
      schedule(now_ + (f_.max_delay_s > 0 ? uniform() * f_.max_delay_s : 0), p);
  }

  // -- coordinator -------------------------------------------------------------------------

  void on(to_coordinator& m) {
    std::vector<coordinator::effect> fx;
    if (o_.time_steps) {
      auto t0 = std::chrono::steady_clock::now();
      fx = coordinator::step(s_, m.e, now_);
      res_.step_seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    } else {
      fx = coordinator::step(s_, m.e, now_);
    }
    if (o_.check_index)
      if (auto bad = coordinator::check_index(s_); !bad.empty())
        violation("scheduler index: " + bad);
    touched_.clear();
    for (auto& e : fx) {
      if (auto* pj = std::get_if<coordinator::fx_persist_job>(&e))
        if (pj->run_id == run_id_)
          touched_.push_back(pj->index);
      if (auto* o = std::get_if<coordinator::fx_send_sample>(&e)) {
        send(to_pool{o->order.pool, pool::ev_order{o->order}});
      } else if (auto* o = std::get_if<coordinator::fx_send_decode>(&e)) {
        send(to_decoder{o->order.decoder, decoder::ev_order{o->order}});
      } else if (auto* a = std::get_if<coordinator::fx_ack>(&e)) {
        if (a->target.rfind("pool:", 0) == 0)
          send(to_pool{a->target.substr(5), pool::ev_ack{a->attempt}});
        else
          send(to_decoder{a->target.substr(8), decoder::ev_ack{a->attempt, a->discard}});
      } else if (auto* g = std::get_if<coordinator::fx_grant>(&e)) {
        if (g->target.rfind("pool:", 0) == 0)
          send(to_pool{g->target.substr(5), pool::ev_grant{g->grant, 0}});
        else
          send(to_decoder{g->target.substr(8), decoder::ev_grant{g->grant, 0}});
      } else if (auto* fin = std::get_if<coordinator::fx_job_final>(&e)) {
        if (fin->run_id != run_id_)
          continue;
        if (fin->index >= finals_.size())
          finals_.resize(fin->index + 1, false);
        if (finals_[fin->index])
          violation("job " + std::to_string(fin->index) + " reached a final state twice");
        finals_[fin->index] = true;
      } else if (auto* mi = std::get_if<coordinator::fx_make_input>(&e)) {
        if (mi->latent) {  // a latent handed over is the source's latent, as it is
          const std::string sha = !mi->output_sha256.empty() ? mi->output_sha256
                                  : to_hex(sha256_of(mi->run_id + "/" + std::to_string(mi->source)
                                                     + "/latent"));
          send(to_coordinator{coordinator::ev_input_made{mi->run_id, mi->index, mi->name, sha, 1, ""}});
          continue;
        }
        // The coordinator's shell makes a frame input at once (a sim frame is a hash).
        std::string frame = config::graph::sim_frame(mi->output_sha256, mi->frame);
        if (frame.empty())
          frame = mi->run_id + "/" + std::to_string(mi->source) + "/" + std::to_string(mi->frame);
        send(to_coordinator{coordinator::ev_input_made{mi->run_id, mi->index, mi->name,
                                                 to_hex(sha256_of(frame)), frame.size(), ""}});
      } else if (auto* d = std::get_if<coordinator::fx_run_done>(&e)) {
        open_.erase(d->run_id);
        if (open_.empty())
          done_ = true;
      }
    }
    // A job waiting out a retry backoff is ordered at the first step after it: the live
    // coordinator ticks every status interval; here a tick comes when the first one ends.
    if (retry_tick_ && *retry_tick_ <= now_)
      retry_tick_.reset();  // it has come
    if (auto at = coordinator::next_retry(s_); at && (!retry_tick_ || *retry_tick_ > *at)) {
      retry_tick_ = *at;
      schedule(*at, to_coordinator{coordinator::ev_tick{}});
    }
  }

  // -- pools -------------------------------------------------------------------------------

  void on(to_pool& m) {
    auto it = pools_.find(m.pool);
    if (it == pools_.end() || (m.epoch != 0 && m.epoch != it->second.epoch))
      return;  // a timer of a pool that has crashed since
    // Times a worker measures are its own, on arrival.
    if (auto* s = std::get_if<pool::ev_sampled>(&m.e))
      s->mono_s = now_;
    if (auto* g = std::get_if<pool::ev_grant>(&m.e))
      g->mono_s = now_;
    auto fx = pool::step(it->second, m.e, now_);
    for (auto& e : fx) {
      if (auto* c = std::get_if<pool::fx_condition>(&e))
        condition(it->second, c->order);
      else if (auto* sm = std::get_if<pool::fx_sample>(&e))
        sample(it->second, sm->order);
      else if (std::holds_alternative<pool::fx_report>(e))
        send(to_coordinator{coordinator::ev_pool_status{it->second.status(now_)}});
      else if (auto* c = std::get_if<pool::fx_commit>(&e))
        committed("sampled", c->order.job, it->first);
    }
  }

  void condition(const pool::state& p, const msg::sample_order& o) {
    auto& enc = encoders_[p.host];
    double ready;
    auto known = enc.ready_at.find(o.job.prompt_sha256);
    if (known != enc.ready_at.end()) {
      ready = std::max(now_, known->second);
    } else {
      ready = std::max(now_, enc.free_at) + (t_.conditioning ? t_.conditioning(p.host) : 0);
      enc.free_at = ready;
      enc.ready_at[o.job.prompt_sha256] = ready;
    }
    if (ready > now_)
      span(p.pool, "conditioning", o.job.index, now_, ready);
    schedule(ready, to_pool{p.pool,
                            pool::ev_conditioned{o.attempt, true, "cond", ready - now_, ""},
                            p.epoch});
  }

  void sample(const pool::state& p, const msg::sample_order& o) {
    // Cold: its first job, its GPUs were taken meanwhile, or another model is loaded.
    auto w = warm_.find({p.pool, p.epoch});
    bool cold = w == warm_.end() || w->second != o.job.model;
    warm_[{p.pool, p.epoch}] = o.job.model;
    // Its GPUs are taken from the pools sharing them: their models go.
    for (auto& other : s_.pools.at(p.pool).conflicts)
      if (auto q = pools_.find(other); q != pools_.end())
        warm_.erase({other, q->second.epoch});
    auto st = t_.sample(s_.pools.at(p.pool).kind, o.job, cold);
    double end = now_ + st.seconds;
    span(p.pool, "sampling", o.job.index, now_, end);
    pool::ev_sampled ev;
    ev.attempt = o.attempt;
    ev.elapsed_s = st.seconds;
    ev.cold = cold;
    if (st.out_of_memory) {
      ev.outcome = msg::outcome::capacity;
      ev.error = "out of memory (profile)";
    } else {
      ev.outcome = msg::outcome::ok;
      ev.sha256 = fake_digest(o.job);
      ev.bytes = t_.latent_bytes ? t_.latent_bytes(o.job) : 0;
    }
    schedule(end, to_pool{p.pool, ev, p.epoch});
  }

  static std::string fake_digest(const msg::job_spec& j) {
    char buf[65];
    std::snprintf(buf, sizeof(buf), "%064llx", static_cast<unsigned long long>(j.seed));
    return buf;
  }

  // -- decoders ----------------------------------------------------------------------------

  void on(to_decoder& m) {
    auto it = decoders_.find(m.decoder);
    if (it == decoders_.end() || (m.epoch != 0 && m.epoch != it->second.epoch))
      return;
    auto& d = it->second;
    if (auto* dd = std::get_if<decoder::ev_decoded>(&m.e))
      dd->mono_s = now_;
    if (auto* g = std::get_if<decoder::ev_grant>(&m.e))
      g->mono_s = now_;
    auto fx = decoder::step(d, m.e, now_);
    const auto& kind = s_.decoders.at(m.decoder).kind;
    for (auto& e : fx) {
      if (auto* f = std::get_if<decoder::fx_fetch>(&e)) {
        double secs = t_.handoff_between
                        ? t_.handoff_between(f->order.source_host, d.host, kind,
                                             f->order.latent_bytes)
                        : t_.handoff ? t_.handoff(kind, f->order.latent_bytes) : 0;
        double end = now_ + secs;
        span(d.decoder, "handoff", f->order.job.index, now_, end);
        schedule(end, to_decoder{d.decoder, decoder::ev_fetched{f->order.attempt, "ok", ""},
                                 d.epoch});
      } else if (auto* dc = std::get_if<decoder::fx_decode>(&e)) {
        // A decoder on a pool's GPU unloads the pool's model.
        for (auto& other : s_.decoders.at(m.decoder).shares_gpu_with)
          if (auto q = pools_.find(other); q != pools_.end())
            warm_.erase({other, q->second.epoch});
        double secs = t_.decode(kind, dc->order.job);
        span(d.decoder, "decode", dc->order.job.index, now_, now_ + secs);
        decoder::ev_decoded ev{dc->order.attempt, "ok", "", "out", "", secs, "out", 0};
        schedule(now_ + secs, to_decoder{d.decoder, ev, d.epoch});
      } else if (std::holds_alternative<decoder::fx_report>(e)) {
        send(to_coordinator{coordinator::ev_decoder_status{d.status(now_)}});
      } else if (auto* c = std::get_if<decoder::fx_commit>(&e)) {
        committed("decoded", c->order.job, m.decoder);
      } else if (auto* x = std::get_if<decoder::fx_discard>(&e)) {
        if (x->published)
          uncommitted("decoded", x->index);
      }
    }
  }

  // -- periodic status and crashes (fault mode) --------------------------------------------

  void on(status_timer&) {
    for (auto& [name, p] : pools_)
      send(to_coordinator{coordinator::ev_pool_status{p.status(now_)}});
    for (auto& [name, d] : decoders_)
      send(to_coordinator{coordinator::ev_decoder_status{d.status(now_)}});
    send(to_coordinator{coordinator::ev_tick{}});
    schedule(now_ + f_.status_interval_s, status_timer{});
  }

  void maybe_crash() {
    if (f_.crash <= 0 || uniform() >= f_.crash)
      return;
    std::size_t n = pools_.size() + decoders_.size();
    std::size_t k = std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_);
    if (k < pools_.size()) {
      auto it = std::next(pools_.begin(), static_cast<long>(k));
      pool::state fresh;
      fresh.pool = it->second.pool;
      fresh.host = it->second.host;
      fresh.epoch = ++epochs_;
      it->second = fresh;
    } else {
      auto it = std::next(decoders_.begin(), static_cast<long>(k - pools_.size()));
      // A video published whose result dies with the decoder is made again: the attempt
      // the crash interrupted.
      for (auto& r : it->second.unacked)
        if (r.outcome == msg::outcome::ok)
          ++crash_lost_[r.index];
      decoder::state fresh;
      fresh.decoder = it->second.decoder;
      fresh.host = it->second.host;
      fresh.epoch = ++epochs_;
      it->second = fresh;
    }
  }

  // -- invariants --------------------------------------------------------------------------

  /// After an event: the decoder it reached (a decoder changes only on its own events, or
  /// fresh after a crash), the attempt counter, and the jobs the coordinator changed.
  void check(bool coordinator_stepped, const std::string* decoder) {
    if (decoder != nullptr)
      if (auto it = decoders_.find(*decoder); it != decoders_.end())
        check_decoder(it->first, it->second);
    if (s_.next_attempt < last_next_attempt_)
      violation("attempt counter went backwards");
    last_next_attempt_ = s_.next_attempt;
    auto* r = s_.find_run(run_id_);
    if (r == nullptr)
      return;
    if (r->jobs.size() <= o_.full_check_jobs) {
      for (auto& j : r->jobs)
        check_job(j);
    } else if (coordinator_stepped) {
      for (uint32_t i : touched_)
        if (i < r->jobs.size())
          check_job(r->jobs[i]);
    }
  }

  void check_decoder(const std::string& name, const decoder::state& d) {
    if (d.pending() > 1)
      violation("decoder " + name + " has " + std::to_string(d.pending()) + " pending");
    if (d.holding.size() > decoder::state::capacity)
      violation("decoder " + name + " holds " + std::to_string(d.holding.size()));
  }

  void check_job(const coordinator::job& j) {
    bool final_now = j.state == coordinator::job_state::succeeded
                     || j.state == coordinator::job_state::failed;
    if (j.spec.index >= final_state_.size())
      final_state_.resize(j.spec.index + 1, no_final);
    auto& was = final_state_[j.spec.index];
    if (was != no_final && (!final_now || was != static_cast<uint8_t>(j.state)))
      violation("job " + std::to_string(j.spec.index) + " left its final state");
    if (final_now)
      was = static_cast<uint8_t>(j.state);
  }

  /// A stage's product was published (a ledger line): a job decoded at most once, beyond
  /// the attempts a crash interrupted after their commit (their results lost with them).
  void committed(const char* stage, const msg::job_spec& spec, const std::string& worker) {
    if (spec.run_id != run_id_)
      return;  // the invariants are checked on the first run
    const uint32_t job = spec.index;
    auto& n = commits_[{stage, job}];
    ++n;
    if (std::string(stage) == "decoded" && n - crash_lost_[job] > 1)
      violation("job " + std::to_string(job) + " decoded twice (the second by " + worker + ")");
  }
  void uncommitted(const char* stage, uint32_t job) { --commits_[{stage, job}]; }

  void violation(std::string what) {
    if (res_.violations.size() < 20)
      res_.violations.push_back("t=" + std::to_string(now_) + ": " + std::move(what));
  }

  void span(const std::string& lane, const char* stage, uint32_t job, double a, double b) {
    if (!o_.record_spans)
      return;
    res_.spans.push_back(stage_span{lane, stage, job, a, b});
  }

  coordinator::state s_;
  const timing& t_;
  faults f_;
  sim_options o_;
  std::mt19937_64 rng_;
  std::priority_queue<queued, std::vector<queued>, std::greater<>> q_;
  uint64_t seq_ = 0;
  uint64_t epochs_ = 0;
  double now_ = 0;
  std::optional<double> retry_tick_;  ///< a tick scheduled for the end of a retry backoff
  std::map<std::string, pool::state> pools_;
  std::map<std::string, decoder::state> decoders_;
  std::map<std::string, encoder_model> encoders_;
  /// (pool, epoch) -> the model it holds loaded.
  std::map<std::pair<std::string, uint64_t>, std::string> warm_;
  std::string run_id_;
  std::set<std::string> open_;  ///< runs submitted and not yet done
  std::size_t jobs_ = 0;
  bool done_ = false;
  // Per job, by index: a byte each rather than a tree node (a plan may hold a million jobs).
  std::vector<bool> finals_;                 ///< reached a final state (fx_job_final)
  static constexpr uint8_t no_final = 0xff;
  std::vector<uint8_t> final_state_;         ///< its final job_state, or no_final
  uint64_t last_next_attempt_ = 0;
  std::vector<uint32_t> touched_;   ///< jobs the last coordinator step persisted
  std::map<std::pair<std::string, uint32_t>, int> commits_;  ///< (stage, job) -> published
  std::map<uint32_t, int> crash_lost_;  ///< job -> decode results lost with a crashed decoder
  result res_;
};

} // namespace

result simulate(coordinator::state s, coordinator::run r, const timing& t, const faults& f,
                double max_time, const sim_options& o) {
  line l(std::move(s), t, f, o);
  std::vector<coordinator::run> rs;
  rs.push_back(std::move(r));
  return l.run(std::move(rs), max_time);
}

result simulate_runs(coordinator::state s, std::vector<coordinator::run> rs, const timing& t,
                     const faults& f, double max_time, const sim_options& o) {
  if (rs.empty())
    return result{};
  line l(std::move(s), t, f, o);
  return l.run(std::move(rs), max_time);
}

} // namespace vidline::actors::planner
