#include "backends/comfyui/client.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include <httplib.h>

#include "backends/exec/stage_util.hpp"
#include "common/sha256.hpp"

namespace vidline::backends::comfyui {
namespace {

using json = nlohmann::json;

std::unique_ptr<httplib::Client> connect(const endpoint& e) {
  auto c = std::make_unique<httplib::Client>(e.host, e.port);
  auto us = [](double s) { return std::chrono::microseconds(static_cast<int64_t>(s * 1e6)); };
  c->set_connection_timeout(us(e.connect_timeout_s));
  c->set_read_timeout(us(e.read_timeout_s));
  c->set_write_timeout(us(e.read_timeout_s));
  c->set_keep_alive(false);
  return c;
}

/// Throws for a failed request or a non-2xx answer.
void check(const httplib::Result& r, const endpoint& e, const std::string& what) {
  if (!r)
    throw unreachable("ComfyUI at " + e.url() + ": " + what + ": " + httplib::to_string(r.error()));
  if (r->status >= 500)
    throw unreachable("ComfyUI at " + e.url() + ": " + what + ": HTTP " + std::to_string(r->status) +
                      ": " + exec::printable(r->body, 300));
  if (r->status >= 400 || r->status < 200)
    throw refused(r->status, r->body,
                  "ComfyUI at " + e.url() + ": " + what + ": HTTP " + std::to_string(r->status) +
                    ": " + exec::printable(r->body, 300));
}

json parse_body(const httplib::Result& r, const endpoint& e, const std::string& what) {
  json j = json::parse(r->body, nullptr, false);
  if (j.is_discarded())
    throw unreachable("ComfyUI at " + e.url() + ": " + what + ": the answer is not JSON: " +
                      exec::printable(r->body, 200));
  return j;
}

json post_json(const endpoint& e, const std::string& path, const json& body, const std::string& what) {
  auto c = connect(e);
  auto r = c->Post(path, body.dump(), "application/json");
  check(r, e, what);
  return r->body.empty() ? json::object() : parse_body(r, e, what);
}

json get_json(const endpoint& e, const std::string& path, const std::string& what) {
  auto c = connect(e);
  auto r = c->Get(path);
  check(r, e, what);
  return parse_body(r, e, what);
}

} // namespace

endpoint endpoint::parse(const std::string& url) {
  const std::string scheme = "http://";
  if (url.compare(0, scheme.size(), scheme) != 0)
    throw std::invalid_argument("'" + url + "' is not an http:// URL (https is not supported)");
  std::string rest = url.substr(scheme.size());
  while (!rest.empty() && rest.back() == '/')
    rest.pop_back();
  if (rest.find('/') != std::string::npos)
    throw std::invalid_argument("'" + url + "' has a path; give just http://host:port");
  endpoint e;
  auto colon = rest.rfind(':');
  if (colon == std::string::npos || rest.find(']') != std::string::npos) {
    throw std::invalid_argument("'" + url + "' has no port (ComfyUI's default is 8188)");
  }
  e.host = rest.substr(0, colon);
  std::string port = rest.substr(colon + 1);
  if (e.host.empty() || port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) < 1 ||
      std::stoi(port) > 65535)
    throw std::invalid_argument("'" + url + "' needs a host and a port 1-65535");
  e.port = std::stoi(port);
  return e;
}

std::string endpoint::url() const { return "http://" + host + ":" + std::to_string(port); }

json client::submit(const json& workflow, const std::string& prompt_id, const std::string& client_id) {
  json body = {{"prompt", workflow}, {"prompt_id", prompt_id}, {"client_id", client_id}};
  return post_json(e_, "/prompt", body, "POST /prompt");
}

std::optional<json> client::history(const std::string& prompt_id) {
  json j = get_json(e_, "/history/" + prompt_id, "GET /history");
  if (!j.is_object() || !j.contains(prompt_id))
    return std::nullopt;
  return j[prompt_id];
}

queue_state client::queue() {
  json j = get_json(e_, "/queue", "GET /queue");
  queue_state q;
  auto ids = [](const json& list, std::set<std::string>& out) {
    if (!list.is_array())
      return;
    for (auto& item : list)  // [number, prompt_id, graph, extra_data, outputs_to_execute]
      if (item.is_array() && item.size() > 1 && item[1].is_string())
        out.insert(item[1].get<std::string>());
  };
  if (j.is_object()) {
    ids(j.value("queue_running", json::array()), q.running);
    ids(j.value("queue_pending", json::array()), q.pending);
  }
  return q;
}

void client::interrupt(const std::string& prompt_id) {
  post_json(e_, "/interrupt", {{"prompt_id", prompt_id}}, "POST /interrupt");
}

void client::delete_pending(const std::string& prompt_id) {
  post_json(e_, "/queue", {{"delete", {prompt_id}}}, "POST /queue");
}

