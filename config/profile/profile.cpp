#include "config/profile/profile.hpp"

#include <algorithm>
#include <charconv>
#include <limits>
#include <stdexcept>


namespace vidline::config::profile {

uint64_t job_size::load() const noexcept {
  unsigned __int128 l = static_cast<unsigned __int128>(width) * height * seconds;
  return l > std::numeric_limits<uint64_t>::max() ? std::numeric_limits<uint64_t>::max()
                                                 : static_cast<uint64_t>(l);
}

std::string job_size::str() const {
  return std::to_string(width) + "x" + std::to_string(height) + "x" + std::to_string(seconds);
}

std::optional<job_size> job_size::parse(std::string_view text) {
  uint32_t v[3] = {0, 0, 0};
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (int k = 0; k < 3; ++k) {
    if (k > 0) {
      if (p == end || *p != 'x')
        return std::nullopt;
      ++p;
    }
    if (p == end || *p < '1' || *p > '9')  // digits only, no sign, no leading zero
      return std::nullopt;
    auto [next, ec] = std::from_chars(p, end, v[k]);
    if (ec != std::errc())
      return std::nullopt;
    p = next;
  }
  if (p != end)
    return std::nullopt;
  return job_size{v[0], v[1], v[2]};
}

profile_error::profile_error(std::string path, std::string message)
    : std::runtime_error(path + ": " + message), path_(std::move(path)),
      message_(std::move(message)) {}

namespace {

/// One known load of a table and its timing; equal loads are merged (mean).
struct load_point {
  double load = 0;
  double s = 0, min_s = 0, max_s = 0;
  std::string label;
};

estimate from_timing(const timing& t, std::string basis) {
  return {t.s, t.min_s, t.max_s, std::move(basis)};
}

estimate scaled(const load_point& p, double factor, std::string basis) {
  return {p.s * factor, p.min_s * factor, p.max_s * factor, std::move(basis)};
}

/// Points sorted by load with equal loads merged. `rows` must be sorted by load.
template <class Row, class Get>
std::vector<load_point> load_points(const std::vector<Row>& rows, Get get) {
  std::vector<load_point> out;
  std::size_t merged = 1;
  for (const Row& r : rows) {
    const timing& t = get(r);
    double load = static_cast<double>(r.size.load());
    if (!out.empty() && out.back().load == load) {
      load_point& b = out.back();
      ++merged;
      auto mean = [&](double acc, double v) { return acc + (v - acc) / double(merged); };
      b.s = mean(b.s, t.s);
      b.min_s = mean(b.min_s, t.min_s);
      b.max_s = mean(b.max_s, t.max_s);
      b.label += "/" + r.size.str();
      continue;
    }
    merged = 1;
    out.push_back({load, t.s, t.min_s, t.max_s, r.size.str()});
  }
  return out;
}

/// The lookup rule for a size with no entry of its own (docs/profile.md, "Lookups").
estimate by_load(const std::vector<load_point>& pts, const job_size& size) {
  double l = static_cast<double>(size.load());
  const load_point& lo = pts.front();
  const load_point& hi = pts.back();
  if (l <= lo.load) {
    if (l == lo.load)
      return scaled(lo, 1.0, "same load as " + lo.label);
    return scaled(lo, l / lo.load, "scaled by load from " + lo.label);
  }
  if (l >= hi.load && pts.size() == 1)
    return scaled(hi, l / hi.load, "scaled by load from " + hi.label);
  if (l < hi.load) {
    auto upper = std::find_if(pts.begin(), pts.end(), [&](const load_point& p) { return p.load >= l; });
    const load_point& b = *upper;
    if (b.load == l)
      return scaled(b, 1.0, "same load as " + b.label);
    const load_point& a = *(upper - 1);
    double f = (l - a.load) / (b.load - a.load);
    auto lerp = [f](double x, double y) { return x + f * (y - x); };
    return {lerp(a.s, b.s), lerp(a.min_s, b.min_s), lerp(a.max_s, b.max_s),
            "interpolated by load between " + a.label + " and " + b.label};
  }
  if (l == hi.load)
    return scaled(hi, 1.0, "same load as " + hi.label);
  // Above the largest load: the last segment's line, never below proportional scaling.
  const load_point& a = pts[pts.size() - 2];
  double f = (l - a.load) / (hi.load - a.load);
  double r = l / hi.load;
  auto extend = [&](double x, double y) { return std::max(x + f * (y - x), y * r); };
  return {extend(a.s, hi.s), extend(a.min_s, hi.min_s), extend(a.max_s, hi.max_s),
          "extrapolated by load from " + a.label + " and " + hi.label};
}

} // namespace

const pool_profile& profile::pool(const std::string& key) const {
  auto it = pools_.find(key);
  if (it == pools_.end())
    throw profile_error("/pools/" + key, "no pool kind '" + key + "' in profile '" + name_ + "'");
  return it->second;
}

const decoder_profile& profile::decoder(const std::string& key) const {
  auto it = decoders_.find(key);
  if (it == decoders_.end())
    throw profile_error("/decoders/" + key,
                        "no decoder kind '" + key + "' in profile '" + name_ + "'");
  return it->second;
}

estimate profile::sampling(const std::string& pool_key, const job_size& size,
                           model_state state, const std::string& model) const {
  const pool_profile& p = pool(pool_key);
  auto row = [&](model_state st) {
    auto pick = [st](const sampling_point& sp) -> const timing& {
      return st == model_state::cold ? sp.cold : sp.warm;
    };
    for (const sampling_point& sp : p.sampling)
      if (sp.size == size)
        return from_timing(pick(sp), "entry " + size.str());
    return by_load(load_points(p.sampling, pick), size);
  };
  auto m = model.empty() ? p.models.end() : p.models.find(model);
  if (m == p.models.end())
    return row(state);
  // The model's own speed and load time on this kind.
  const model_timing& mt = m->second;
  estimate warm = row(model_state::warm);
  estimate e{warm.s * mt.warm_factor, warm.min_s * mt.warm_factor, warm.max_s * mt.warm_factor,
             warm.basis + ", model " + model + " x" + std::to_string(mt.warm_factor)};
  if (state == model_state::warm)
    return e;
  if (mt.load) {
    e.s += mt.load->s;
    e.min_s += mt.load->min_s;
    e.max_s += mt.load->max_s;
    e.basis += " + its load";
  } else {
    estimate cold = row(model_state::cold);
    e.s += cold.s - warm.s;
    e.min_s += cold.min_s - warm.min_s;
    e.max_s += cold.max_s - warm.max_s;
    e.basis += " + the kind's load";
  }
  return e;
}

bool profile::fits(const std::string& pool_key, const job_size& size) const {
  const capacity_limit& c = capacity(pool_key);
  return !c.max_load || size.load() <= *c.max_load;
}

const capacity_limit& profile::capacity(const std::string& pool_key) const {
  return pool(pool_key).capacity;
}

estimate profile::conditioning(const std::string& encoder_key) const {
  auto it = encoders_.find(encoder_key);
  if (it == encoders_.end())
    throw profile_error("/encoders/" + encoder_key,
                        "no encoder kind '" + encoder_key + "' in profile '" + name_ + "'");
  return from_timing(it->second, "entry " + encoder_key);
}

estimate profile::decode(const std::string& decoder_key, const job_size& size) const {
  const decoder_profile& d = decoder(decoder_key);
  for (const decode_point& dp : d.decode)
    if (dp.size == size)
      return from_timing(dp.time, "entry " + size.str());
  if (d.scale_of) {
    estimate base = decode(d.scale_of->decoder, size);
    double k = d.scale_of->factor;
    return {base.s * k, base.min_s * k, base.max_s * k,
            std::to_string(k) + " x " + d.scale_of->decoder + " (" + base.basis + ")"};
  }
  return by_load(load_points(d.decode, [](const decode_point& p) -> const timing& { return p.time; }),
                 size);
}

estimate profile::handoff(bool same_host) const {
  return same_host ? from_timing(handoff_.same_host, "entry handoff/same_host")
                   : from_timing(handoff_.remote, "entry handoff/remote");
}

uint64_t profile::latent_bytes(const job_size& size) const {
  using u128 = unsigned __int128;
  const auto& ref = latent();
  u128 load = u128{size.width} * size.height * size.seconds;
  u128 ref_load = u128{ref.size.width} * ref.size.height * ref.size.seconds;
  if (load == 0)
    return 0;
  // Round half up: (2 * bytes * load + ref_load) / (2 * ref_load), checked for overflow.
  u128 limit = ~u128{0} / 4;
  if (ref.bytes != 0 && load > limit / ref.bytes)
    throw std::overflow_error("latent_bytes: size too large");
  u128 n = (u128{2} * ref.bytes * load + ref_load) / (u128{2} * ref_load);
  if (n > u128{UINT64_MAX})
    throw std::overflow_error("latent_bytes: size too large");
  return static_cast<uint64_t>(n);
}

} // namespace vidline::config::profile
