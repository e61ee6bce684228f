// bench_plan's exhaustive search: every schedule the model allows, depth first with
// line_sim, for the best makespan.

#include <algorithm>
#include <optional>
#include <set>

#include "bench/plan/plan.hpp"

namespace vidline::bench::plan_bench {

namespace {

/// A dispatch policy that replays a path of choices and records the choices it was offered
/// after the path's end (taking the first), so that a depth-first search can enumerate every
/// schedule the line allows, each with line_sim (the scheduler's, pools' and decoders'
/// machines, unchanged).
///
/// At each dispatch decision it offers: the lowest queued job (the run's jobs are alike) to
/// each free pool that may take it, or to none (the free pools idle until the next event).
/// Permutations are cut: pools declined or passed over at one instant are not offered again
/// at that instant. Decoders: when the mode has more than one, each decoder that can take
/// the latent now, or none (wait) when some decoder cannot take it now; with one decoder, earliest-sampled-first without idling is optimal for
/// identical decodes and is not branched on. A branch whose lower bound reaches the best
/// makespan found is cut (pruned: no more choices recorded, its end ignored).
class search_policy : public actors::coordinator::dispatch_policy {
public:
  search_policy(std::vector<int> path, double incumbent, double min_sample_s,
                double min_tail_s, double decode_rate, std::size_t decoders)
      : path_(std::move(path)), incumbent_(incumbent), min_sample_s_(min_sample_s),
        min_tail_s_(min_tail_s), decode_rate_(decode_rate), decoders_(decoders) {}
  const char* name() const override { return "search"; }

  std::optional<actors::coordinator::assignment> next(const actors::coordinator::dispatch_view& v) const override {
    if (pruned_ || v.queue.queued.empty())
      return std::nullopt;
    if (bound(v.r, v.now) >= incumbent_ - 1e-6) {
      pruned_ = true;
      return std::nullopt;
    }
    if (v.now != declined_at_) {
      declined_at_ = v.now;
      declined_.clear();
    }
    const auto& head = v.r.jobs[*v.queue.queued.begin()];
    std::vector<uint32_t> offer;
    for (uint32_t id : v.free)
      if (!declined_.count(id) && actors::coordinator::pool_may_take(v.pool(id), head))
        offer.push_back(id);
    if (offer.empty())
      return std::nullopt;
    int c = choose(offer.size() + 1);
    if (c == static_cast<int>(offer.size())) {  // none: these pools idle until later
      declined_.insert(offer.begin(), offer.end());
      return std::nullopt;
    }
    for (int k = 0; k < c; ++k)  // passed over: taking them after this one is a permutation
      declined_.insert(offer[static_cast<std::size_t>(k)]);
    return actors::coordinator::assignment{*v.queue.queued.begin(), offer[static_cast<std::size_t>(c)]};
  }

  actors::coordinator::decoder_view* pick_decoder(const actors::coordinator::state& s, const actors::coordinator::run& r,
                                    const actors::coordinator::job& j,
                                    const std::vector<actors::coordinator::decoder_view*>& decoders,
                                    double now) const override {
    if (decoders_ <= 1 || pruned_)
      return dispatch_policy::pick_decoder(s, r, j, decoders, now);
    // Each decoder that can take it now, or none: waiting for one that cannot (a send now
    // dominates a send later to the same decoder, so waiting is offered only then).
    std::vector<actors::coordinator::decoder_view*> offer;
    bool some_cannot = false;
    for (auto* d : decoders) {
      if (!d->alive)
        continue;
      if (d->credits() > 0 && !actors::coordinator::decoder_blocked(s, *d))
        offer.push_back(d);
      else
        some_cannot = true;
    }
    if (offer.empty())
      return nullptr;
    int c = choose(offer.size() + (some_cannot ? 1 : 0));
    return c == static_cast<int>(offer.size()) ? nullptr : offer[static_cast<std::size_t>(c)];
  }

  /// The choices made (the path, then the first option at each later decision).
  std::vector<int> taken;
  /// The number of options at each decision of `taken`.
  std::vector<int> arity;

private:
  int choose(std::size_t options) const {
    std::size_t k = taken.size();
    int c = k < path_.size() ? path_[k] : 0;
    const_cast<search_policy*>(this)->taken.push_back(c);
    const_cast<search_policy*>(this)->arity.push_back(static_cast<int>(options));
    return c;
  }

