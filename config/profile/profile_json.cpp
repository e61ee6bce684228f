/// Reading and validating a profile from JSON (format: docs/profile.md).

#include <algorithm>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <map>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

#include "config/profile/kinds.hpp"
#include "config/profile/profile.hpp"

namespace vidline::config::profile {

using json = nlohmann::json;

/// Builds a profile from JSON, naming the first field that is wrong.
class profile_reader {
public:
  static profile read(const json& j);

private:
  [[noreturn]] static void fail(const std::string& path, const std::string& message) {
    throw profile_error(path, message);
  }

  static std::string escape(const std::string& key) {
    std::string out;
    for (char c : key) {
      if (c == '~')
        out += "~0";
      else if (c == '/')
        out += "~1";
      else
        out += c;
    }
    return out;
  }

  /// Requires an object whose keys are all in `allowed` ("notes" is always allowed).
  static void object(const json& j, const std::string& path,
                     const std::vector<std::string_view>& allowed) {
    if (!j.is_object())
      fail(path, "must be an object");
    for (const auto& [key, value] : j.items()) {
      if (key == "notes") {
        if (!value.is_string())
          fail(path + "/notes", "must be a string");
        continue;
      }
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
        fail(path + "/" + escape(key), "unknown field");
    }
  }

  static const json& field(const json& j, const std::string& path, const char* key) {
    auto it = j.find(key);
    if (it == j.end())
      fail(path + "/" + key, "missing");
    return *it;
  }

  static std::string text(const json& j, const std::string& path, const char* key,
                          bool required = true) {
    if (!required && !j.contains(key))
      return {};
    const json& v = field(j, path, key);
    if (!v.is_string() || v.get_ref<const std::string&>().empty())
      fail(path + "/" + key, "must be a non-empty string");
    return v.get<std::string>();
  }

  static double seconds(const json& j, const std::string& path, const char* key) {
    const json& v = field(j, path, key);
    if (!v.is_number())
      fail(path + "/" + key, "must be a number of seconds");
    double d = v.get<double>();
    if (!std::isfinite(d) || d < 0)
      fail(path + "/" + key, "must be finite and not negative");
    return d;
  }

  /// A JSON integer >= 1 (nlohmann keeps signed and unsigned integers apart).
  static std::optional<uint64_t> positive_integer(const json& v) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > 0)
      return v.get<uint64_t>();
    if (v.is_number_integer() && v.get<int64_t>() > 0)
      return static_cast<uint64_t>(v.get<int64_t>());
    return std::nullopt;
  }

  static job_size size(const json& j, const std::string& path) {
    const json& v = field(j, path, "size");
    auto s = v.is_string() ? job_size::parse(v.get_ref<const std::string&>()) : std::nullopt;
    if (!s)
      fail(path + "/size", "must be \"WIDTHxHEIGHTxSECONDS\" with positive integers");
    return *s;
  }

  /// {"s", "min_s"?, "max_s"?, "source"} plus `extra` allowed fields.
  static timing read_timing(const json& j, const std::string& path, bool positive,
                            std::initializer_list<std::string_view> extra = {}) {
    std::vector<std::string_view> allowed{"s", "min_s", "max_s", "source"};
    allowed.insert(allowed.end(), extra.begin(), extra.end());
    object(j, path, allowed);
    timing t;
    t.s = seconds(j, path, "s");
    if (positive && t.s <= 0)
      fail(path + "/s", "must be greater than 0");
    t.min_s = j.contains("min_s") ? seconds(j, path, "min_s") : t.s;
    t.max_s = j.contains("max_s") ? seconds(j, path, "max_s") : t.s;
    if (t.min_s > t.s)
      fail(path + "/min_s", "must not exceed s");
    if (t.max_s < t.s)
      fail(path + "/max_s", "must not be below s");
    t.source = text(j, path, "source");
    return t;
  }

  template <class Row>
  static void sort_unique(std::vector<Row>& rows, const std::string& path) {
    std::set<std::string> seen;
    for (const Row& r : rows)
      if (!seen.insert(r.size.str()).second)
        fail(path, "size " + r.size.str() + " appears twice");
    std::stable_sort(rows.begin(), rows.end(),
                     [](const Row& a, const Row& b) { return a.size.load() < b.size.load(); });
  }

  /// {"watts", "source"}: watts finite and above 0.
  static power_draw read_power(const json& j, const std::string& path) {
    object(j, path, {"watts", "source"});
    const json& v = field(j, path, "watts");
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0)
      fail(path + "/watts", "must be a number of watts greater than 0");
    return {v.get<double>(), text(j, path, "source")};
  }

  static latent_reference read_latent(const json& j, const std::string& path);
  static pool_profile read_pool(const json& j, const std::string& path);
  static decoder_profile read_decoder(const json& j, const std::string& path);
  static void fill_cold_warm(pool_profile& p, sampling_point& sp, bool has_cold, bool has_warm,
                             const std::string& path);
};

