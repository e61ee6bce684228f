#include "actors/pool/pool_machine.hpp"

#include <algorithm>

namespace vidline::pooling {
namespace {

constexpr std::size_t recent_done_kept = 256;

bool known(const state& s, uint64_t attempt) {
  if (s.current && s.current->attempt == attempt)
    return true;
  for (auto& r : s.unacked)
    if (r.attempt == attempt)
      return true;
  return std::find(s.recent_done.begin(), s.recent_done.end(), attempt) != s.recent_done.end();
}

msg::sample_result result_of(const state& s) {
  msg::sample_result r;
  r.pool = s.pool;
  r.host = s.host;
  r.attempt = s.current->attempt;
  r.run_id = s.current->job.run_id;
  r.index = s.current->job.index;
  r.conditioning_s = s.conditioning_s;
  return r;
}

void finish(state& s, msg::sample_result r) {
  s.recent_done.push_back(r.attempt);
  while (s.recent_done.size() > recent_done_kept)
    s.recent_done.pop_front();
  s.unacked.push_back(std::move(r));
  s.current.reset();
  s.at = phase::idle;
  s.conditioning_s = 0;
}

} // namespace

msg::pool_status state::status() {
  msg::pool_status st;
  st.seq = ++status_seq;
  st.pool = pool;
  st.host = host;
  st.epoch = epoch;
  st.busy_attempt = current ? current->attempt : 0;
  st.unacked = unacked;
  st.accepting = accepting;
  return st;
}

std::vector<effect> step(state& s, const event& e, double) {
  std::vector<effect> fx;
  if (auto* o = std::get_if<ev_order>(&e)) {
    if (known(s, o->order.attempt))
      return fx;
    if (s.current) {
      ++s.refused_orders;
      fx.push_back(fx_log{3, "order " + std::to_string(o->order.attempt) + " refused: busy with "
                               + std::to_string(s.current->attempt)});
      fx.push_back(fx_report{});
      return fx;
    }
    s.current = o->order;
    s.at = phase::conditioning;
    fx.push_back(fx_condition{o->order});
    fx.push_back(fx_report{});
  } else if (auto* c = std::get_if<ev_conditioned>(&e)) {
    if (!s.current || s.current->attempt != c->attempt || s.at != phase::conditioning)
      return fx;
    if (!c->ok) {
      auto r = result_of(s);
      r.outcome = msg::outcome::transient;
      r.error = "conditioning failed: " + c->error;
      finish(s, std::move(r));
      fx.push_back(fx_report{});
      return fx;
    }
    s.conditioning_s = c->encode_s;
    s.at = phase::sampling;
    fx.push_back(fx_sample{*s.current, c->path});
  } else if (auto* d = std::get_if<ev_sampled>(&e)) {
    if (!s.current || s.current->attempt != d->attempt || s.at != phase::sampling)
      return fx;
    auto r = result_of(s);
    r.outcome = d->outcome;
    r.error = d->error;
    r.latent_sha256 = d->sha256;
    r.latent_bytes = d->bytes;
    r.sampling_s = d->elapsed_s;
    r.cold = d->cold;
    finish(s, std::move(r));
    fx.push_back(fx_report{});
  } else if (auto* a = std::get_if<ev_ack>(&e)) {
    s.unacked.erase(std::remove_if(s.unacked.begin(), s.unacked.end(),
                                   [&](const msg::sample_result& r) {
                                     return r.attempt == a->attempt;
                                   }),
                    s.unacked.end());
  }
  return fx;
}

} // namespace vidline::pooling
