// The auto policy's per-size constants (auto_policy::consts): per pool of a mode, the
// sampling, conditioning and decode estimates for one size, and the groups of pools that
// share GPUs with their layouts; cached per (mode, size, model). The rest of the policy is
// in auto_policy.cpp and auto_policy_decoder.cpp.
#include "actors/coordinator/auto_policy_detail.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

namespace vidline::actors::coordinator {

using auto_detail::never;

const auto_policy::mode_consts& auto_policy::consts(const state& st, const std::string& mode,
                                                     const msg::job_spec& spec) const {
  const auto& ids = st.idx.mode_ids.at(mode);
  auto key = std::make_tuple(mode, spec.width, spec.height, spec.seconds, spec.model);
  auto it = cache_.find(key);
  if (it != cache_.end() && it->second->ids == ids) {
    // Decoder views move when the state is copied: re-point them (same mode, same order).
    auto& views = st.idx.mode_decoder_views.at(mode);
    if (it->second->decoders.size() == views.size()
        && std::equal(views.begin(), views.end(), it->second->decoders.begin()))
      return *it->second;
    auto c = std::make_shared<mode_consts>(*it->second);
    c->decoders.assign(views.begin(), views.end());
    it->second = c;
    return *c;
  }
  struct view_of {
    const state& s;
    const pool_view& pool(uint32_t id) const { return *s.idx.pool_views[id]; }
  } v{st};
  struct { const msg::job_spec& spec; } head{spec};
  const std::string& run_mode = mode;
  auto c = std::make_shared<mode_consts>();
  c->ids = ids;
  const std::size_t n = ids.size();
  c->fits.assign(n, 0);
  c->cold_s.assign(n, 0);
  c->warm_s.assign(n, 0);
  c->tail_s.assign(n, 0);
  c->cond_s.assign(n, 0);
  c->group_of.assign(n, -1);
  std::vector<const decoder_view*> decs;
  if (auto md = st.idx.mode_decoder_views.find(run_mode); md != st.idx.mode_decoder_views.end())
    decs.assign(md->second.begin(), md->second.end());
  c->decoders = decs;
  for (auto* d : decs) {
    c->decode_s.push_back(est_->decode(*d, head.spec));
    c->handoff_local_s.push_back(est_->handoff(d->host, *d, head.spec));
    c->handoff_remote_s.push_back(est_->handoff("", *d, head.spec));
    c->decoder_shared.push_back(!d->shares_gpu_with.empty());
    if (d->shares_gpu_with.empty())
      c->decode_rate += 1 / std::max(1e-9, c->decode_s.back());
  }
  std::map<std::string, double> tail_of_host;
  for (std::size_t k = 0; k < n; ++k) {
    const auto& p = v.pool(ids[k]);
    auto cold = est_->sampling(p.kind, head.spec, true);
    auto warm = est_->sampling(p.kind, head.spec, false);
    if (!cold || !warm)
      continue;
    c->fits[k] = 1;
    c->cold_s[k] = *cold;
    c->warm_s[k] = std::max(*warm, 1e-6);
    c->warm_rate += 1 / c->warm_s[k];
    ++c->fitting;
    c->cond_s[k] = est_->conditioning(p.host);
    auto [t, fresh] = tail_of_host.emplace(p.host, 0.0);
    if (fresh) {
      double best = never;
      for (auto* d : decs)
        if (d->shares_gpu_with.empty())
          best = std::min(best, est_->handoff(p.host, *d, head.spec) + est_->decode(*d, head.spec));
      if (best == never)
        best = 0;
      t->second = best;
    }
    c->tail_s[k] = t->second;
  }
  // Conflict groups among the pools that hold the size, and their layouts: the largest sets
  // of members that run together.
  const auto& pos = st.idx.mode_pos.at(run_mode);
  std::vector<int> parent(n);
  for (std::size_t k = 0; k < n; ++k)
    parent[k] = static_cast<int>(k);
  auto find = [&](int k) {
    while (parent[k] != k)
      k = parent[k] = parent[parent[k]];
    return k;
  };
  for (std::size_t k = 0; k < n; ++k)
    if (c->fits[k])
      for (uint32_t other : st.idx.related[ids[k]])
        if (pos[other] >= 0 && c->fits[pos[other]])
          parent[find(static_cast<int>(k))] = find(pos[other]);
  std::map<int, std::vector<std::size_t>> roots;
  for (std::size_t k = 0; k < n; ++k)
    if (c->fits[k])
      roots[find(static_cast<int>(k))].push_back(k);
  auto conflict = [&](std::size_t a, std::size_t b) {
    const auto& r = st.idx.related[ids[a]];
    return std::binary_search(r.begin(), r.end(), ids[b]);
  };
  for (auto& [root, members] : roots) {
    if (members.size() < 2 || members.size() > t_.max_group)
      continue;
    mode_consts::group g;
    g.members = members;
    const std::size_t k = members.size();
    for (uint32_t mask = 1; mask < (1u << k); ++mask) {
      bool ok = true;
      for (std::size_t a = 0; a < k && ok; ++a)
        for (std::size_t b = a + 1; b < k && ok; ++b)
          if ((mask >> a & 1) && (mask >> b & 1) && conflict(members[a], members[b]))
            ok = false;
      for (std::size_t a = 0; a < k && ok; ++a) {
        if (mask >> a & 1)
          continue;
        bool addable = true;
        for (std::size_t b = 0; b < k && addable; ++b)
          if ((mask >> b & 1) && conflict(members[a], members[b]))
            addable = false;
        ok = !addable;  // a layout leaves out only pools that cannot join it
      }
      if (ok)
        g.layouts.push_back(mask);
    }
    for (auto m : members)
      c->group_of[m] = static_cast<int>(c->groups.size());
    c->groups.push_back(std::move(g));
  }
  cache_[key] = c;
  return *c;
}

} // namespace vidline::actors::coordinator