latent_reference profile_reader::read_latent(const json& j, const std::string& path) {
  object(j, path, {"size", "bytes", "source"});
  latent_reference l;
  l.size = size(j, path);
  auto bytes = positive_integer(field(j, path, "bytes"));
  if (!bytes)
    fail(path + "/bytes", "must be a positive integer");
  l.bytes = *bytes;
  l.source = text(j, path, "source");
  return l;
}

void profile_reader::fill_cold_warm(pool_profile& p, sampling_point& sp, bool has_cold,
                                    bool has_warm, const std::string& path) {
  if (has_cold && has_warm)
    return;
  if (!has_cold && !has_warm)
    fail(path, "needs \"cold\", \"warm\" or both");
  if (!p.cold_extra)
    fail(path, "has only one of cold/warm, so the pool kind needs \"cold_extra\"");
  double extra = p.cold_extra->s;
  std::string why = "derived with cold_extra (" + p.cold_extra->source + ")";
  if (!has_cold) {
    sp.cold = {sp.warm.s + extra, sp.warm.min_s + extra, sp.warm.max_s + extra,
               "warm + cold_extra; " + why};
    return;
  }
  if (sp.cold.min_s - extra <= 0)
    fail(path + "/cold", "cold minus cold_extra leaves no warm time");
  sp.warm = {sp.cold.s - extra, sp.cold.min_s - extra, sp.cold.max_s - extra,
             "cold - cold_extra; " + why};
}

pool_profile profile_reader::read_pool(const json& j, const std::string& path) {
  object(j, path, {"description", "power", "cold_extra", "capacity", "sampling", "models"});
  pool_profile p;
  p.description = text(j, path, "description", false);
  if (j.contains("power"))
    p.power = read_power(j["power"], path + "/power");
  if (j.contains("cold_extra"))
    p.cold_extra = read_timing(j["cold_extra"], path + "/cold_extra", false);

  std::string cpath = path + "/capacity";
  const json& c = field(j, path, "capacity");
  object(c, cpath, {"max_load", "fail_after_s", "source"});
  const json& ml = field(c, cpath, "max_load");
  if (!ml.is_null()) {
    p.capacity.max_load = positive_integer(ml);
    if (!p.capacity.max_load)
      fail(cpath + "/max_load", "must be a positive integer (width x height x seconds) or null");
  }
  p.capacity.fail_after_s = seconds(c, cpath, "fail_after_s");
  p.capacity.source = text(c, cpath, "source");

  std::string spath = path + "/sampling";
  const json& rows = field(j, path, "sampling");
  if (!rows.is_array() || rows.empty())
    fail(spath, "must be a non-empty array");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::string rpath = spath + "/" + std::to_string(i);
    object(rows[i], rpath, {"size", "cold", "warm"});
    sampling_point sp;
    sp.size = size(rows[i], rpath);
    bool has_cold = rows[i].contains("cold");
    bool has_warm = rows[i].contains("warm");
    if (has_cold)
      sp.cold = read_timing(rows[i]["cold"], rpath + "/cold", true);
    if (has_warm)
      sp.warm = read_timing(rows[i]["warm"], rpath + "/warm", true);
    fill_cold_warm(p, sp, has_cold, has_warm, rpath);
    if (sp.cold.s < sp.warm.s)
      fail(rpath + "/cold/s", "a cold job cannot be faster than a warm one");
    if (p.capacity.max_load && sp.size.load() > *p.capacity.max_load)
      fail(rpath + "/size", "is over the pool kind's capacity/max_load, yet has a time");
    p.sampling.push_back(std::move(sp));
  }
  sort_unique(p.sampling, spath);

  if (j.contains("models")) {
    std::string mpath = path + "/models";
    const json& ms = j["models"];
    if (!ms.is_object())
      fail(mpath, "must be an object of model keys");
    for (auto it = ms.begin(); it != ms.end(); ++it) {
      std::string kpath = mpath + "/" + it.key();
      if (it.key().empty())
        fail(mpath, "a model key must not be empty");
      object(it.value(), kpath, {"warm_factor", "load", "source"});
      model_timing mt;
      if (it.value().contains("warm_factor")) {
        const json& f = it.value()["warm_factor"];
        if (!f.is_number() || !std::isfinite(f.get<double>()) || f.get<double>() <= 0)
          fail(kpath + "/warm_factor", "must be a number greater than 0");
        mt.warm_factor = f.get<double>();
      }
      if (it.value().contains("load"))
        mt.load = read_timing(it.value()["load"], kpath + "/load", false);
      mt.source = text(it.value(), kpath, "source");
      p.models.emplace(it.key(), std::move(mt));
    }
  }
  return p;
}