std::string client::upload(const std::string& file, const std::string& name,
                           const std::string& subfolder) {
  auto f = std::shared_ptr<std::FILE>(std::fopen(file.c_str(), "rb"), [](std::FILE* p) {
    if (p != nullptr)
      std::fclose(p);
  });
  if (!f)
    throw std::runtime_error("cannot read " + file + ": " + std::strerror(errno));
  httplib::MultipartFormDataItems items{{"type", "input", "", ""},
                                        {"subfolder", subfolder, "", ""},
                                        {"overwrite", "true", "", ""}};
  httplib::MultipartFormDataProviderItems stream{
    {"image",
     [f](size_t, httplib::DataSink& sink) {
       char buf[1 << 16];
       std::size_t n = std::fread(buf, 1, sizeof buf, f.get());
       if (n > 0)
         return sink.write(buf, n);
       sink.done();
       return std::ferror(f.get()) == 0;
     },
     name, "application/octet-stream"}};
  auto c = connect(e_);
  auto r = c->Post("/upload/image", httplib::Headers{}, items, stream);
  check(r, e_, "POST /upload/image");
  json j = parse_body(r, e_, "POST /upload/image");
  std::string got = j.value("name", "");
  std::string sub = j.value("subfolder", "");
  if (got.empty())
    throw unreachable("ComfyUI at " + e_.url() + ": POST /upload/image: no name in the answer");
  return sub.empty() ? got : sub + "/" + got;
}

uint64_t client::view(const std::string& filename, const std::string& subfolder,
                      const std::string& type, const std::string& dest) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> out(std::fopen(dest.c_str(), "wb"), &std::fclose);
  if (!out)
    throw std::runtime_error("cannot create " + dest + ": " + std::strerror(errno));
  uint64_t written = 0;
  bool write_failed = false;
  int status = 0;
  httplib::Params params{{"filename", filename}, {"subfolder", subfolder}, {"type", type}};
  auto c = connect(e_);
  std::string error_body;
  auto r = c->Get(
    "/view", params, httplib::Headers{},
    [&](const httplib::Response& res) {
      status = res.status;
      return true;
    },
    [&](const char* data, size_t n) {
      if (status != 200) {  // keep an error body for the message, not in the file
        error_body.append(data, std::min<std::size_t>(n, 4096));
        return true;
      }
      if (std::fwrite(data, 1, n, out.get()) != n) {
        write_failed = true;
        return false;
      }
      written += n;
      return true;
    });
  if (write_failed)
    throw std::runtime_error("cannot write " + dest + ": " + std::strerror(errno));
  if (r)
    r->body = error_body;
  check(r, e_, "GET /view " + subfolder + "/" + filename);
  if (std::fflush(out.get()) != 0)
    throw std::runtime_error("cannot write " + dest);
  return written;
}

json client::system_stats() { return get_json(e_, "/system_stats", "GET /system_stats"); }

json client::object_info() { return get_json(e_, "/object_info", "GET /object_info"); }

std::string describe_node_errors(const json& node_errors) {
  std::string out;
  if (!node_errors.is_object())
    return out;
  for (auto& [id, ne] : node_errors.items()) {
    out += (out.empty() ? "node " : "; node ") + id;
    if (!ne.is_object())
      continue;
    json cls = ne.value("class_type", json("?"));
    out += " (" + (cls.is_string() ? cls.get<std::string>() : cls.dump()) + ")";
    if (ne.contains("errors") && ne["errors"].is_array())
      for (auto& err : ne["errors"])
        if (err.is_object())
          out += ": " + err.value("message", "") +
                 (err.contains("details") && err["details"].is_string()
                    ? " " + err["details"].get<std::string>()
                    : std::string());
  }
  return exec::printable(out, 600);
}

std::string describe_rejection(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return exec::printable(body, 400);
  std::string out;
  if (j.contains("error") && j["error"].is_object()) {
    auto& e = j["error"];
    out = e.value("type", "error") + ": " + e.value("message", "");
    if (e.contains("details") && e["details"].is_string() && !e["details"].get<std::string>().empty())
      out += " (" + e["details"].get<std::string>() + ")";
  }
  if (j.contains("node_errors")) {
    std::string nodes = describe_node_errors(j["node_errors"]);
    if (!nodes.empty())
      out += "; " + nodes;
  }
  return exec::printable(out, 600);
}

std::vector<output_file> files_of(const json& node_outputs) {
  std::vector<output_file> out;
  if (!node_outputs.is_object())
    return out;
  for (auto& [key, list] : node_outputs.items()) {
    if (!list.is_array())
      continue;
    for (auto& f : list)
      if (f.is_object() && f.contains("filename") && f["filename"].is_string())
        out.push_back({f["filename"].get<std::string>(), f.value("subfolder", ""),
                       f.value("type", "output")});
  }
  return out;
}

std::string uuid_from(const std::string& key) {
  digest d = sha256_of(key);
  d[6] = static_cast<uint8_t>((d[6] & 0x0f) | 0x80);  // version 8
  d[8] = static_cast<uint8_t>((d[8] & 0x3f) | 0x80);  // RFC variant
  std::string hex = to_hex(d);
  return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
         hex.substr(16, 4) + "-" + hex.substr(20, 12);
}

bool is_canonical_uuid(const std::string& s) {
  if (s.size() != 36)
    return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    char c = s[i];
    if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  }
  return true;
}

} // namespace vidline::backends::comfyui
