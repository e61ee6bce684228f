// Shots that follow shots in the scheduler (graph.hpp): waiting jobs, their inputs made
// from their sources' videos, job keys and outputs reused.
#include "actors/coordinator/graph.hpp"
#include "actors/coordinator/index.hpp"

#include <algorithm>

#include "config/shot_graph.hpp"
#include "config/shot_identity.hpp"

namespace vidline::actors::coordinator {

namespace {

bool missing(const msg::job_input& in) { return in.from_index >= 0 && in.sha256.empty(); }

bool waits(const job& j) {
  return std::any_of(j.spec.inputs.begin(), j.spec.inputs.end(), missing);
}

/// Every source of a waiting job's missing inputs has its video.
bool sources_done(const run& r, const job& j) {
  for (auto& in : j.spec.inputs)
    if (missing(in)
        && (static_cast<std::size_t>(in.from_index) >= r.jobs.size()
            || !has_output(r.jobs[static_cast<std::size_t>(in.from_index)].state)))
      return false;
  return true;
}

std::string name_of(const job& j) { return j.spec.run_id + "/" + std::to_string(j.spec.index); }

/// The output job key `key` names: one the cluster holds first (its decoder's host serves
/// it), else one of the run's collection folder; none when the run renders everything.
const held_output* find_held(const state& s, const run& r, const std::string& key) {
  if (key.empty() || r.rerender)
    return nullptr;
  if (auto it = s.idx.outputs_by_key.find(key); it != s.idx.outputs_by_key.end())
    return &it->second;
  if (auto it = s.held_outputs.find(key); it != s.held_outputs.end())
    return &it->second;
  if (auto it = r.collected.find(key); it != r.collected.end())
    return &it->second;
  return nullptr;
}

/// Takes a held output as the job's own (its state is the caller's to set).
void take_output(job& j, const held_output& h) {
  j.output = h.output;
  j.output_sha256 = h.sha256;
  j.decoder = h.decoder;
  j.reused_from = h.collection ? "collection" : "cluster";
  j.error.clear();
}

std::string made_by(const held_output& h) {
  return (h.collection ? "the collection folder's " + h.output + ", made by " : "made by ")
         + h.run_id + "/" + std::to_string(h.index);
}

void ask(state& s, std::size_t rp, uint32_t i, std::vector<effect>& fx, double now) {
  auto& r = s.runs[rp];
  auto& j = r.jobs[i];
  j.inputs_asked_at = now;
  for (auto& in : j.spec.inputs) {
    if (!missing(in))
      continue;
    const auto& src = r.jobs[static_cast<std::size_t>(in.from_index)];
    if (in.latent) {  // the source's latent itself, from the host that sampled it
      fx.push_back(fx_make_input{r.id, i, in.name, src.spec.index, "", src.latent_sha256,
                                 src.decoder, 0, 0, true, src.latent_host});
      continue;
    }
    const uint32_t frames = config::graph::frames_of(src.spec.seconds);
    const uint32_t k = config::graph::frame_index(in.frame, frames).value_or(frames - 1);
    fx.push_back(fx_make_input{r.id, i, in.name, src.spec.index, src.output, src.output_sha256,
                               src.decoder, k, frames, false, ""});
  }
}

/// Whether another job of the run takes `j`'s latent (takers: the run's, indexed).
bool hands_latent(const run& r, const std::vector<std::vector<uint32_t>>& takers, const job& j) {
  if (takers.empty())
    return false;
  for (uint32_t t : takers[j.spec.index])
    for (auto& in : r.jobs[t].spec.inputs)
      if (in.latent && in.from_index == static_cast<int64_t>(j.spec.index))
        return true;
  return false;
}

void make_ready(state& s, run& r, job& j, std::vector<effect>& fx, double now) {
  j.spec.key = config::job_key(j.spec);
  const auto& takers = s.idx.runs[s.idx.run_pos.at(r.id)].takers;
  const held_output* h = hands_latent(r, takers, j) ? nullptr : find_held(s, r, j.spec.key);
  if (h != nullptr) {
    const held_output copy = *h;  // on_output below may move the map's entries
    take_output(j, copy);
    detail::move_job(s, j, job_state::reused);
    ++s.jobs_reused;
    fx.push_back(fx_persist_job{j.spec.run_id, j.spec.index});
    fx.push_back(fx_job_final{j.spec.run_id, j.spec.index});
    fx.push_back(fx_log{2, "job " + name_of(j) + " reused " + copy.output + " (job key "
                             + j.spec.key + ", " + made_by(copy) + ")"});
    on_output(s, j, fx, now);
    return;
  }
  detail::move_job(s, j, job_state::queued);
  fx.push_back(fx_persist_job{j.spec.run_id, j.spec.index});
  fx.push_back(fx_log{1, "job " + name_of(j) + " has its inputs: queued"});
}

} // namespace

std::string source_label(const run& r, const msg::job_input& in) {
  const auto k = static_cast<std::size_t>(in.from_index);
  const std::string shot = k < r.jobs.size() ? r.jobs[k].spec.shot : in.from;
  return "shot " + (shot.empty() ? in.from : shot) + " (job " + std::to_string(in.from_index) + ")";
}

std::vector<uint32_t> admit(state& s, run& r, uint32_t first) {
  std::vector<uint32_t> finals;
  // Jobs whose latent another job takes render: only a render makes a latent to hand over
  // (an output reused has none).
  std::vector<char> latent_source(r.jobs.size(), 0);
  for (auto& j : r.jobs)
    for (auto& in : j.spec.inputs)
      if (in.latent && in.from_index >= 0 && static_cast<std::size_t>(in.from_index) < r.jobs.size())
        latent_source[static_cast<std::size_t>(in.from_index)] = 1;
  for (uint32_t i = first; i < r.jobs.size(); ++i) {
    auto& j = r.jobs[i];
    if (j.state != job_state::queued)
      continue;
    if (waits(j)) {
      for (auto& in : j.spec.inputs)
        if (missing(in) && (static_cast<std::size_t>(in.from_index) >= r.jobs.size()
                            || static_cast<uint32_t>(in.from_index) == i)) {
          j.state = job_state::failed;
          j.error = "input " + in.name + ": names job " + std::to_string(in.from_index)
                    + ", which is not another job of the run";
          finals.push_back(i);
          break;
        }
      if (j.state == job_state::queued)
        j.state = job_state::waiting;
      j.spec.key.clear();
      continue;
    }
    j.spec.key = config::job_key(j.spec);
    if (const held_output* h = latent_source[i] ? nullptr : find_held(s, r, j.spec.key)) {
      take_output(j, *h);
      j.state = job_state::reused;
      ++s.jobs_reused;
      finals.push_back(i);
    }
  }
  return finals;
}

void index_run_graph(state& s, std::size_t rp) {
  auto& r = s.runs[rp];
  auto& ri = s.idx.runs[rp];
  const std::size_t n = r.jobs.size();
  for (uint32_t i = 0; i < n; ++i) {
    const auto& j = r.jobs[i];
    for (auto& in : j.spec.inputs) {
      if (in.from_index < 0 || static_cast<std::size_t>(in.from_index) >= n)
        continue;
      if (ri.takers.empty())
        ri.takers.assign(n, {});
      auto& t = ri.takers[static_cast<std::size_t>(in.from_index)];
      if (t.empty() || t.back() != i)
        t.push_back(i);
      ri.takes_latents = ri.takes_latents || in.latent;
    }
    if (j.state == job_state::succeeded && !j.spec.key.empty() && !j.output.empty())
      s.idx.outputs_by_key[j.spec.key] =
        held_output{j.output, j.output_sha256, j.decoder, r.id, j.spec.index};
  }
  refresh_due(s, rp);
}

void latents_wanted(const state& s, std::set<std::string>& out) {
  for (std::size_t rp = 0; rp < s.runs.size() && rp < s.idx.runs.size(); ++rp) {
    if (!s.idx.runs[rp].takes_latents)
      continue;
    const auto& r = s.runs[rp];
    for (auto& j : r.jobs)
      if (j.state == job_state::waiting)
        for (auto& in : j.spec.inputs)
          if (in.latent && missing(in) && static_cast<std::size_t>(in.from_index) < r.jobs.size())
            if (const auto& src = r.jobs[static_cast<std::size_t>(in.from_index)];
                !src.latent_sha256.empty())
              out.insert(src.latent_sha256);
  }
}

void remember_outputs(state& s, const run& r) {
  for (auto& j : r.jobs)
    if (j.state == job_state::succeeded && !j.spec.key.empty() && !j.output.empty()) {
      const held_output h{j.output, j.output_sha256, j.decoder, r.id, j.spec.index};
      auto [it, fresh] = s.held_outputs.emplace(j.spec.key, h);
      if (fresh)
        s.held_order.push_back(j.spec.key);
      else
        it->second = h;
    }
  while (s.held_order.size() > max_held_outputs) {
    s.held_outputs.erase(s.held_order.front());
    s.held_order.pop_front();
  }
}

void refresh_due(state& s, std::size_t rp) {
  const auto& r = s.runs[rp];
  for (uint32_t i = 0; i < r.jobs.size(); ++i)
    if (r.jobs[i].state == job_state::waiting && sources_done(r, r.jobs[i]))
      s.idx.inputs_due.emplace(rp, i);
}

void ask_inputs(state& s, std::vector<effect>& fx, double now, bool all) {
  for (auto [rp, i] : s.idx.inputs_due) {
    const auto& j = s.runs[rp].jobs[i];
    if (all || j.inputs_asked_at < 0 || now - j.inputs_asked_at >= input_resend_s)
      ask(s, rp, i, fx, now);
  }
}

void on_output(state& s, const job& j, std::vector<effect>& fx, double now) {
  auto pos = s.idx.run_pos.find(j.spec.run_id);
  if (pos == s.idx.run_pos.end())
    return;
  const std::size_t rp = pos->second;
  auto& r = s.runs[rp];
  if (j.state == job_state::succeeded && !j.spec.key.empty() && !j.output.empty())
    s.idx.outputs_by_key[j.spec.key] =
      held_output{j.output, j.output_sha256, j.decoder, r.id, j.spec.index};
  const auto& ri = s.idx.runs[rp];
  if (ri.takers.empty())
    return;
  for (uint32_t t : ri.takers[j.spec.index]) {
    const auto& tj = r.jobs[t];
    if (tj.state == job_state::waiting && sources_done(r, tj) && s.idx.inputs_due.emplace(rp, t).second)
      ask(s, rp, t, fx, now);
  }
}

std::vector<job*> dependents(state& s, const job& j) {
  std::vector<job*> out;
  auto pos = s.idx.run_pos.find(j.spec.run_id);
  if (pos == s.idx.run_pos.end())
    return out;
  auto& r = s.runs[pos->second];
  const auto& takers = s.idx.runs[pos->second].takers;
  if (takers.empty())
    return out;
  std::vector<char> seen(r.jobs.size(), 0);
  std::vector<uint32_t> todo{j.spec.index};
  seen[j.spec.index] = 1;
  for (std::size_t k = 0; k < todo.size(); ++k)
    for (uint32_t t : takers[todo[k]])
      if (!seen[t]) {
        seen[t] = 1;
        todo.push_back(t);
        if (!is_final(r.jobs[t].state))
          out.push_back(&r.jobs[t]);
      }
  return out;
}

std::pair<job*, std::string> on_input_made(state& s, const ev_input_made& e,
                                           std::vector<effect>& fx, double now) {
  auto* r = s.find_run(e.run_id);
  if (r == nullptr || e.index >= r->jobs.size())
    return {nullptr, ""};
  auto& j = r->jobs[e.index];
  if (j.state != job_state::waiting)
    return {nullptr, ""};  // answered before (an input asked twice), or the job moved on
  const std::size_t rp = s.idx.run_pos.at(r->id);
  const msg::job_input* taken = nullptr;
  for (auto& in : j.spec.inputs)
    if (in.name == e.name && missing(in))
      taken = &in;
  if (taken == nullptr)
    return {nullptr, ""};
  if (!e.error.empty() || e.sha256.empty()) {
    s.idx.inputs_due.erase({rp, e.index});
    return {&j, "input " + e.name + " from " + source_label(*r, *taken) + ": "
                  + (e.error.empty() ? "made without a digest" : e.error)};
  }
  for (auto& in : j.spec.inputs)
    if (in.name == e.name && missing(in)) {
      in.sha256 = e.sha256;
      in.bytes = e.bytes;
    }
  if (e.name == "reference") {  // the sampling host pulls it as it pulls an uploaded one
    j.spec.reference_sha256 = e.sha256;
    j.spec.reference_bytes = e.bytes;
  }
  fx.push_back(fx_log{1, "job " + name_of(j) + ": input " + e.name + " made (" + e.sha256 + ")"});
  if (waits(j)) {
    fx.push_back(fx_persist_job{j.spec.run_id, j.spec.index});
    return {nullptr, ""};
  }
  s.idx.inputs_due.erase({rp, e.index});
  make_ready(s, *r, j, fx, now);
  return {nullptr, ""};
}

} // namespace vidline::actors::coordinator