decoder_profile profile_reader::read_decoder(const json& j, const std::string& path) {
  object(j, path, {"description", "power", "decode", "scale_of"});
  decoder_profile d;
  d.description = text(j, path, "description", false);
  if (j.contains("power"))
    d.power = read_power(j["power"], path + "/power");
  std::string dpath = path + "/decode";
  const json& rows = field(j, path, "decode");
  if (!rows.is_array())
    fail(dpath, "must be an array");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::string rpath = dpath + "/" + std::to_string(i);
    decode_point dp;
    dp.time = read_timing(rows[i], rpath, true, {"size"});
    dp.size = size(rows[i], rpath);
    d.decode.push_back(std::move(dp));
  }
  sort_unique(d.decode, dpath);
  if (j.contains("scale_of")) {
    std::string spath = path + "/scale_of";
    const json& s = j["scale_of"];
    object(s, spath, {"decoder", "factor", "source"});
    decoder_scale sc;
    sc.decoder = text(s, spath, "decoder");
    sc.factor = seconds(s, spath, "factor");
    if (sc.factor <= 0)
      fail(spath + "/factor", "must be greater than 0");
    sc.source = text(s, spath, "source");
    d.scale_of = std::move(sc);
  }
  if (d.decode.empty() && !d.scale_of)
    fail(dpath, "must not be empty unless \"scale_of\" is given");
  return d;
}

profile profile_reader::read(const json& j) {
  object(j, "", {"format", "version", "name", "latent", "handoff", "pools", "encoders",
                 "decoders"});
  if (text(j, "", "format") != "vidline-profile")
    fail("/format", "must be \"vidline-profile\"");
  if (positive_integer(field(j, "", "version")) != uint64_t{1})
    fail("/version", "must be 1 (the only version this build reads)");
  profile p;
  p.name_ = text(j, "", "name");
  p.latent_ = read_latent(field(j, "", "latent"), "/latent");

  const json& h = field(j, "", "handoff");
  object(h, "/handoff", {"remote", "same_host"});
  p.handoff_.remote = read_timing(field(h, "/handoff", "remote"), "/handoff/remote", false);
  p.handoff_.same_host =
      read_timing(field(h, "/handoff", "same_host"), "/handoff/same_host", false);

  auto table = [&](const char* key) -> const json& {
    const json& t = field(j, "", key);
    if (!t.is_object() || t.empty())
      fail(std::string("/") + key, "must be a non-empty object keyed by kind");
    return t;
  };
  // Kinds by their current names (kinds.hpp): an old name loads as the new one, and is
  // noted (preflight names it); both names in one table would be two entries for one kind.
  std::map<std::string, std::string> spelled;  // "table/kind" -> the key it was read under
  auto add = [&](auto& entries, const char* table_name, const std::string& key, auto entry) {
    const std::string path = std::string("/") + table_name + "/" + escape(key);
    const std::string now = current_kind(key);
    auto [first, fresh] = spelled.emplace(std::string(table_name) + "/" + now, key);
    if (!fresh)
      fail(path, "'" + key + "' and '" + first->second + "' name one kind (an old name and "
                 "the current one, '" + now + "'): keep one, named '" + now + "'");
    entries.emplace(now, std::move(entry));
    if (now != key)
      p.renamed_.push_back({path, now});
  };
  for (const auto& [key, value] : table("pools").items())
    add(p.pools_, "pools", key, read_pool(value, "/pools/" + escape(key)));
  for (const auto& [key, value] : table("encoders").items())
    add(p.encoders_, "encoders", key,
        read_timing(value, "/encoders/" + escape(key), false, {"description"}));
  for (const auto& [key, value] : table("decoders").items()) {
    auto d = read_decoder(value, "/decoders/" + escape(key));
    if (d.scale_of)
      d.scale_of->decoder = current_kind(d.scale_of->decoder);
    add(p.decoders_, "decoders", key, std::move(d));
  }

  for (const auto& [key, d] : p.decoders_) {
    if (!d.scale_of)
      continue;
    std::string spath = "/decoders/" + escape(key) + "/scale_of/decoder";
    auto base = p.decoders_.find(d.scale_of->decoder);
    if (base == p.decoders_.end())
      fail(spath, "no decoder kind '" + d.scale_of->decoder + "'");
    if (base->second.scale_of)
      fail(spath, "must name a decoder kind that is not itself scaled");
  }
  return p;
}

profile profile::from_json(const nlohmann::json& j) { return profile_reader::read(j); }

profile profile::parse(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw profile_error("", std::string("not valid JSON: ") + e.what());
  }
  return from_json(j);
}

profile profile::load(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw profile_error("", "cannot read profile file " + file);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad())
    throw profile_error("", "cannot read profile file " + file);
  try {
    return parse(ss.str());
  } catch (const profile_error& e) {
    throw profile_error(e.path(), e.message() + " (in " + file + ")");
  }
}

} // namespace vidline::config::profile