  /// No schedule from here ends sooner: a queued job still needs sampling (at least the
  /// fastest warm time) and a handoff and decode; and every job not yet decoding needs a
  /// decode, at most at the decoders' summed rate.
  double bound(const actors::coordinator::run& r, double now) const {
    std::size_t queued = 0, undecoded = 0;
    for (auto& j : r.jobs) {
      if (j.state == actors::coordinator::job_state::queued)
        ++queued;
      if (j.state == actors::coordinator::job_state::queued || j.state == actors::coordinator::job_state::sampling
          || j.state == actors::coordinator::job_state::sampled)
        ++undecoded;
    }
    double b = now;
    if (queued > 0)
      b = std::max(b, now + min_sample_s_ + min_tail_s_);
    if (undecoded > 0)
      b = std::max(b, now + static_cast<double>(undecoded) / decode_rate_);
    return b;
  }

  std::vector<int> path_;
  double incumbent_;
  double min_sample_s_, min_tail_s_, decode_rate_;
  std::size_t decoders_;
  mutable bool pruned_ = false;
  mutable double declined_at_ = -1;
  mutable std::set<uint32_t> declined_;
};

} // namespace

/// Every schedule of `count` jobs of one size on every pool and decoder of the cluster
/// (mode auto's resources), searched depth first with line_sim.
search_result best_schedule(const setup& c, uint32_t w, uint32_t h, uint32_t secs,
                            uint32_t count, uint64_t max_schedules) {
  search_result out;
  const auto& prof = c.est->profile();
  config::profile::job_size size{w, h, secs};
  msg::job_spec spec;
  spec.width = w;
  spec.height = h;
  spec.seconds = secs;
  double min_sample = 1e300, min_tail = 1e300, decode_rate = 0;
  for (auto& p : c.cluster.pools)
    if (prof.fits(p.profile_key, size))
      min_sample = std::min(min_sample,
                            prof.sampling(p.profile_key, size, config::profile::model_state::warm).s);
  for (auto& [name, d] : c.state.decoders) {
    decode_rate += 1 / c.est->decode(d, spec);
    for (auto& p : c.cluster.pools)
      min_tail = std::min(min_tail, c.est->handoff(p.host, d, spec) + c.est->decode(d, spec));
  }
  std::vector<std::vector<int>> stack{{}};
  while (!stack.empty()) {
    if (out.schedules >= max_schedules) {
      out.complete = false;
      break;
    }
    auto path = std::move(stack.back());
    stack.pop_back();
    auto s = c.state;
    auto pol = std::make_shared<search_policy>(path, out.best, min_sample, min_tail,
                                               decode_rate, c.state.decoders.size());
    s.mode_policy[actors::coordinator::auto_mode] = pol;
    actors::coordinator::run r;
    r.id = "search";
    r.mode = actors::coordinator::auto_mode;
    for (uint32_t i = 0; i < count; ++i) {
      actors::coordinator::job j;
      j.spec = msg::job_spec{r.id, i, 987654321123ull + i, w, h, secs, "p", "p-sha", ""};
      r.jobs.push_back(std::move(j));
    }
    double limit = out.best < 1e300 ? out.best : 1e12;
    auto res = actors::planner::simulate(s, std::move(r), actors::planner::line_timing(*c.est), {}, limit);
    ++out.schedules;
    auto sum = actors::coordinator::summarize(res.run);
    if (res.finished && sum.succeeded == count && sum.makespan_s < out.best - 1e-6) {
      out.best = sum.makespan_s;
      out.jobs_per_pool.clear();
      for (auto& j : res.run.jobs)
        ++out.jobs_per_pool[j.pool];
    }
    // Siblings of every decision taken after the replayed path.
    for (std::size_t k = path.size(); k < pol->arity.size(); ++k)
      for (int alt = pol->arity[k] - 1; alt >= 1; --alt) {
        std::vector<int> child(pol->taken.begin(), pol->taken.begin() + static_cast<long>(k));
        child.push_back(alt);
        stack.push_back(std::move(child));
      }
  }
  return out;
}

} // namespace vidline::bench::plan_bench
