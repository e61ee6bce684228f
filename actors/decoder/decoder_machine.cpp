#include "actors/decoder/decoder_machine.hpp"

#include <algorithm>

namespace vidline::actors::decoder {
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

double unix_of(const state& s, double run_s) { return run_s < 0 ? 0 : run_s * s.time_scale; }

/// The result of `h`, ending at run-clock `now`, stamped with when its stages ran.
msg::decode_result result_of(const state& s, const held& h, double now) {
  msg::decode_result r;
  r.decoder = s.decoder;
  r.host = s.host;
  r.attempt = h.order.attempt;
  r.run_id = h.order.job.run_id;
  r.index = h.order.job.index;
  r.handoff_s = h.handoff_s;
  r.start_unix_s = unix_of(s, h.ordered_at);
  r.fetched_unix_s = unix_of(s, h.fetched_at);
  r.decode_start_unix_s = unix_of(s, h.decode_started_at);
  r.end_unix_s = unix_of(s, now);
  r.latent_sha256 = h.order.latent_sha256;
  r.latent_bytes = h.order.latent_bytes;
  r.latent_host = h.order.source_host;
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
void maybe_start(state& s, std::vector<effect>& fx, double now) {
  for (auto& h : s.holding)
    if (h.at == phase::decoding)
      return;
  for (auto& h : s.holding)
    if (h.at == phase::ready) {
      h.at = phase::decoding;
      h.decode_started_at = now;
      fx.push_back(fx_decode{h.order});
      return;
    }
}

bool has(const std::vector<uint64_t>& v, uint64_t a) {
  return std::find(v.begin(), v.end(), a) != v.end();
}

/// Drops a held attempt without a result: the coordinator ended it before a product.
void drop(state& s, uint64_t attempt, std::vector<effect>& fx) {
  s.holding.erase(std::remove_if(s.holding.begin(), s.holding.end(),
                                 [&](const held& h) { return h.order.attempt == attempt; }),
                  s.holding.end());
  remember_done(s, attempt);
  ++s.dropped;
  fx.push_back(fx_log{3, "attempt " + std::to_string(attempt)
                           + " dropped: the coordinator gave it to another decoder"});
}

/// Publishes a confirmed product.
void commit(state& s, held& h, std::vector<effect>& fx) {
  fx.push_back(fx_commit{h.order, h.staged, h.made.output, h.made.output_sha256,
                         h.made.handoff_s, h.made.decode_s, h.made});
  const uint64_t attempt = h.order.attempt;
  finish(s, attempt, h.made);
}

/// Removes a product whose attempt the coordinator ended; the result says so.
void discard(state& s, held& h, std::vector<effect>& fx) {
  ++s.fenced;
  const bool made_before = h.staged == h.made.output;  // reused: not this attempt's
  if (!made_before)
    fx.push_back(fx_discard{h.order.job.run_id, h.order.job.index, h.order.attempt, h.staged,
                            false, h.made.output_sha256});
  fx.push_back(fx_log{3, "attempt " + std::to_string(h.order.attempt) + " of "
                           + h.order.job.run_id + "/" + std::to_string(h.order.job.index)
                           + ": its lease ended and the coordinator gave the job to another "
                             "decoder: the video is removed, not published"});
  auto r = h.made;
  r.outcome = msg::outcome::fenced;
  r.error = "lease ended: the stage went to another attempt";
  r.output.clear();
  r.output_sha256.clear();
  const uint64_t attempt = h.order.attempt;
  finish(s, attempt, std::move(r));
}

} // namespace

void sent_reports::note(uint64_t seq, double mono_s) {
  sent.emplace_back(seq, mono_s);
  while (sent.size() > 64)
    sent.pop_front();
}

double sent_reports::when(uint64_t seq) const {
  for (auto& [q, t] : sent)
    if (q == seq)
      return t;
  return -1;
}

uint32_t state::credits() const {
  return holding.size() >= capacity ? 0 : capacity - static_cast<uint32_t>(holding.size());
}

uint32_t state::pending() const {
  // One held latent is the decoder's current one (decoding, or fetching to decode next);
  // anything else held is waiting behind it.
  return holding.empty() ? 0 : static_cast<uint32_t>(holding.size()) - 1;
}

msg::decoder_status state::status(double mono_s) {
  msg::decoder_status st;
  st.seq = ++status_seq;
  if (mono_s >= 0)
    reports.note(st.seq, mono_s);
  st.pending = pending();
  st.fenced = fenced;
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
    s.holding.push_back(held{o->order, phase::fetching, now, -1, 0, -1, false, {}, "", -1});
    fx.push_back(fx_fetch{o->order});
    fx.push_back(fx_report{});
  } else if (auto* f = std::get_if<ev_fetched>(&e)) {
    auto* h = find(s, f->attempt);
    if (h == nullptr || h->at != phase::fetching)
      return fx;
    if (h->ended) {
      drop(s, f->attempt, fx);
      maybe_start(s, fx, now);
      fx.push_back(fx_report{});
      return fx;
    }
    h->fetched_at = now;
    h->handoff_s = now - h->ordered_at;
    if (f->outcome == msg::outcome::ok) {
      h->at = phase::ready;
      maybe_start(s, fx, now);
    } else {
      auto r = result_of(s, *h, now);
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
    auto r = result_of(s, *h, now);
    r.outcome = d->outcome;
    r.error = d->error;
    r.stage = "decode";
    r.output = d->output;
    r.output_sha256 = d->output_sha256;
    r.decode_s = d->decode_s;
    if (r.outcome != msg::outcome::ok) {
      finish(s, d->attempt, std::move(r));  // no product: nothing to fence
    } else {
      h->at = phase::confirming;
      h->made = std::move(r);
      h->staged = d->staged.empty() ? d->output : d->staged;
      if (h->ended) {
        discard(s, *h, fx);
      } else if (d->mono_s < h->lease_until) {
        commit(s, *h, fx);
      } else {
        // Paused, or cut off from the coordinator: it may have given the job to another
        // decoder. Its answer to this report decides.
        fx.push_back(fx_log{3, "attempt " + std::to_string(d->attempt)
                                 + " decoded after its lease ran out: asking the coordinator "
                                   "before publishing"});
      }
    }
    maybe_start(s, fx, now);
    fx.push_back(fx_report{});
  } else if (auto* a = std::get_if<ev_ack>(&e)) {
    for (auto& r : s.unacked) {
      if (r.attempt != a->attempt || r.outcome != msg::outcome::ok)
        continue;
      if (a->discard) {
        // Published before the coordinator heard of it (or before this decoder restarted),
        // and another attempt's video won.
        ++s.fenced;
        ++s.retracted;
        fx.push_back(fx_discard{r.run_id, r.index, r.attempt, r.output, true, r.output_sha256});
        fx.push_back(fx_log{3, "attempt " + std::to_string(r.attempt) + " of " + r.run_id + "/"
                                 + std::to_string(r.index)
                                 + ": another decoder's video was published first: "
                                   "this one is removed with its index line"});
      }
      fx.push_back(fx_forget{r.attempt});  // a published result: its kept copy goes
    }
    s.unacked.erase(std::remove_if(s.unacked.begin(), s.unacked.end(),
                                   [&](const msg::decode_result& r) {
                                     return r.attempt == a->attempt;
                                   }),
                    s.unacked.end());
  } else if (auto* v = std::get_if<ev_recovered>(&e)) {
    for (auto& r : v->results) {
      if (r.outcome != msg::outcome::ok || known(s, r.attempt))
        continue;
      s.unacked.push_back(r);
      remember_done(s, r.attempt);
      ++s.recovered;
      fx.push_back(fx_log{3, "attempt " + std::to_string(r.attempt) + " of " + r.run_id + "/"
                               + std::to_string(r.index) + ": its video was published before "
                               "a restart and never acknowledged: reported again"});
    }
    if (!v->results.empty())
      fx.push_back(fx_report{});
  } else if (auto* g = std::get_if<ev_grant>(&e)) {
    if (g->grant.epoch != s.epoch)
      return fx;
    // Renewed from when the report was sent: the coordinator's lease started no earlier.
    const double sent = s.reports.when(g->grant.seq);
    const double until = sent < 0 ? -1 : sent + g->grant.lease_ms / 1000.0 * (1 - lease_margin);
    std::vector<uint64_t> gone;
    for (auto& h : s.holding) {
      const uint64_t a = h.order.attempt;
      if (has(g->grant.ended, a)) {
        h.ended = true;
        if (h.at == phase::ready || h.at == phase::fetching)
          gone.push_back(a);  // a fetch still running ends in ev_fetched, dropped there
        continue;
      }
      if (has(g->grant.current, a) && until > h.lease_until)
        h.lease_until = until;
    }
    for (uint64_t a : gone)
      if (auto* h = find(s, a); h != nullptr && h->at == phase::ready)
        drop(s, a, fx);
    bool changed = !gone.empty();
    for (std::size_t i = 0; i < s.holding.size();) {
      auto& h = s.holding[i];
      if (h.at != phase::confirming) {
        ++i;
        continue;
      }
      if (h.ended) {
        discard(s, h, fx);  // erases it
        changed = true;
      } else if (g->mono_s < h.lease_until) {
        commit(s, h, fx);  // erases it
        changed = true;
      } else {
        ++i;
      }
    }
    if (changed) {
      maybe_start(s, fx, now);
      fx.push_back(fx_report{});
    }
  }
  return fx;
}

} // namespace vidline::actors::decoder
