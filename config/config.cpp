/// Loading a config (file -> JSON -> structs -> defaults -> validation), writing it back
/// as JSON, and the lookups on a loaded cluster.

#include "config/config.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "common/sha256.hpp"
#include "config/json_reader.hpp"
#include "config/schema.hpp"

namespace vidline::config {

namespace {

using detail::child;
using detail::json;
namespace fs = std::filesystem;

/// A config file is a few KiB; this only stops a wrong path (a device, a dump) from
/// being read into memory.
constexpr std::uintmax_t max_file_bytes = 16u << 20;

template <class T>
const T* find_by_name(const std::vector<T>& list, const std::string& name) {
  const auto it =
      std::find_if(list.begin(), list.end(), [&](const T& x) { return x.name == name; });
  return it == list.end() ? nullptr : &*it;
}

/// Words of a GPU model that name a brand or product line, not the chip.
bool is_brand_word(const std::string& word) {
  static const char* const brands[] = {"nvidia", "amd",    "ati",      "intel", "tesla",
                                       "geforce", "quadro", "radeon", "instinct", "arc"};
  return std::any_of(std::begin(brands), std::end(brands),
                     [&](const char* b) { return word == b; });
}

/// Derives the profile key of one stage owner whose config names none.
template <class Stage>
void fill_profile(const cluster& c, Stage& s, const std::vector<std::string>& ids,
                  const std::string& path) {
  if (!s.profile_key.empty())
    return;
  const host* h = c.find_host(s.host);
  if (h == nullptr)
    return;
  std::vector<const gpu*> gpus;
  for (const auto& id : ids) {
    const gpu* g = h->find_gpu(id);
    if (g == nullptr)
      return;
    gpus.push_back(g);
  }
  if (gpus.empty())
    return;
  for (const gpu* g : gpus)
    if (g->model != gpus.front()->model)
      throw config_error(child(path, "profile"),
                         "missing: GPUs '" + gpus.front()->id + "' (" + gpus.front()->model +
                             ") and '" + g->id + "' (" + g->model + ") differ in model, "
                             "so no profile key can be derived; set \"profile\"");
  s.profile_key = default_profile_key(gpus.front()->model, gpus.size());
}

json gpu_to_json(const gpu& g) {
  return {{"id", g.id}, {"model", g.model}, {"vendor", g.vendor},
          {"memory_gib", g.memory_gib}, {"index", g.index}};
}

json host_to_json(const host& h) {
  json gpus = json::array();
  for (const auto& g : h.gpus)
    gpus.push_back(gpu_to_json(g));
  json j = {{"name", h.name}, {"address", h.address}, {"port", h.port},
            {"data_dir", h.data_dir}, {"gpus", std::move(gpus)},
            {"secret_key_file", h.secret_key_file}};
  if (!h.public_key.empty())
    j["public_key"] = h.public_key;
  if (h.bulk_port != 0)
    j["bulk_port"] = h.bulk_port;
  if (!h.collect_dir.empty())
    j["collect_dir"] = h.collect_dir;
  // Only when set, so configs without one keep their digest.
  const http_endpoint off;
  if (h.http.port != 0 || h.http.address != off.address || !h.http.token_file.empty() ||
      h.http.max_request_bytes != off.max_request_bytes) {
    j["http"] = {{"address", h.http.address}, {"port", h.http.port},
                 {"max_request_bytes", h.http.max_request_bytes}};
    if (!h.http.token_file.empty())
      j["http"]["token_file"] = h.http.token_file;
  }
  return j;
}

json backend_to_json(const backend& b) {
  json j = {{"type", b.type}};
  if (b.type == "sim") {
    j["time_scale"] = b.time_scale;
    j["profile"] = b.profile;
  }
  if (!b.options.is_null())
    j["options"] = b.options;
  if (!b.workflows.empty())  // left out when none, so older configs keep their digest
    j["workflows"] = detail::workflows_to_json(b.workflows);
  if (b.warm_start)  // left out when unset, like workflows
    j["warm_start"] = *b.warm_start;
  return j;
}

/// Reads the whole file; every failure is a config_error with path "" naming the file.
std::string read_config_file(const std::string& file) {
  std::error_code ec;
  const auto status = fs::status(file, ec);
  if (ec || !fs::exists(status))
    throw config_error("", file + ": cannot read config: " +
                               (ec ? ec.message() : std::string("no such file")));
  if (!fs::is_regular_file(status))
    throw config_error("", file + ": cannot read config: not a regular file");
  const auto size = fs::file_size(file, ec);
  if (ec || size > max_file_bytes)
    throw config_error("", file + ": cannot read config: " +
                               (ec ? ec.message() : std::string("larger than 16 MiB")));
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  if (in)
    text << in.rdbuf();
  if (!in || in.bad())
    throw config_error("", file + ": cannot read config: " + std::strerror(errno));
  return text.str();
}

/// parse() with `source` (the file name, or "") in syntax-error messages.
cluster parse_text(const std::string& text, const std::string& base_dir,
                   const std::string& source) {
  try {
    cluster c = detail::read_cluster(detail::parse_json(text, source), base_dir);
    detail::fill_default_profiles(c);
    validate(c);
    return c;
  } catch (const json::exception& e) {
    // The readers check every type before converting, so this is a bug of ours; it still
    // leaves as a config_error, as parse() promises.
    throw config_error("", std::string("unexpected JSON error: ") + e.what());
  }
}

} // namespace

config_error::config_error(std::string path, const std::string& message)
    : std::runtime_error(path.empty() ? message : path + ": " + message),
      path_(std::move(path)),
      message_(message) {}

const gpu* host::find_gpu(const std::string& id) const {
  const auto it = std::find_if(gpus.begin(), gpus.end(), [&](const gpu& g) { return g.id == id; });
  return it == gpus.end() ? nullptr : &*it;
}

const host* cluster::find_host(const std::string& name) const {
  return find_by_name(hosts, name);
}

const pool* cluster::find_pool(const std::string& name) const {
  return find_by_name(pools, name);
}

const decoder* cluster::find_decoder(const std::string& name) const {
  return find_by_name(decoders, name);
}

const encoder* cluster::find_encoder(const std::string& name) const {
  return find_by_name(encoders, name);
}

const encoder* cluster::find_encoder_of_host(const std::string& host) const {
  const auto it = std::find_if(encoders.begin(), encoders.end(),
                               [&](const encoder& e) { return e.host == host; });
  return it == encoders.end() ? nullptr : &*it;
}

const mode* cluster::find_mode(const std::string& name) const {
  return find_by_name(modes, name);
}

const backend* cluster::find_backend(const std::string& name) const {
  const auto it = backends.find(name);
  return it == backends.end() ? nullptr : &it->second;
}

std::string default_profile_key(const std::string& model, std::size_t gpu_count) {
  std::string key, word;
  const auto end_word = [&] {
    if (!is_brand_word(word))
      key += word;
    word.clear();
  };
  for (unsigned char ch : model) {
    if (std::isalnum(ch))
      word += static_cast<char>(std::tolower(ch));
    else
      end_word();
  }
  end_word();
  if (key.empty() || gpu_count <= 1)
    return key;
  return key + "x" + std::to_string(gpu_count);
}

namespace detail {

void fill_default_profiles(cluster& c) {
  for (std::size_t i = 0; i < c.pools.size(); ++i)
    fill_profile(c, c.pools[i], c.pools[i].gpus, child("/pools", i));
  for (std::size_t i = 0; i < c.decoders.size(); ++i)
    fill_profile(c, c.decoders[i], {c.decoders[i].gpu}, child("/decoders", i));
  for (std::size_t i = 0; i < c.encoders.size(); ++i)
    fill_profile(c, c.encoders[i], c.encoders[i].gpus, child("/encoders", i));
}

} // namespace detail

cluster parse(const std::string& text, const std::string& base_dir) {
  return parse_text(text, base_dir, "");
}

cluster load(const std::string& file) {
  std::error_code ec;
  const fs::path absolute = fs::absolute(file, ec);
  if (ec)
    throw config_error("", file + ": cannot read config: " + ec.message());
  const std::string text = read_config_file(file);
  cluster c = parse_text(text, absolute.parent_path().string(), file);
  c.source_path = absolute.lexically_normal().string();
  return c;
}

json to_json(const cluster& c) {
  json hosts = json::array(), backends = json::object(), pools = json::array(),
       decoders = json::array(), encoders = json::array(), modes = json::object();
  for (const auto& h : c.hosts)
    hosts.push_back(host_to_json(h));
  for (const auto& [name, b] : c.backends)
    backends[name] = backend_to_json(b);
  for (const auto& p : c.pools)
    pools.push_back({{"name", p.name}, {"host", p.host}, {"gpus", p.gpus},
                     {"backend", p.backend}, {"profile", p.profile_key}});
  for (const auto& d : c.decoders)
    decoders.push_back({{"name", d.name}, {"host", d.host}, {"gpu", d.gpu},
                        {"backend", d.backend}, {"profile", d.profile_key}});
  for (const auto& e : c.encoders)
    encoders.push_back({{"name", e.name}, {"host", e.host}, {"gpus", e.gpus},
                        {"backend", e.backend}, {"profile", e.profile_key}});
  for (const auto& m : c.modes)
    modes[m.name] = {{"pools", m.pools}, {"decoders", m.decoders}, {"policy", m.policy}};
  return {{"cluster", c.name},           {"coordinator", c.coordinator},
          {"hosts", std::move(hosts)},   {"backends", std::move(backends)},
          {"pools", std::move(pools)},   {"decoders", std::move(decoders)},
          {"encoders", std::move(encoders)}, {"modes", std::move(modes)},
          {"knobs", to_json(c.knobs)},   {"plaintext", c.plaintext}};
}

std::string digest(const cluster& c) {
  return to_hex(sha256_of(to_json(c).dump()));
}

} // namespace vidline::config
