// bench_plan's bounds: the steady-state upper bound of one size, the ramp-aware makespan
// bound, and the upper bound of a mix of sizes (a linear program, solved by simplex_max).

#include <algorithm>
#include <cmath>

#include "bench/plan/plan.hpp"

namespace vidline::bench::plan_bench {

namespace {

/// Maximises c.x subject to A x <= b, x >= 0, with b >= 0 (the origin feasible): a dense
/// simplex with Bland's rule (no cycling). Returns the optimum.
double simplex_max(std::vector<std::vector<double>> A, std::vector<double> b,
                   const std::vector<double>& c) {
  const std::size_t m = A.size(), n = c.size();
  // Tableau: m rows of [A | I | b], objective row [-c | 0 | 0].
  std::vector<std::vector<double>> t(m + 1, std::vector<double>(n + m + 1, 0));
  std::vector<std::size_t> basis(m);
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j)
      t[i][j] = A[i][j];
    t[i][n + i] = 1;
    t[i][n + m] = b[i];
    basis[i] = n + i;
  }
  for (std::size_t j = 0; j < n; ++j)
    t[m][j] = -c[j];
  while (true) {
    std::size_t col = n + m;
    for (std::size_t j = 0; j < n + m; ++j)
      if (t[m][j] < -1e-12) {
        col = j;
        break;
      }
    if (col == n + m)
      return t[m][n + m];
    std::size_t row = m;
    double best = 0;
    for (std::size_t i = 0; i < m; ++i)
      if (t[i][col] > 1e-12) {
        double r = t[i][n + m] / t[i][col];
        if (row == m || r < best - 1e-12 || (std::abs(r - best) <= 1e-12 && basis[i] < basis[row])) {
          row = i;
          best = r;
        }
      }
    if (row == m)
      return 1e300;  // unbounded
    double pv = t[row][col];
    for (auto& v : t[row])
      v /= pv;
    for (std::size_t i = 0; i <= m; ++i)
      if (i != row && t[i][col] != 0) {
        double f = t[i][col];
        for (std::size_t j = 0; j <= n + m; ++j)
          t[i][j] -= f * t[row][j];
      }
    basis[row] = col;
  }
}

} // namespace

/// The steady-state upper bound in clips per second: the best layout's sum of warm sampling
/// rates (pools sharing GPUs: the best set of them that runs together), capped by the sum of
/// the decoders' rates.
double upper_bound(const setup& s, uint32_t w, uint32_t h, uint32_t secs) {
  const auto& prof = s.est->profile();
  config::profile::job_size size{w, h, secs};
  std::vector<std::string> pools;
  for (auto& p : s.cluster.pools)
    if (prof.fits(p.profile_key, size))
      pools.push_back(p.name);
  auto rate = [&](const std::string& name) {
    auto& pv = s.state.pools.at(name);
    return 1 / prof.sampling(pv.kind, size, config::profile::model_state::warm).s;
  };
  auto conflict = [&](const std::string& a, const std::string& b) {
    return s.state.pools.at(a).conflicts.count(b) != 0;
  };
  // Every set of pools that can run together (the clusters here are small).
  double best = 0;
  const std::size_t n = pools.size();
  for (uint32_t mask = 1; mask < (1u << n); ++mask) {
    bool ok = true;
    double sum = 0;
    for (std::size_t a = 0; a < n && ok; ++a) {
      if (!(mask >> a & 1))
        continue;
      sum += rate(pools[a]);
      for (std::size_t b = a + 1; b < n && ok; ++b)
        if ((mask >> b & 1) && conflict(pools[a], pools[b]))
          ok = false;
    }
    if (ok)
      best = std::max(best, sum);
  }
  double decode = 0;
  for (auto& d : s.cluster.decoders)
    decode += 1 / prof.decode(d.profile_key, size).s;
  return std::min(best, decode);
}

