#include "nodes/verbs/config_adapt.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "common/files.hpp"
#include "config/config.hpp"
#include "config/json_reader.hpp"
#include "config/profile/kinds.hpp"
#include "nodes/verbs/exit_codes.hpp"

namespace vidline::nodes::verbs {
namespace {

using json = nlohmann::json;
using config::config_error;
using config::detail::object_reader;

/// One GPU of the adapted config.
struct gpu_entry {
  std::string id, model, vendor;
  std::string short_name;   ///< its GPU ids, its single-GPU pool and mode names ("xtx")
  std::string kind;         ///< the profile kind of one such card ("rx7900xtx")
  double memory_gib = 0;
  int index = 0;
  bool decoder = false;
  std::string group;        ///< "<host>/<model>": GPUs that may sample together
};

struct host_entry {
  std::string name;
  json out;                 ///< the host object of the config (gpus filled later)
  std::vector<gpu_entry> gpus;
};

/// A set of same-model GPUs of one host that sample together in some layout.
struct group {
  std::string host, short_name, kind;
  std::vector<std::string> gpu_ids;
  /// Layouts: each a list of pools (name, gpu ids).
  std::vector<std::vector<std::pair<std::string, std::vector<std::string>>>> layouts;
  std::vector<std::string> layout_words;  ///< for mode names: "eight", "four_four", "xtx"
};

std::string number_word(std::size_t n) {
  static const char* words[] = {"zero", "one", "two", "three", "four", "five", "six", "seven",
                                "eight", "nine", "ten", "eleven", "twelve", "thirteen",
                                "fourteen", "fifteen", "sixteen"};
  return n < 17 ? words[n] : std::to_string(n);
}

std::string profile_key(const std::string& short_name, std::size_t n) {
  return n == 1 ? short_name : short_name + "x" + std::to_string(n);
}

} // namespace

nlohmann::json adapt_host_map(const nlohmann::json& map) {
  object_reader top(map, "", {"cluster", "coordinator", "backends", "backend", "knobs", "hosts",
                              "plaintext"});
  json out;
  out["cluster"] = top.string_or("cluster", "line");
  json backends = top.has("backends") ? top.required("backends") : json{{"sim", {{"type", "sim"}}}};
  config::detail::expect_object(backends, top.path_of("backends"));
  if (backends.empty())
    throw config_error(top.path_of("backends"), "names no backend");
  std::string backend = top.has("backend") ? top.string("backend")
                        : backends.size() == 1 ? backends.begin().key() : "";
  if (backend.empty())
    throw config_error(top.path_of("backend"), "several backends: name the one the pools use");
  if (!backends.contains(backend))
    throw config_error(top.path_of("backend"), "no backend '" + backend + "' in backends");
  out["backends"] = backends;

  const json& hosts_json = top.required("hosts");
  config::detail::expect_array(hosts_json, top.path_of("hosts"));
  if (hosts_json.empty())
    throw config_error(top.path_of("hosts"), "needs at least one host");
  std::vector<host_entry> hosts;
  for (std::size_t i = 0; i < hosts_json.size(); ++i) {
    std::string hp = config::detail::child("/hosts", i);
    object_reader h(hosts_json[i], hp, {"name", "address", "port", "bulk_port", "data_dir",
                                        "gpus", "public_key", "secret_key_file"});
    host_entry e;
    e.name = h.string("name");
    e.out = {{"name", e.name},
             {"address", h.string_or("address", "127.0.0.1")},
             {"port", h.has("port") ? h.integer("port", 1, 65535) : 7601 + static_cast<int64_t>(i)},
             {"data_dir", h.string_or("data_dir", "data/" + e.name)}};
    // Keys pass through: the config will not validate without them unless plaintext.
    for (const char* key : {"public_key", "secret_key_file"})
      if (h.has(key))
        e.out[key] = h.string(key);
    if (h.has("bulk_port"))
      e.out["bulk_port"] = h.integer("bulk_port", 1, 65535);
    std::map<std::string, int> next_index;  // per vendor
    std::map<std::string, int> short_uses;
    if (h.has("gpus")) {
      const json& gj = h.required("gpus");
      config::detail::expect_array(gj, h.path_of("gpus"));
      for (std::size_t k = 0; k < gj.size(); ++k) {
        std::string gp = config::detail::child(h.path_of("gpus"), k);
        object_reader g(gj[k], gp, {"model", "vendor", "memory_gib", "count", "profile", "name",
                                    "first_index", "decoder"});
        gpu_entry base;
        base.model = g.string("model");
        base.vendor = g.string("vendor");
        base.memory_gib = g.number("memory_gib");
        // The kind by its current name (a kind's old name is read as the new one); the
        // short name as given (a map naming an old kind keeps its pools' names).
        const std::string profile = g.has("profile") ? g.string("profile")
                                                     : config::default_profile_key(base.model, 1);
        if (profile.empty())
          throw config_error(g.path_of("model"), "gives no profile kind: add \"profile\"");
        base.kind = config::profile::current_kind(profile);
        base.short_name = g.has("name") ? g.string("name") : profile;
        if (base.short_name.empty())
          throw config_error(g.path_of("name"), "must not be empty; leave it out to name the "
                                                "GPUs after their profile kind");
        base.decoder = g.has("decoder") && g.required("decoder").is_boolean() && g.required("decoder").get<bool>();
        if (g.has("decoder") && !g.required("decoder").is_boolean())
          throw config_error(g.path_of("decoder"), "must be true or false");
        auto count = g.has("count") ? g.integer("count", 1, 64) : 1;
        if (base.decoder && count != 1)
          throw config_error(g.path_of("decoder"), "marks a single GPU (count 1)");
        if (g.has("first_index"))
          next_index[base.vendor] = static_cast<int>(g.integer("first_index", 0, 1023));
        int uses = short_uses[base.short_name]++;
        std::string stem = uses == 0 ? base.short_name : base.short_name + "_" + std::to_string(uses);
        for (int64_t n = 0; n < count; ++n) {
          gpu_entry x = base;
          x.index = next_index[base.vendor]++;
          x.id = count == 1 ? stem : stem + "-" + std::to_string(n);
          x.group = e.name + "/" + stem;
          e.gpus.push_back(x);
        }
      }
    }
    hosts.push_back(std::move(e));
  }
  std::string coordinator = top.has("coordinator") ? top.string("coordinator") : hosts.front().name;

  // The decoder: marked, or the smallest single GPU away from the biggest host.
  std::vector<std::pair<std::string, std::string>> decoders;  // (host, gpu id)
  for (auto& h : hosts)
    for (auto& g : h.gpus)
      if (g.decoder)
        decoders.emplace_back(h.name, g.id);
  auto biggest = std::max_element(hosts.begin(), hosts.end(), [](auto& a, auto& b) {
    return a.gpus.size() < b.gpus.size();
  });
  if (decoders.empty()) {
    const gpu_entry* pick = nullptr;
    std::string pick_host;
    for (auto& h : hosts) {
      if (hosts.size() > 1 && h.name == biggest->name)
        continue;
      std::map<std::string, int> per_group;
      for (auto& g : h.gpus)
        ++per_group[g.group];
      for (auto& g : h.gpus)
        if (per_group[g.group] == 1 && (pick == nullptr || g.memory_gib < pick->memory_gib)) {
          pick = &g;
          pick_host = h.name;
        }
    }
    if (pick == nullptr)
      throw config_error("/hosts", "no GPU to decode on: mark one with \"decoder\": true");
    decoders.emplace_back(pick_host, pick->id);
  }
  std::set<std::pair<std::string, std::string>> decoder_set(decoders.begin(), decoders.end());

  // Groups of sampling GPUs and their layouts.
  std::vector<group> groups;
  for (auto& h : hosts) {
    std::map<std::string, group> by;
    std::vector<std::string> order;
    for (auto& g : h.gpus) {
      if (decoder_set.count({h.name, g.id}))
        continue;
      if (!by.count(g.group)) {
        order.push_back(g.group);
        by[g.group].host = h.name;
        by[g.group].short_name = g.group.substr(g.group.find('/') + 1);
        by[g.group].kind = g.kind;
      }
      by[g.group].gpu_ids.push_back(g.id);
    }
    for (auto& k : order)
      groups.push_back(by[k]);
  }
  if (groups.empty())
    throw config_error("/hosts", "no GPU is left to sample on once the decoder is taken");
  for (auto& g : groups) {
    std::size_t n = g.gpu_ids.size();
    if (n == 1) {
      g.layouts.push_back({{g.short_name, g.gpu_ids}});
      g.layout_words.push_back(g.short_name);
    } else {
      g.layouts.push_back({{number_word(n), g.gpu_ids}});
      g.layout_words.push_back(number_word(n));
      if (n % 2 == 0) {
        std::vector<std::string> a(g.gpu_ids.begin(), g.gpu_ids.begin() + n / 2),
          b(g.gpu_ids.begin() + n / 2, g.gpu_ids.end());
        g.layouts.push_back({{number_word(n / 2) + "_a", a}, {number_word(n / 2) + "_b", b}});
        g.layout_words.push_back(number_word(n / 2) + "_" + number_word(n / 2));
      }
    }
  }
  // Pool names must be unique: prefix the host where two groups would clash.
  std::map<std::string, int> counts;
  for (auto& g : groups)
    for (auto& l : g.layouts)
      for (auto& p : l)
        ++counts[p.first];
  for (auto& g : groups)
    for (auto& l : g.layouts)
      for (auto& p : l)
        if (counts[p.first] > 1)
          p.first = g.host + "_" + g.short_name + "_" + p.first;

  // Hosts' GPU lists, pools, encoders, decoders.
  json hosts_out = json::array(), pools = json::array(), encoders = json::array(), decs = json::array();
  for (auto& h : hosts) {
    json gl = json::array();
    for (auto& g : h.gpus)
      gl.push_back({{"id", g.id}, {"model", g.model}, {"vendor", g.vendor},
                    {"memory_gib", g.memory_gib}, {"index", g.index}});
    h.out["gpus"] = gl;
    hosts_out.push_back(h.out);
  }
  std::map<std::string, const group*> largest_of_host;
  for (auto& g : groups) {
    const group*& cur = largest_of_host[g.host];
    if (cur == nullptr || g.gpu_ids.size() > cur->gpu_ids.size())
      cur = &g;
    for (auto& l : g.layouts)
      for (auto& [name, ids] : l)
        pools.push_back({{"name", name}, {"host", g.host}, {"gpus", ids}, {"backend", backend},
                         {"profile", profile_key(g.kind, ids.size())}});
  }
  for (auto& [host, g] : largest_of_host) {
    std::size_t n = g->gpu_ids.size();
    std::vector<std::string> ids(g->gpu_ids.begin(), g->gpu_ids.begin() + (n == 1 ? 1 : n / 2));
    encoders.push_back({{"name", "encoder_" + host}, {"host", host}, {"gpus", ids},
                        {"backend", backend}, {"profile", profile_key(g->kind, ids.size())}});
  }
  std::vector<std::string> decoder_names;
  for (auto& [host, id] : decoders) {
    std::string kind;
    for (auto& h : hosts)
      for (auto& g : h.gpus)
        if (h.name == host && g.id == id)
          kind = g.kind;
    std::string name = decoders.size() == 1 ? id : host + "_" + id;
    decoder_names.push_back(name);
    decs.push_back({{"name", name}, {"host", host}, {"gpu", id}, {"backend", backend},
                    {"profile", kind}});
  }

  // Modes: the largest group always, in each layout; every other group in or out.
  std::size_t main = 0;
  for (std::size_t i = 1; i < groups.size(); ++i)
    if (groups[i].gpu_ids.size() > groups[main].gpu_ids.size())
      main = i;
  std::vector<std::size_t> choice(groups.size(), 0);  // 0 = out (not for main), k = layout k-1
  json modes = json::object();
  std::string plus = "_plus_" + number_word(decoders.size());
  for (;;) {
    std::vector<std::string> words, mode_pools;
    bool alone = true;
    for (std::size_t i = 0; i < groups.size(); ++i) {
      std::size_t c = i == main ? choice[i] + 1 : choice[i];
      if (c == 0)
        continue;
      if (i != main)
        alone = false;
      words.push_back(groups[i].layout_words[c - 1]);
      for (auto& p : groups[i].layouts[c - 1])
        mode_pools.push_back(p.first);
    }
    // The main group alone in one piece is "single_<n>", as the reference names it.
    std::string name = (alone && groups[main].layouts[choice[main]].size() == 1 &&
                        groups[main].gpu_ids.size() > 1 ? "single_" : "");
    for (std::size_t w = 0; w < words.size(); ++w)
      name += (w ? "_" : "") + words[w];
    name += plus;
    if (modes.size() >= 64)
      throw config_error("/hosts", "more than 64 modes: mark fewer GPU groups or split the line");
    modes[name] = {{"pools", mode_pools}, {"decoders", decoder_names}};
    // Next combination (odometer).
    std::size_t i = 0;
    for (; i < groups.size(); ++i) {
      std::size_t limit = i == main ? groups[i].layouts.size() : groups[i].layouts.size() + 1;
      if (++choice[i] < limit)
        break;
      choice[i] = 0;
    }
    if (i == groups.size())
      break;
  }

  out["coordinator"] = coordinator;
  out["hosts"] = hosts_out;
  out["pools"] = pools;
  out["decoders"] = decs;
  out["encoders"] = encoders;
  out["modes"] = modes;
  if (top.has("knobs"))
    out["knobs"] = top.required("knobs");
  if (top.has("plaintext"))
    out["plaintext"] = top.required("plaintext");
  return out;
}

int run_config_adapt(const std::string& host_map_file, const std::string& out_file,
                     const std::string& keys_dir) {
  json map;
  try {
    map = config::detail::parse_json(files::read_all(host_map_file), host_map_file);
  } catch (const config::config_error& e) {
    std::fprintf(stderr, "host map error: %s\n", e.what());
    return exit_code::usage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "host map error: %s\n", e.what());
    return exit_code::usage;
  }
  json cfg;
  try {
    cfg = adapt_host_map(map);
  } catch (const config::config_error& e) {
    std::fprintf(stderr, "host map error: %s: %s\n", host_map_file.c_str(), e.what());
    return exit_code::usage;
  }
  // The hosts' keys: from the host map, else `vidline keygen`'s files in --keys DIR.
  if (!cfg.value("plaintext", false))
    for (std::size_t i = 0; i < cfg["hosts"].size(); ++i) {
      auto& h = cfg["hosts"][i];
      if (h.contains("public_key"))
        continue;
      const std::string name = h["name"].get<std::string>();
      const std::string keygen = "vidline keygen --out " +
                                 (keys_dir.empty() ? std::string("keys") : keys_dir) +
                                 " --name " + name;
      if (keys_dir.empty()) {
        std::fprintf(stderr, "host map error: %s: /hosts/%zu (%s) has no public_key: make the "
                             "host's keys with `%s` and give --keys keys (or public_key and "
                             "secret_key_file in the host map); nothing written\n",
                     host_map_file.c_str(), i, name.c_str(), keygen.c_str());
        return exit_code::usage;
      }
      const auto pub = std::filesystem::absolute(keys_dir + "/" + name + ".pub");
      std::string key;
      try {
        key = files::read_all(pub.string());
      } catch (const std::exception&) {
        std::fprintf(stderr, "host map error: --keys: %s does not exist: make it with `%s`; "
                             "nothing written\n", pub.string().c_str(), keygen.c_str());
        return exit_code::usage;
      }
      while (!key.empty() && (key.back() == '\n' || key.back() == '\r' || key.back() == ' '))
        key.pop_back();
      h["public_key"] = key;
      if (!h.contains("secret_key_file"))
        h["secret_key_file"] = std::filesystem::absolute(keys_dir + "/" + name + ".key").string();
    }
  std::string text = cfg.dump(2) + "\n";
  auto dir = std::filesystem::absolute(out_file).parent_path().string();
  config::cluster c;
  try {
    c = config::parse(text, dir);
  } catch (const config::config_error& e) {
    std::fprintf(stderr, "the adapted config is not valid (%s); nothing written\n", e.what());
    return exit_code::usage;
  }
  files::make_dirs(dir);
  files::write_atomic(out_file, text);
  std::printf("wrote %s: cluster %s, %zu hosts, %zu pools, %zu decoder(s), %zu modes\n",
              out_file.c_str(), c.name.c_str(), c.hosts.size(), c.pools.size(),
              c.decoders.size(), c.modes.size());
  for (auto& m : c.modes) {
    std::string pools;
    for (auto& p : m.pools)
      pools += (pools.empty() ? "" : ", ") + p;
    std::printf("  mode %-32s pools %s\n", m.name.c_str(), pools.c_str());
  }
  return exit_code::ok;
}

} // namespace vidline::nodes::verbs
