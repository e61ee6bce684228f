// The power log (power_log.hpp).
#include "actors/gpu/power_log.hpp"

#include <algorithm>
#include <limits>

namespace vidline::actors::gpu {

void power_log::reading(const std::string& card, double t, double power_w) {
  auto& r = cards_[card].readings;
  if (!r.empty() && t <= r.back().first)
    return;
  r.emplace_back(t, power_w);
}

double power_log::integrate(const card_log& c, const std::string& card, double a, double b,
                            const std::string& self, const std::vector<running>* split,
                            bool& covered) const {
  if (!(b > a))
    return 0;
  // The other stages overlapping [a, b]: recorded, and running (no end yet).
  std::vector<hold> others;
  if (split != nullptr) {
    for (auto& h : c.holds)
      if (h.owner != self && h.b > a && h.a < b)
        others.push_back(h);
    for (auto& r : *split)
      if (r.card == card && r.since < b)
        others.push_back({"", r.since, std::numeric_limits<double>::infinity()});
  }
  auto& r = c.readings;
  // The reading in force at a: the last one at or before it.
  auto it = std::upper_bound(r.begin(), r.end(), a,
                             [](double t, const auto& x) { return t < x.first; });
  if (it != r.begin())
    --it;
  double joules = 0;
  for (; it != r.end() && it->first < b; ++it) {
    const double next = std::next(it) == r.end() ? it->first + max_hold_s_ : std::next(it)->first;
    const double x = std::max(a, it->first);
    const double y = std::min({b, next, it->first + max_hold_s_});
    if (!(y > x) || it->second < 0)
      continue;
    covered = true;
    // Split [x, y] where another stage begins or ends; each piece divided among those in it.
    std::vector<double> cuts{x, y};
    for (auto& h : others) {
      if (h.a > x && h.a < y)
        cuts.push_back(h.a);
      if (h.b > x && h.b < y)
        cuts.push_back(h.b);
    }
    std::sort(cuts.begin(), cuts.end());
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
      const double lo = cuts[i], hi = cuts[i + 1];
      if (!(hi > lo))
        continue;
      const double mid = (lo + hi) / 2;
      int n = 1;
      for (auto& h : others)
        n += h.a <= mid && mid < h.b ? 1 : 0;
      joules += it->second * (hi - lo) / n;
    }
  }
  return joules;
}

double power_log::stage(const std::string& owner, const std::vector<std::string>& cards,
                        double a, double b, const std::vector<running>& now_running) {
  double joules = 0;
  bool covered = false;
  // Cards that never reported (no telemetry, or the planner's virtual line) keep no holds:
  // nothing could ever be split with them, and a plan of many jobs stays linear.
  if (std::none_of(cards.begin(), cards.end(), [&](const std::string& name) {
        auto it = cards_.find(name);
        return it != cards_.end() && !it->second.readings.empty();
      }))
    return -1;
  for (auto& name : cards) {
    auto& c = cards_[name];
    c.holds.erase(std::remove_if(c.holds.begin(), c.holds.end(),
                                 [&](const hold& h) { return h.owner == owner; }),
                  c.holds.end());
    joules += integrate(c, name, a, b, owner, &now_running, covered);
    if (b > a)
      c.holds.push_back({owner, a, b});
  }
  return covered ? joules : -1;
}

double power_log::card_joules(const std::string& card, double a, double b) const {
  auto it = cards_.find(card);
  if (it == cards_.end())
    return -1;
  bool covered = false;
  double j = integrate(it->second, card, a, b, "", nullptr, covered);
  return covered ? j : -1;
}

void power_log::forget(double now) {
  const double before = now - keep_s_;
  for (auto& [name, c] : cards_) {
    auto& r = c.readings;
    // Keep the last reading before the cut: it is in force at the cut.
    auto it = std::lower_bound(r.begin(), r.end(), before,
                               [](const auto& x, double t) { return x.first < t; });
    // In batches: erasing the front of a vector moves the rest.
    if (std::distance(r.begin(), it) > 256)
      r.erase(r.begin(), std::prev(it));
    c.holds.erase(std::remove_if(c.holds.begin(), c.holds.end(),
                                 [&](const hold& h) { return h.b < before; }),
                  c.holds.end());
  }
}

std::size_t power_log::readings(const std::string& card) const {
  auto it = cards_.find(card);
  return it == cards_.end() ? 0 : it->second.readings.size();
}

} // namespace vidline::actors::gpu
