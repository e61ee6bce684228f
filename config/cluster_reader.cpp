/// JSON -> cluster: the shape of the document (keys, required fields, types). What the
/// values mean is checked afterwards, on the structs, by validate.cpp.

#include <filesystem>
#include <system_error>

#include "config/json_reader.hpp"
#include "config/profile/kinds.hpp"
#include "config/schema.hpp"

namespace vidline::config::detail {

namespace {

namespace fs = std::filesystem;

/// `p` made absolute against `base_dir` and normalised, without a trailing '/'.
/// Empty stays empty, for validate() to report.
std::string resolve_path(const std::string& p, const std::string& base_dir,
                         const std::string& path) {
  if (p.empty())
    return p;
  std::error_code ec;
  const fs::path base = base_dir.empty() ? fs::current_path(ec) : fs::absolute(base_dir, ec);
  if (ec)
    throw config_error(path, "cannot resolve '" + p + "' against '" + base_dir +
                                 "': " + ec.message());
  std::string out = (base / p).lexically_normal().string();
  if (out.size() > 1 && out.back() == '/')
    out.pop_back();
  return out;
}

gpu read_gpu(const json& j, const std::string& path) {
  const object_reader r(j, path, {"id", "model", "vendor", "memory_gib", "index"});
  gpu g;
  g.id = r.string("id");
  g.model = r.string("model");
  g.vendor = r.string("vendor");
  g.memory_gib = r.number("memory_gib");
  g.index = static_cast<int>(r.integer("index", 0, gpu_index_max));
  return g;
}

http_endpoint read_http(const json& j, const std::string& path, const std::string& base_dir) {
  const object_reader r(j, path, {"address", "port", "token_file", "max_request_bytes"});
  http_endpoint e;
  e.address = r.string_or("address", e.address);
  if (r.has("port"))
    e.port = static_cast<int>(r.integer("port", 0, port_max));
  if (r.has("token_file"))
    e.token_file = resolve_path(r.string("token_file"), base_dir, r.path_of("token_file"));
  if (r.has("max_request_bytes"))
    e.max_request_bytes = static_cast<uint64_t>(
      r.integer("max_request_bytes", http_request_bytes_min, http_request_bytes_max));
  return e;
}

host read_host(const json& j, const std::string& path, const std::string& base_dir) {
  const object_reader r(j, path, {"name", "address", "port", "bulk_port", "data_dir", "gpus",
                                  "public_key", "secret_key_file", "http", "collect_dir"});
  host h;
  h.name = r.string("name");
  h.address = r.string("address");
  h.port = static_cast<int>(r.integer("port", port_min, port_max));
  if (r.has("bulk_port"))
    h.bulk_port = static_cast<int>(r.integer("bulk_port", port_min, port_max));
  h.data_dir = resolve_path(r.string("data_dir"), base_dir, r.path_of("data_dir"));
  h.public_key = r.string_or("public_key", "");
  if (r.has("secret_key_file"))
    h.secret_key_file = resolve_path(r.string("secret_key_file"), base_dir,
                                     r.path_of("secret_key_file"));
  else if (!h.data_dir.empty())
    h.secret_key_file = h.data_dir + "/keys/" + h.name + ".key";
  if (r.has("http"))
    h.http = read_http(r.required("http"), r.path_of("http"), base_dir);
  if (r.has("collect_dir")) {
    h.collect_dir = resolve_path(r.string("collect_dir"), base_dir, r.path_of("collect_dir"));
    if (h.collect_dir.empty())
      throw config_error(r.path_of("collect_dir"), "must name a folder, got an empty string");
  }
  if (r.has("gpus")) {
    const json& gpus = r.required("gpus");
    expect_array(gpus, r.path_of("gpus"));
    for (std::size_t i = 0; i < gpus.size(); ++i)
      h.gpus.push_back(read_gpu(gpus[i], child(r.path_of("gpus"), i)));
  }
  return h;
}

/// "time_scale" and "profile" belong to the sim backend only; elsewhere they would be
/// ignored, which is how a config quietly stops meaning what its author thinks.
backend read_backend(const std::string& name, const json& j, const std::string& path,
                     const std::string& base_dir) {
  const object_reader r(j, path,
                       {"type", "time_scale", "profile", "options", "workflows", "warm_start"});
  backend b;
  b.name = name;
  b.type = r.string("type");
  check_one_of(b.type, backend_types(), r.path_of("type"), "backend type");
  for (const char* sim_only : {"time_scale", "profile"})
    if (b.type != "sim" && r.has(sim_only))
      throw config_error(r.path_of(sim_only), std::string("'") + sim_only +
                                                  "' applies only to backends of type "
                                                  "'sim', this one is '" + b.type + "'");
  b.time_scale = r.number_or("time_scale", b.time_scale);
  b.profile = resolve_path(r.string_or("profile", ""), base_dir, r.path_of("profile"));
  if (r.has("options")) {
    b.options = r.required("options");
    expect_object(b.options, r.path_of("options"));
  }
  if (r.has("workflows"))
    b.workflows = read_workflows(r.required("workflows"), r.path_of("workflows"), base_dir, b.type);
  if (r.has("warm_start")) {
    const json& w = r.required("warm_start");
    if (!w.is_boolean())
      throw config_error(r.path_of("warm_start"), "must be true or false, got " + type_name(w));
    b.warm_start = w.get<bool>();
    if (*b.warm_start && b.type != "worker")
      throw config_error(r.path_of("warm_start"),
                         "'warm_start' can load a model before the first job only for backends "
                         "of type 'worker', this one is '" + b.type + "'");
  }
  return b;
}

/// The optional "profile" member: absent leaves the key to derive; present must name one.
std::string read_profile(const object_reader& r) {
  const std::string key = r.string_or("profile", "");
  if (r.has("profile") && key.empty())
    throw config_error(r.path_of("profile"),
                       "must not be empty; leave \"profile\" out to derive it from the GPUs");
  return key;
}

pool read_pool(const json& j, const std::string& path) {
  const object_reader r(j, path, {"name", "host", "gpus", "backend", "profile"});
  pool p;
  p.name = r.string("name");
  p.host = r.string("host");
  p.gpus = r.strings("gpus");
  p.backend = r.string("backend");
  p.profile_key = read_profile(r);
  return p;
}

decoder read_decoder(const json& j, const std::string& path) {
  const object_reader r(j, path, {"name", "host", "gpu", "backend", "profile"});
  decoder d;
  d.name = r.string("name");
  d.host = r.string("host");
  d.gpu = r.string("gpu");
  d.backend = r.string("backend");
  d.profile_key = read_profile(r);
  return d;
}

encoder read_encoder(const json& j, const std::string& path) {
  const object_reader r(j, path, {"name", "host", "gpus", "backend", "profile"});
  encoder e;
  e.name = r.string("name");
  e.host = r.string("host");
  e.gpus = r.strings("gpus");
  e.backend = r.string("backend");
  e.profile_key = read_profile(r);
  return e;
}

mode read_mode(const std::string& name, const json& j, const std::string& path) {
  const object_reader r(j, path, {"pools", "decoders", "policy"});
  mode m;
  m.name = name;
  m.pools = r.strings("pools");
  m.decoders = r.strings("decoders");
  m.policy = r.string_or("policy", m.policy);
  return m;
}

/// Reads every element of the array at `path` with `read_one(element, element_path)`.
template <class T, class Read>
std::vector<T> read_array(const json& j, const std::string& path, Read read_one) {
  expect_array(j, path);
  std::vector<T> out;
  out.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i)
    out.push_back(read_one(j[i], child(path, i)));
  return out;
}

} // namespace