/// The makespan of a line that runs at the steady-state rates after an unavoidable ramp:
/// each pool of a layout finishes its first clip at conditioning + cold sampling + handoff +
/// decode (on its best decoder, no queue) and then one more every warm sampling time; the
/// count-th earliest of those clips; no sooner than the decoders' summed rate allows from
/// the first latent on. The best layout. No schedule that keeps one layout does better.
double makespan_bound(const setup& s, uint32_t w, uint32_t h, uint32_t secs, uint32_t count) {
  const auto& prof = s.est->profile();
  config::profile::job_size size{w, h, secs};
  msg::job_spec spec;
  spec.width = w;
  spec.height = h;
  spec.seconds = secs;
  struct source { std::string name; double first, warm; };
  std::vector<source> pools;
  double earliest_latent = 1e300, decode_rate = 0;
  for (auto& d : s.cluster.decoders)
    decode_rate += 1 / prof.decode(d.profile_key, size).s;
  for (auto& p : s.cluster.pools) {
    if (!prof.fits(p.profile_key, size))
      continue;
    double cond = s.est->conditioning(p.host);
    double cold = prof.sampling(p.profile_key, size, config::profile::model_state::cold).s;
    double warm = prof.sampling(p.profile_key, size, config::profile::model_state::warm).s;
    double tail = 1e300;
    for (auto& d : s.state.decoders)
      tail = std::min(tail, s.est->handoff(p.host, d.second, spec) + s.est->decode(d.second, spec));
    pools.push_back({p.name, cond + cold + tail, warm});
    earliest_latent = std::min(earliest_latent, cond + cold);
  }
  auto conflict = [&](const std::string& a, const std::string& b) {
    return s.state.pools.at(a).conflicts.count(b) != 0;
  };
  double best = 1e300;
  const std::size_t n = pools.size();
  for (uint32_t mask = 1; mask < (1u << n); ++mask) {
    bool ok = true;
    for (std::size_t a = 0; a < n && ok; ++a)
      for (std::size_t b = a + 1; b < n && ok; ++b)
        if ((mask >> a & 1) && (mask >> b & 1) && conflict(pools[a].name, pools[b].name))
          ok = false;
    if (!ok)
      continue;
    // Smallest T by which the pools finish `count` whole clips.
    double lo = 0, hi = 1e9;
    for (int i = 0; i < 200; ++i) {
      double mid = (lo + hi) / 2, done = 0;
      for (std::size_t a = 0; a < n; ++a)
        if ((mask >> a & 1) && mid >= pools[a].first)
          done += std::floor((mid - pools[a].first) / pools[a].warm + 1e-9) + 1;
      (done >= count ? hi : lo) = mid;
    }
    best = std::min(best, hi);
  }
  return std::max(best, earliest_latent + count / decode_rate);
}

/// The steady-state upper bound (clips per second) of a cluster for a mix of sizes (`share`
/// of each, summing to 1), as a linear program: the line time-shares its layouts (sets of
/// pools that run together: lambda_L of the time each, summed at most 1); pool p spends
/// x_pc of the time sampling size c warm (summed at most the time its layouts run), giving
/// x_pc / warm_pc clips of c a second; every decoder likewise, y_dc of its time on c at
/// decode_dc each (all decoders at once, a GPU shared with a pool or not: an over-estimate,
/// so still a bound). The throughput X needs share_c X clips of each size a second from
/// both. Conditioning, cold starts, handoffs and every ramp are left out: no schedule does
/// better.
double mix_upper_bound(const setup& s, const std::vector<std::array<uint32_t, 3>>& sizes,
                       const std::vector<double>& share) {
  const auto& prof = s.est->profile();
  std::vector<std::string> pools;
  for (auto& p : s.cluster.pools)
    pools.push_back(p.name);
  const std::size_t P = pools.size(), C = sizes.size(), D = s.cluster.decoders.size();
  std::vector<uint32_t> layouts;
  for (uint32_t mask = 1; mask < (1u << P); ++mask) {
    bool ok = true;
    for (std::size_t a = 0; a < P && ok; ++a)
      for (std::size_t b = a + 1; b < P && ok; ++b)
        if ((mask >> a & 1) && (mask >> b & 1) && s.state.pools.at(pools[a]).conflicts.count(pools[b]))
          ok = false;
    if (ok)
      layouts.push_back(mask);
  }
  const std::size_t L = layouts.size();
  // Variables: lambda (L), x (P x C), y (D x C), X.
  const std::size_t nx = L, ny = nx + P * C, nX = ny + D * C, n = nX + 1;
  std::vector<std::vector<double>> A;
  std::vector<double> b;
  auto row = [&] { A.emplace_back(n, 0.0); b.push_back(0); return A.size() - 1; };
  auto r0 = row();
  for (std::size_t l = 0; l < L; ++l)
    A[r0][l] = 1;
  b[r0] = 1;
  for (std::size_t p = 0; p < P; ++p) {
    auto r = row();
    for (std::size_t c = 0; c < C; ++c)
      A[r][nx + p * C + c] = 1;
    for (std::size_t l = 0; l < L; ++l)
      if (layouts[l] >> p & 1)
        A[r][l] = -1;
  }
  for (std::size_t d = 0; d < D; ++d) {
    auto r = row();
    for (std::size_t c = 0; c < C; ++c)
      A[r][ny + d * C + c] = 1;
    b[r] = 1;
  }
  for (std::size_t c = 0; c < C; ++c) {
    config::profile::job_size size{sizes[c][0], sizes[c][1], sizes[c][2]};
    auto made = row(), decoded = row();
    A[made][nX] = share[c];
    A[decoded][nX] = share[c];
    for (std::size_t p = 0; p < P; ++p) {
      const auto& key = s.state.pools.at(pools[p]).kind;
      if (prof.fits(key, size))
        A[made][nx + p * C + c] = -1 / prof.sampling(key, size, config::profile::model_state::warm).s;
    }
    for (std::size_t d = 0; d < D; ++d)
      A[decoded][ny + d * C + c] = -1 / prof.decode(s.cluster.decoders[d].profile_key, size).s;
  }
  std::vector<double> obj(n, 0);
  obj[nX] = 1;
  return simplex_max(A, b, obj);
}

} // namespace vidline::bench::plan_bench
