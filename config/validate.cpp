/// The meaning of a cluster: names, ranges, references between entries, and which GPUs
/// may be shared. Works on the structs, so a cluster built in code is held to the same
/// rules as one read from a file; paths are the JSON pointers the file would have.

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <arpa/inet.h>

#include "config/json_reader.hpp"
#include "config/schema.hpp"

namespace vidline::config {

namespace {

using detail::child;
using detail::check_name;
using detail::check_one_of;

[[noreturn]] void fail(const std::string& path, const std::string& message) {
  throw config_error(path, message);
}

/// Throws at `path` when the list at `path` is empty.
template <class T>
void check_not_empty(const std::vector<T>& list, const std::string& path, const char* what) {
  if (list.empty())
    fail(path, std::string("must hold at least one ") + what);
}

/// Remembers the names seen so far of one kind of entry and rejects a second use.
/// `what` says what the name is: "host name", "GPU id", ...
class unique_names {
public:
  explicit unique_names(const char* what) : what_(what) {}

  void add(const std::string& name, const std::string& path) {
    const auto [it, fresh] = first_path_.emplace(name, path);
    if (!fresh)
      fail(path, std::string("duplicate ") + what_ + " '" + name + "' (first at " +
                     it->second + ")");
  }

private:
  const char* what_;
  std::map<std::string, std::string> first_path_;
};

/// Throws "unknown <what> '<name>'<where>" at `path`, suggesting the nearest of `entries`.
template <class Entries, class NameOf>
void check_known(const std::string& name, bool found, const Entries& entries, NameOf name_of,
                 const std::string& path, const std::string& what,
                 const std::string& where = "") {
  if (found)
    return;
  std::vector<std::string> known;
  for (const auto& e : entries)
    known.push_back(name_of(e));
  fail(path, "unknown " + what + " '" + name + "'" + where + detail::did_you_mean(name, known) +
                 (known.empty() ? "" : "; known: " + detail::join(known)));
}

const host& known_host(const cluster& c, const std::string& name, const std::string& path) {
  const host* h = c.find_host(name);
  check_known(name, h != nullptr, c.hosts, [](const host& x) { return x.name; }, path, "host");
  return *h;
}

void check_known_backend(const cluster& c, const std::string& name, const std::string& path) {
  check_known(name, c.find_backend(name) != nullptr, c.backends,
              [](const auto& item) { return item.first; }, path, "backend");
}

const gpu& known_gpu(const host& h, const std::string& id, const std::string& path) {
  const gpu* g = h.find_gpu(id);
  check_known(id, g != nullptr, h.gpus, [](const gpu& x) { return x.id; }, path, "GPU",
              " on host '" + h.name + "'");
  return *g;
}

void check_gpu(const gpu& g, const std::string& path) {
  check_name(g.id, child(path, "id"));
  if (g.model.empty())
    fail(child(path, "model"), "must not be empty");
  check_one_of(g.vendor, detail::vendors(), child(path, "vendor"), "vendor");
  if (!std::isfinite(g.memory_gib) || g.memory_gib <= 0)
    fail(child(path, "memory_gib"), "must be more than 0");
  if (g.index < 0 || g.index > detail::gpu_index_max)
    fail(child(path, "index"), detail::range_message(0, detail::gpu_index_max,
                                                     std::to_string(g.index)));
}

/// A GPU id is unique within its host; so is a device index within one vendor's runtime.
void check_gpus_of_host(const host& h, const std::string& path) {
  unique_names ids("GPU id");
  std::map<std::pair<std::string, int>, std::string> devices;
  for (std::size_t i = 0; i < h.gpus.size(); ++i) {
    const gpu& g = h.gpus[i];
    const std::string gpu_path = child(child(path, "gpus"), i);
    check_gpu(g, gpu_path);
    ids.add(g.id, child(gpu_path, "id"));
    const auto [it, fresh] = devices.emplace(std::make_pair(g.vendor, g.index), g.id);
    if (!fresh)
      fail(child(gpu_path, "index"), g.vendor + " device index " + std::to_string(g.index) +
                                         " is already GPU '" + it->second + "'");
  }
}

bool is_ipv6_text(const std::string& s) {
  in6_addr a{};
  return ::inet_pton(AF_INET6, s.c_str(), &a) == 1;
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

/// An address with a port glued on ("10.0.0.1:7601", "node-a:7601", "[::1]:7601") would be
/// probed and bound as address:port:port: refused, naming the host, since the ports are
/// fields of their own. A bare IPv6 address ("::1", "fe80::2") has colons and no port.
void check_address(const host& h, const std::string& path) {
  const std::string& a = h.address;
  const std::string field = child(path, "address");
  if (a.empty() || a.find_first_of(" \t\r\n/") != std::string::npos)
    fail(field, "must be an IP address or DNS name, without scheme, path or spaces, got '" +
                    a + "'");
  auto port_glued = [&](const std::string& bare, const std::string& port) {
    fail(field, "host '" + h.name + "' has address '" + a + "', which carries a port (" + port +
                    "): give the address alone ('" + bare + "'); ports are configured "
                    "separately, in port and bulk_port");
  };
  if (a.front() == '[') {
    const auto close = a.find(']');
    if (close == std::string::npos || !is_ipv6_text(a.substr(1, close - 1)))
      fail(field, "host '" + h.name + "': '" + a + "' is not a bracketed IPv6 address");
    if (close + 1 == a.size())
      return;
    if (a[close + 1] == ':' && all_digits(a.substr(close + 2)))
      port_glued(a.substr(0, close + 1), a.substr(close + 2));
    fail(field, "host '" + h.name + "': unexpected text after ']' in '" + a + "'");
  }
  const auto colon = a.find(':');
  if (colon == std::string::npos || is_ipv6_text(a))
    return;
  if (a.find(':', colon + 1) == std::string::npos && all_digits(a.substr(colon + 1)))
    port_glued(a.substr(0, colon), a.substr(colon + 1));
  fail(field, "host '" + h.name + "': '" + a + "' is neither an IPv4 or IPv6 address nor a DNS "
                  "name (a ':' belongs only in an IPv6 address)");
}

/// The HTTP endpoint: off, or a port of its own on an address it may bind; a token file
/// wherever the address is not loopback (docs/http.md, "Access").
void check_http(const host& h, const std::string& path) {
  const http_endpoint& e = h.http;
  const std::string base = child(path, "http");
  if (e.port == 0)
    return;
  if (e.port < detail::port_min || e.port > detail::port_max)
    fail(child(base, "port"), detail::range_message(0, detail::port_max, std::to_string(e.port)));
  if (e.port == h.port || (h.bulk_port != 0 && e.port == h.bulk_port))
    fail(child(base, "port"), "must differ from the host's port and bulk_port (" +
                                  std::to_string(e.port) + ")");
  if (e.address.empty() || e.address.find_first_of(" \t\r\n/[]") != std::string::npos)
    fail(child(base, "address"), "must be an IP address or DNS name to bind, got '" + e.address + "'");
  if (!e.token_file.empty() && e.token_file.front() != '/')
    fail(child(base, "token_file"), "must be an absolute path after loading, got '" +
                                        e.token_file + "'");
  if (e.token_file.empty() && !is_loopback_address(e.address))
    fail(child(base, "token_file"),
         "missing: host '" + h.name + "' serves HTTP on '" + e.address +
             "', which is not loopback; name a file holding a bearer token (docs/http.md), "
             "or bind 127.0.0.1");
  if (e.max_request_bytes < static_cast<uint64_t>(detail::http_request_bytes_min) ||
      e.max_request_bytes > static_cast<uint64_t>(detail::http_request_bytes_max))
    fail(child(base, "max_request_bytes"),
         detail::range_message(detail::http_request_bytes_min, detail::http_request_bytes_max,
                               std::to_string(e.max_request_bytes)));
}

void check_host(const host& h, const std::string& path) {
  check_name(h.name, child(path, "name"));
  check_address(h, path);
  if (h.port < detail::port_min || h.port > detail::port_max)
    fail(child(path, "port"), detail::range_message(detail::port_min, detail::port_max,
                                                    std::to_string(h.port)));
  if (h.bulk_port != 0 && (h.bulk_port < detail::port_min || h.bulk_port > detail::port_max))
    fail(child(path, "bulk_port"), detail::range_message(detail::port_min, detail::port_max,
                                                         std::to_string(h.bulk_port)));
  if (h.bulk_port == h.port)
    fail(child(path, "bulk_port"), "must differ from port (" + std::to_string(h.port) + ")");
  if (h.data_dir.empty() || h.data_dir.front() != '/')
    fail(child(path, "data_dir"), "must be an absolute path after loading, got '" +
                                      h.data_dir + "'");
  if (h.secret_key_file.empty() || h.secret_key_file.front() != '/')
    fail(child(path, "secret_key_file"), "must be an absolute path after loading, got '" +
                                             h.secret_key_file + "'");
  if (!h.public_key.empty() && !is_z85_key_text(h.public_key))
    fail(child(path, "public_key"), "must be a Z85 CURVE public key (40 characters, as "
                                    "`vidline keygen` prints), got '" + h.public_key + "'");
  if (!h.collect_dir.empty()) {
    if (h.collect_dir.front() != '/')
      fail(child(path, "collect_dir"), "must be an absolute path after loading, got '" +
                                           h.collect_dir + "'");
    // The node's own files (latents, outputs, journal) are swept by its retention rules.
    const std::string inside = h.data_dir + "/";
    if (h.collect_dir == h.data_dir || h.collect_dir.compare(0, inside.size(), inside) == 0)
      fail(child(path, "collect_dir"), "must be outside the host's data_dir (" + h.data_dir +
                                           "), got '" + h.collect_dir + "'");
  }
  check_gpus_of_host(h, path);
  check_http(h, path);
}

/// Every link is authenticated with CURVE unless the config says plaintext, which only a
/// cluster wholly on loopback may say: each host needs a listed key, and keys are unique
/// (a key names its host).
void check_keys(const cluster& c) {
  std::map<std::string, std::string> owner;
  for (std::size_t i = 0; i < c.hosts.size(); ++i) {
    const host& h = c.hosts[i];
    const std::string path = child("/hosts", i);
    if (c.plaintext) {
      if (!is_loopback_address(h.address))
        fail("/plaintext", "plaintext links are allowed only when every host is on loopback, "
                           "and host '" + h.name + "' has address '" + h.address +
                               "': remove \"plaintext\" and give every host a "
                               "public_key (vidline keygen)");
      continue;
    }
    if (h.public_key.empty())
      fail(child(path, "public_key"),
           "missing: every host needs its CURVE public key (vidline keygen --out " +
               h.data_dir + "/keys --name " + h.name +
               " prints it); on loopback only, \"plaintext\": true turns CURVE off");
    const auto [it, fresh] = owner.emplace(h.public_key, h.name);
    if (!fresh)
      fail(child(path, "public_key"), "same key as host '" + it->second +
                                          "': each host needs its own pair");
  }
}

/// Two nodes cannot bind one endpoint, and two nodes on one machine must not share a
/// data directory (their journals and latents would collide).
void check_hosts(const cluster& c) {
  check_not_empty(c.hosts, "/hosts", "host");
  unique_names names("host name");
  std::map<std::pair<std::string, int>, std::string> endpoints;
  std::map<std::pair<std::string, std::string>, std::string> dirs;
  for (std::size_t i = 0; i < c.hosts.size(); ++i) {
    const host& h = c.hosts[i];
    const std::string path = child("/hosts", i);
    check_host(h, path);
    names.add(h.name, child(path, "name"));
    const auto endpoint = endpoints.emplace(std::make_pair(h.address, h.port), h.name);
    if (!endpoint.second)
      fail(child(path, "port"), "same address:port " + h.address + ":" +
                                    std::to_string(h.port) + " as host '" +
                                    endpoint.first->second + "'");
    if (h.bulk_port != 0) {
      const auto bulk = endpoints.emplace(std::make_pair(h.address, h.bulk_port), h.name);
      if (!bulk.second)
        fail(child(path, "bulk_port"), "same address:port " + h.address + ":" +
                                           std::to_string(h.bulk_port) + " as a port of host '" +
                                           bulk.first->second + "'");
    }
    if (h.http.port != 0) {
      const auto web = endpoints.emplace(std::make_pair(h.address, h.http.port), h.name);
      if (!web.second)
        fail(child(child(path, "http"), "port"), "same address:port " + h.address + ":" +
                                                     std::to_string(h.http.port) +
                                                     " as a port of host '" + web.first->second + "'");
    }
    const auto dir = dirs.emplace(std::make_pair(h.address, h.data_dir), h.name);
    if (!dir.second)
      fail(child(path, "data_dir"), "same data_dir as host '" + dir.first->second +
                                        "' at the same address " + h.address);
  }
  known_host(c, c.coordinator, "/coordinator");
}

void check_backends(const cluster& c) {
  if (c.backends.empty())
    fail("/backends", "must hold at least one backend");
  for (const auto& [name, b] : c.backends) {
    const std::string path = child("/backends", name);
    check_name(name, path);
    if (b.name != name)
      fail(path, "backend name '" + b.name + "' differs from its key '" + name + "'");
    check_one_of(b.type, detail::backend_types(), child(path, "type"), "backend type");
    if (b.type == "sim" && (!std::isfinite(b.time_scale) || b.time_scale <= 0))
      fail(child(path, "time_scale"), "must be more than 0 (real seconds per simulated "
                                      "second)");
    if (!b.options.is_null() && !b.options.is_object())
      fail(child(path, "options"), "must be an object");
    if (b.type == "sim" && b.options.is_object())
      for (auto& [key, value] : b.options.items()) {
        if (key != "steps")
          fail(child(child(path, "options"), key), "unknown option of the sim backend (it takes: steps)");
        if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > 10000)
          fail(child(child(path, "options"), key), "must be a whole number from 1 to 10000");
      }
  }
}

/// The GPUs of a pool or encoder: listed, on its host, each once, of one vendor.
void check_gpu_list(const host& h, const std::vector<std::string>& ids, const std::string& path) {
  check_not_empty(ids, path, "GPU");
  unique_names seen("GPU");
  const gpu* first = nullptr;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::string gpu_path = child(path, i);
    const gpu& g = known_gpu(h, ids[i], gpu_path);
    seen.add(g.id, gpu_path);
    if (first != nullptr && g.vendor != first->vendor)
      fail(gpu_path, "GPU '" + g.id + "' is " + g.vendor + " but '" + first->id + "' is " +
                         first->vendor + "; GPUs that work together must share a vendor");
    if (first == nullptr)
      first = &g;
  }
}

/// What pools, decoders and encoders have in common: a unique name, a known host and a
/// known backend. Returns the host.
template <class Stage>
const host& check_stage(const cluster& c, const Stage& s, const std::string& path,
                        unique_names& names) {
  check_name(s.name, child(path, "name"));
  names.add(s.name, child(path, "name"));
  const host& h = known_host(c, s.host, child(path, "host"));
  check_known_backend(c, s.backend, child(path, "backend"));
  return h;
}

void check_profile_key(const std::string& key, const std::string& path) {
  check_name(key, child(path, "profile"));
}

void check_pools(const cluster& c) {
  check_not_empty(c.pools, "/pools", "pool");
  unique_names names("pool name");
  for (std::size_t i = 0; i < c.pools.size(); ++i) {
    const std::string path = child("/pools", i);
    const host& h = check_stage(c, c.pools[i], path, names);
    check_gpu_list(h, c.pools[i].gpus, child(path, "gpus"));
    check_profile_key(c.pools[i].profile_key, path);
    if (c.find_encoder_of_host(h.name) == nullptr)
      fail(child(path, "host"), "host '" + h.name + "' of pool '" + c.pools[i].name +
                                    "' has no encoder; add one to /encoders");
  }
}

void check_decoders(const cluster& c) {
  check_not_empty(c.decoders, "/decoders", "decoder");
  unique_names names("decoder name");
  for (std::size_t i = 0; i < c.decoders.size(); ++i) {
    const std::string path = child("/decoders", i);
    const host& h = check_stage(c, c.decoders[i], path, names);
    known_gpu(h, c.decoders[i].gpu, child(path, "gpu"));
    check_profile_key(c.decoders[i].profile_key, path);
  }
}

/// One encoder per host: pools find theirs by host (cluster::find_encoder_of_host).
void check_encoders(const cluster& c) {
  unique_names names("encoder name");
  std::map<std::string, std::string> encoder_of_host;
  for (std::size_t i = 0; i < c.encoders.size(); ++i) {
    const encoder& e = c.encoders[i];
    const std::string path = child("/encoders", i);
    const host& h = check_stage(c, e, path, names);
    check_gpu_list(h, e.gpus, child(path, "gpus"));
    check_profile_key(e.profile_key, path);
    const auto [it, fresh] = encoder_of_host.emplace(h.name, e.name);
    if (!fresh)
      fail(child(path, "host"), "host '" + h.name + "' already has encoder '" + it->second +
                                    "'; a host has at most one");
  }
}

/// Claims GPUs for the pools and decoders of one mode: they run at the same time, so no
/// GPU may serve two of them. (Pools of different modes may share GPUs.)
class gpu_claims {
public:
  void claim(const std::string& host, const std::string& gpu, const std::string& owner,
             const std::string& path) {
    const auto [it, fresh] = owner_.emplace(std::make_pair(host, gpu), owner);
    if (!fresh)
      fail(path, owner + " uses GPU '" + gpu + "' of host '" + host + "', which " +
                     it->second + " also uses in this mode; the pools and decoders of "
                     "one mode need GPUs of their own");
  }

private:
  std::map<std::pair<std::string, std::string>, std::string> owner_;
};

void check_mode(const cluster& c, const mode& m, const std::string& path) {
  check_name(m.name, path);
  check_not_empty(m.pools, child(path, "pools"), "pool");
  check_not_empty(m.decoders, child(path, "decoders"), "decoder");
  check_one_of(m.policy, detail::dispatch_policies(), child(path, "policy"), "dispatch policy");
  gpu_claims claims;
  unique_names pools("pool"), decoders("decoder");
  for (std::size_t i = 0; i < m.pools.size(); ++i) {
    const std::string p = child(child(path, "pools"), i);
    const pool* pl = c.find_pool(m.pools[i]);
    check_known(m.pools[i], pl != nullptr, c.pools, [](const pool& x) { return x.name; }, p,
                "pool");
    pools.add(pl->name, p);
    for (const auto& g : pl->gpus)
      claims.claim(pl->host, g, "pool '" + pl->name + "'", p);
  }
  for (std::size_t i = 0; i < m.decoders.size(); ++i) {
    const std::string p = child(child(path, "decoders"), i);
    const decoder* d = c.find_decoder(m.decoders[i]);
    check_known(m.decoders[i], d != nullptr, c.decoders,
                [](const decoder& x) { return x.name; }, p, "decoder");
    decoders.add(d->name, p);
    claims.claim(d->host, d->gpu, "decoder '" + d->name + "'", p);
  }
}

void check_modes(const cluster& c) {
  check_not_empty(c.modes, "/modes", "mode");
  unique_names names("mode name");
  for (const mode& m : c.modes) {
    const std::string path = child("/modes", m.name);
    names.add(m.name, path);
    check_mode(c, m, path);
  }
}

} // namespace

void validate(const cluster& c) {
  check_name(c.name, "/cluster");
  check_hosts(c);
  check_keys(c);
  check_backends(c);
  check_encoders(c);
  check_pools(c);
  check_decoders(c);
  check_modes(c);
  validate(c.knobs);
}

bool is_loopback_address(const std::string& address) {
  if (address == "localhost" || address == "::1" || address == "[::1]")
    return true;
  // 127.0.0.0/8 as a dotted quad of decimal numbers, nothing else (not "127.evil.com").
  if (address.rfind("127.", 0) != 0)
    return false;
  int parts = 0;
  std::size_t i = 0;
  while (i <= address.size()) {
    std::size_t j = address.find('.', i);
    if (j == std::string::npos)
      j = address.size();
    const std::string part = address.substr(i, j - i);
    if (part.empty() || part.size() > 3 ||
        part.find_first_not_of("0123456789") != std::string::npos || std::stoi(part) > 255)
      return false;
    ++parts;
    i = j + 1;
  }
  return parts == 4;
}

bool is_z85_key_text(const std::string& key) {
  static const std::string alphabet =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
  return key.size() == 40 && key.find_first_not_of(alphabet) == std::string::npos;
}

} // namespace vidline::config