cluster read_cluster(const json& doc, const std::string& base_dir) {
  const object_reader r(doc, "", {"cluster", "coordinator", "hosts", "backends", "pools",
                                  "decoders", "encoders", "modes", "knobs", "plaintext"});
  cluster c;
  c.name = r.string("cluster");
  c.coordinator = r.string("coordinator");
  c.hosts = read_array<host>(r.required("hosts"), r.path_of("hosts"),
                             [&](const json& j, const std::string& p) {
                               return read_host(j, p, base_dir);
                             });
  const json& backends = r.required("backends");
  expect_object(backends, r.path_of("backends"));
  for (const auto& item : backends.items())
    c.backends[item.key()] = read_backend(item.key(), item.value(),
                                          child(r.path_of("backends"), item.key()), base_dir);
  c.pools = read_array<pool>(r.required("pools"), r.path_of("pools"), read_pool);
  c.decoders = read_array<decoder>(r.required("decoders"), r.path_of("decoders"), read_decoder);
  c.encoders = read_array<encoder>(r.required("encoders"), r.path_of("encoders"), read_encoder);
  // A kind's old name loads as its current one (config/profile/kinds.hpp), noted.
  auto current = [&c](std::string& key, const std::string& path) {
    if (auto now = profile::renamed(key)) {
      c.old_profile_keys.push_back({child(path, "profile"), key, *now});
      key = *now;
    }
  };
  for (std::size_t i = 0; i < c.pools.size(); ++i)
    current(c.pools[i].profile_key, child("/pools", i));
  for (std::size_t i = 0; i < c.decoders.size(); ++i)
    current(c.decoders[i].profile_key, child("/decoders", i));
  for (std::size_t i = 0; i < c.encoders.size(); ++i)
    current(c.encoders[i].profile_key, child("/encoders", i));
  // nlohmann keeps object members sorted by key, so modes come out sorted by name.
  const json& modes = r.required("modes");
  expect_object(modes, r.path_of("modes"));
  for (const auto& item : modes.items())
    c.modes.push_back(read_mode(item.key(), item.value(), child(r.path_of("modes"), item.key())));
  if (r.has("knobs"))
    c.knobs = read_knobs(r.required("knobs"), r.path_of("knobs"));
  if (r.has("plaintext")) {
    const json& p = r.required("plaintext");
    if (!p.is_boolean())
      throw config_error(r.path_of("plaintext"), "must be true or false, got " + type_name(p));
    c.plaintext = p.get<bool>();
  }
  return c;
}

} // namespace vidline::config::detail
