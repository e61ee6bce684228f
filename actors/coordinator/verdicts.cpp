#include "actors/coordinator/verdicts.hpp"

#include <algorithm>
#include <cmath>

namespace vidline::actors::coordinator {

namespace {

std::string job_name(const job& j) {
  return j.spec.run_id + "/" + std::to_string(j.spec.index);
}

void send(state& s, job& j, const decoder_view& d, double now, std::vector<effect>& fx) {
  msg::verdict_index v;
  v.decoder = j.decoder;
  v.run_id = j.spec.run_id;
  v.index = j.spec.index;
  v.output = j.output;
  v.output_sha256 = j.output_sha256;
  v.verdict = j.verdict;
  v.at_unix = std::round(j.reviewed_at * s.p.time_scale * 1000) / 1000;  // as the status says
  v.take_index = j.retake;
  v.revision = j.verdict_revision;
  fx.push_back(fx_send_verdict{d.host, std::move(v)});
  j.verdict_sent_at = now;
}

} // namespace

bool verdict_due(const job& j) {
  return has_output(j.state) && !j.verdict.empty() && !j.decoder.empty()
         && j.verdict_indexed < j.verdict_revision;
}

void note_verdict(state& s, const job& j) {
  const std::pair<std::string, uint32_t> key{j.spec.run_id, j.spec.index};
  if (verdict_due(j)) {
    s.idx.verdicts_due[j.decoder].insert(key);
    return;
  }
  for (auto it = s.idx.verdicts_due.begin(); it != s.idx.verdicts_due.end();) {
    it->second.erase(key);
    it = it->second.empty() ? s.idx.verdicts_due.erase(it) : std::next(it);
  }
}

void verdict_given(state& s, job& j, double now, std::vector<effect>& fx) {
  ++j.verdict_revision;
  j.verdict_error.clear();
  note_verdict(s, j);
  if (!verdict_due(j))
    return;
  auto d = s.decoders.find(j.decoder);
  if (d == s.decoders.end()) {
    fx.push_back(fx_log{3, "job " + job_name(j) + ": its video's decoder " + j.decoder
                             + " is not in the config: the verdict stays out of its run index"});
    return;
  }
  if (d->second.alive)
    send(s, j, d->second, now, fx);
}

void send_due_verdicts(state& s, const decoder_view& d, double now, std::vector<effect>& fx) {
  auto due = s.idx.verdicts_due.find(d.name);
  if (due == s.idx.verdicts_due.end() || !d.alive)
    return;
  for (auto& [run_id, index] : due->second)
    if (job* j = s.find_job(run_id, index);
        j != nullptr && (j->verdict_sent_at < 0 || now - j->verdict_sent_at >= s.p.order_resend_s))
      send(s, *j, d, now, fx);
}

void apply_verdict_indexed(state& s, const ev_verdict_indexed& e, double /*now*/,
                           std::vector<effect>& fx) {
  const auto& a = e.a;
  job* j = s.find_job(a.run_id, a.index);
  if (j == nullptr || a.revision != j->verdict_revision || a.revision <= j->verdict_indexed)
    return;  // a job the state does not hold, an older revision, or answered before
  const bool confirmed = a.outcome == msg::verdict_outcome::indexed
                         || a.outcome == msg::verdict_outcome::no_line
                         || a.outcome == msg::verdict_outcome::refused;
  if (!confirmed) {
    if (a.error != j->verdict_error)
      fx.push_back(fx_log{3, "job " + job_name(*j) + ": the verdict is not in the run index on "
                               + a.host + " yet (sent again): "
                               + (a.error.empty() ? "answer '" + a.outcome + "'" : a.error)});
    j->verdict_error = a.error;
    return;
  }
  j->verdict_indexed = a.revision;
  j->verdict_error.clear();
  note_verdict(s, *j);
  fx.push_back(fx_persist_job{j->spec.run_id, j->spec.index});
  if (a.outcome == msg::verdict_outcome::refused)
    fx.push_back(fx_log{3, "job " + job_name(*j) + ": the decoder " + a.decoder + " on " + a.host
                             + " refused its verdict for the run index (not sent again): "
                             + a.error});
  else if (a.outcome == msg::verdict_outcome::no_line)
    fx.push_back(fx_log{2, "job " + job_name(*j) + ": the run index on " + a.host
                             + " holds no line of its video (reused from another run, or "
                               "removed): the verdict is in the journal and the status only"});
  else
    fx.push_back(fx_log{1, "job " + job_name(*j) + ": verdict " + j->verdict + " (revision "
                             + std::to_string(a.revision) + ") in the run index on " + a.host});
}

std::set<std::string> runs_with_verdicts_due(const state& s) {
  std::set<std::string> out;
  for (auto& [decoder, jobs] : s.idx.verdicts_due)
    if (s.decoders.count(decoder))
      for (auto& [run_id, index] : jobs)
        out.insert(run_id);
  return out;
}

} // namespace vidline::actors::coordinator
