// The stepper (stepper.hpp): hosts up and down, pools and decoders lost, leases.

#include "actors/coordinator/stepper.hpp"
#include "actors/coordinator/index.hpp"

#include <type_traits>

namespace vidline::actors::coordinator {

using namespace detail;  // the index's mutators (index.hpp)

void stepper::on(const ev_peer& e) {
  s.hosts_up[e.host] = e.up;
  for (auto& [name, p] : s.pools)
    if (p.host == e.host)
      touch(name);
  if (e.up) {
    s.host_down_since.erase(e.host);
    end_checkpoint_waits(e.host);
    for (auto& o : s.outages)
      if (o.host == e.host && o.to < 0)
        o.to = now;
    return;
  }
  if (s.host_down_since.emplace(e.host, now).second) {
    s.outages.push_back(outage{e.host, now, -1});
    if (s.outages.size() > max_outages_kept)
      s.outages.pop_front();
  }
  log(3, "host " + e.host + " is down");
  for (auto& [name, p] : s.pools)
    if (p.host == e.host)
      pool_lost(p, "host " + e.host + " went down", true);
  for (auto& [name, d] : s.decoders)
    if (d.host == e.host)
      decoder_lost(d, "host " + e.host + " went down", true);
}

void stepper::end_checkpoint_waits(const std::string& host) {
  std::vector<job*> due;
  for (auto& [t, rp, ji] : s.idx.backoff) {
    auto& j = s.runs[rp].jobs[ji];
    if (j.state == job_state::queued && j.retry_streak == 0 && !j.checkpoints.empty()
        && j.checkpoints.back().ref.host == host)
      due.push_back(&j);
  }
  for (auto* j : due)
    set_retry_at(s, *j, -1);
}

void stepper::pool_lost(pool_view& p, const std::string& why, bool leased) {
  p.alive = false;
  p.reported_busy = 0;
  p.warm = false;
  touch(p.name);
  if (!p.assigned) {
    p.ordered_at = -1;
    return;
  }
  auto* j = s.find_job(p.assigned->first, p.assigned->second);
  if (leased && j != nullptr && j->state == job_state::sampling && j->pool == p.name
      && mono < j->lease_until) {
    log(2, "job " + job_name(*j) + " stays with pool " + p.name + " until its lease ends in "
             + std::to_string(j->lease_until - mono) + " s: " + why);
    return;
  }
  p.ordered_at = -1;
  p.assigned.reset();
  touch(p.name);
  if (j != nullptr && j->state == job_state::sampling && j->pool == p.name) {
    refund_lost(*j, j->sample_attempts);
    requeue_sampling(*j, "pool " + p.name + ": " + why);
  }
}

void stepper::decoder_lost(decoder_view& d, const std::string& why, bool leased) {
  d.alive = false;
  std::set<uint64_t> lost = d.holding;
  for (auto& [a, t] : d.ordered)
    lost.insert(a);
  std::set<uint64_t> kept;
  for (auto* jp : decoding_on(d.name)) {
    auto& j = *jp;
    if (!(j.state == job_state::decoding && j.decoder == d.name && lost.count(j.attempt)))
      continue;
    if (leased && mono < j.lease_until) {
      kept.insert(j.attempt);
      log(2, "job " + job_name(j) + " stays with decoder " + d.name
               + " until its lease ends in " + std::to_string(j.lease_until - mono) + " s: "
               + why);
      continue;
    }
    release_decoder_of(j);
    refund_lost(j, j.decode_attempts);
    requeue_decoding(j, "decoder " + d.name + ": " + why);
  }
  auto keep_only = [&](auto& m) {
    for (auto it = m.begin(); it != m.end();) {
      const uint64_t a = [&] {
        if constexpr (std::is_same_v<std::decay_t<decltype(*it)>, uint64_t>)
          return *it;
        else
          return it->first;
      }();
      it = kept.count(a) ? std::next(it) : m.erase(it);
    }
  };
  keep_only(d.holding);
  keep_only(d.ordered);
  keep_only(d.sent);
}

void stepper::expire_leases() {
  for (auto& [name, p] : s.pools) {
    if (p.alive || !p.assigned)
      continue;
    auto* j = s.find_job(p.assigned->first, p.assigned->second);
    if (j == nullptr || j->state != job_state::sampling || j->pool != name)
      continue;
    if (mono >= j->lease_until)
      pool_lost(p, "its lease expired while it was out of service");
  }
  for (auto& [name, d] : s.decoders) {
    if (d.alive)
      continue;
    bool expired = false;
    for (auto* j : decoding_on(name))
      if (j->decoder == name && mono >= j->lease_until)
        expired = true;
    if (expired)
      decoder_lost(d, "its lease expired while it was out of service", true);
  }
}

std::vector<job*> stepper::decoding_on(const std::string& decoder) {
  std::vector<job*> out;
  auto it = s.idx.decoding.find(decoder);
  if (it != s.idx.decoding.end())
    for (auto& [rp, ji] : it->second)
      out.push_back(&s.runs[rp].jobs[ji]);
  return out;
}

} // namespace vidline::actors::coordinator
