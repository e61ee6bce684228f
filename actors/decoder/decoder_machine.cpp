#include "actors/decoder/decoder_machine.hpp"

#include <algorithm>

namespace vidline::decoding {
namespace {

/// How many finished attempts are remembered to ignore a resent order for them.
constexpr std::size_t recent_done_kept = 256;

held* find(state& s, uint64_t attempt) {
  for (auto& h : s.holding)
    if (h.order.attempt == attempt)
      return &h;
  return nullptr;
}

bool known(const state& s, uint64_t attempt) {
  for (auto& h : s.holding)
    if (h.order.attempt == attempt)
      return true;
  for (auto& r : s.unacked)
    if (r.attempt == attempt)
      return true;
  return std::find(s.recent_done.begin(), s.recent_done.end(), attempt) != s.recent_done.end();
}

void remember_done(state& s, uint64_t attempt) {
  s.recent_done.push_back(attempt);
  while (s.recent_done.size() > recent_done_kept)
    s.recent_done.pop_front();
}

msg::decode_result result_of(const state& s, const held& h) {
  msg::decode_result r;
  r.decoder = s.decoder;
  r.host = s.host;
  r.attempt = h.order.attempt;
  r.run_id = h.order.job.run_id;
  r.index = h.order.job.index;
  r.handoff_s = h.handoff_s;
  return r;
}

void finish(state& s, uint64_t attempt, msg::decode_result r) {
  s.holding.erase(std::remove_if(s.holding.begin(), s.holding.end(),
                                 [&](const held& h) { return h.order.attempt == attempt; }),
                  s.holding.end());
  s.unacked.push_back(std::move(r));
  remember_done(s, attempt);
}

/// Starts decoding the oldest fetched latent when nothing is decoding.
void maybe_start(state& s, std::vector<effect>& fx) {
  for (auto& h : s.holding)
    if (h.at == phase::decoding)
      return;
  for (auto& h : s.holding)
    if (h.at == phase::ready) {
      h.at = phase::decoding;
      fx.push_back(fx_decode{h.order});
      return;
    }
}

} // namespace

uint32_t state::credits() const {
  return holding.size() >= capacity ? 0 : capacity - static_cast<uint32_t>(holding.size());
}

uint32_t state::pending() const {
  // One held latent is the decoder's current one (decoding, or fetching to decode next);
  // anything else held is waiting behind it.
  return holding.empty() ? 0 : static_cast<uint32_t>(holding.size()) - 1;
}

msg::decoder_status state::status() {
  msg::decoder_status st;
  st.seq = ++status_seq;
  st.decoder = decoder;
  st.host = host;
  st.epoch = epoch;
  st.capacity = capacity;
  for (auto& h : holding)
    st.holding.push_back(h.order.attempt);
  st.credits = credits();
  st.unacked = unacked;
  return st;
}

std::vector<effect> step(state& s, const event& e, double now) {
  std::vector<effect> fx;
  if (auto* o = std::get_if<ev_order>(&e)) {
    if (known(s, o->order.attempt))
      return fx;  // a resent order: the status already tells where it is
    if (s.credits() == 0) {
      ++s.refused_orders;
      fx.push_back(fx_log{3, "order " + std::to_string(o->order.attempt)
                               + " came without a credit; refused"});
      fx.push_back(fx_report{});
      return fx;
    }
    s.holding.push_back(held{o->order, phase::fetching, now, -1, 0});
    fx.push_back(fx_fetch{o->order});
    fx.push_back(fx_report{});
  } else if (auto* f = std::get_if<ev_fetched>(&e)) {
    auto* h = find(s, f->attempt);
    if (h == nullptr || h->at != phase::fetching)
      return fx;
    h->fetched_at = now;
    h->handoff_s = now - h->ordered_at;
    if (f->outcome == msg::outcome::ok) {
      h->at = phase::ready;
      maybe_start(s, fx);
    } else {
      auto r = result_of(s, *h);
      r.outcome = f->outcome;
      r.error = f->error;
      r.stage = "handoff";
      finish(s, f->attempt, std::move(r));
      fx.push_back(fx_report{});
    }
  } else if (auto* d = std::get_if<ev_decoded>(&e)) {
    auto* h = find(s, d->attempt);
    if (h == nullptr || h->at != phase::decoding)
      return fx;
    auto r = result_of(s, *h);
    r.outcome = d->outcome;
    r.error = d->error;
    r.stage = "decode";
    r.output = d->output;
    r.output_sha256 = d->output_sha256;
    r.decode_s = d->decode_s;
    finish(s, d->attempt, std::move(r));
    maybe_start(s, fx);
    fx.push_back(fx_report{});
  } else if (auto* a = std::get_if<ev_ack>(&e)) {
    s.unacked.erase(std::remove_if(s.unacked.begin(), s.unacked.end(),
                                   [&](const msg::decode_result& r) {
                                     return r.attempt == a->attempt;
                                   }),
                    s.unacked.end());
  }
  return fx;
}

} // namespace vidline::decoding
