#include "nodes/verbs/line_text.hpp"

#include <cerrno>
#include <cstdio>
#include <sstream>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace vidline::nodes::verbs {

using nlohmann::json;

namespace {

/// The first `n` words of `text`, "..." when there were more.
std::string first_words(const std::string& text, std::size_t n) {
  std::istringstream in(text);
  std::string out, w;
  std::size_t k = 0;
  while (in >> w) {
    if (k == n) {
      out += "...";
      break;
    }
    out += (k == 0 ? "" : " ") + w;
    ++k;
  }
  return out;
}

std::string text_of(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

} // namespace

std::string shot_words(const json& job) {
  std::string name = text_of(job, "name");
  if (name.empty()) {
    name = text_of(job, "shot");
    if (!name.empty() && job.value("take", 0u) > 0)
      name += " take " + std::to_string(job.value("take", 0u) + 1);
  }
  const std::string prompt = first_words(text_of(job, "prompt_start"), 6);
  if (prompt.empty())
    return name;
  return name.empty() ? "\"" + prompt + "\"" : name + " \"" + prompt + "\"";
}

std::string job_label(const json& job) {
  std::string out = "job " + std::to_string(job.value("index", 0u));
  const auto words = shot_words(job);
  return words.empty() ? out : out + " " + words;
}

std::string nobody_listens(const config::cluster& c, const std::string& config_path) {
  const auto* h = c.find_host(c.coordinator);
  if (h == nullptr)
    return "";
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(h->address.c_str(), std::to_string(h->port).c_str(), &hints, &res) != 0 ||
      res == nullptr)
    return "";
  bool refused = false;
  const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
    if (rc != 0 && errno == ECONNREFUSED) {
      refused = true;
    } else if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, 500) == 1) {
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        refused = err == ECONNREFUSED;
      }
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (!refused)
    return "";
  const std::string cfg = config_path.empty() ? c.source_path : config_path;
  return "no node answers: nothing listens at the coordinator's address tcp://" + h->address +
         ":" + std::to_string(h->port) + " (host " + h->name +
         "); start the nodes with `vidline start --config " + cfg + "` on each host";
}

std::vector<std::string> hosts_down(const json& view, const config::cluster& c) {
  std::vector<std::string> out;
  if (!view.contains("hosts_up") || !view["hosts_up"].is_object())
    return out;
  auto alive_here = [&](const char* what, const std::string& host) {
    bool any = false;
    if (view.contains(what) && view[what].is_object())
      for (auto& [name, x] : view[what].items())
        any = any || (text_of(x, "host") == host && x.value("alive", false));
    return any;
  };
  for (auto& h : c.hosts) {
    auto it = view["hosts_up"].find(h.name);
    // Down by its heartbeats, or never heard from with nothing of it alive.
    const bool down = it != view["hosts_up"].end()
                        ? it->is_boolean() && !it->get<bool>()
                        : h.name != c.coordinator && !alive_here("pools", h.name) &&
                            !alive_here("decoders", h.name);
    if (down)
      out.push_back(h.name);
  }
  return out;
}

std::string hosts_down_warning(const std::vector<std::string>& down, const config::cluster& c) {
  std::string out;
  for (auto& h : down) {
    std::string what;
    for (auto& p : c.pools)
      if (p.host == h)
        what += (what.empty() ? "" : ", ") + ("pool " + p.name);
    for (auto& d : c.decoders)
      if (d.host == h)
        what += (what.empty() ? "" : ", ") + ("decoder " + d.name);
    out += "warning: host " + h + " is down" +
           (what.empty() ? std::string() : ": " + what + " take no work") +
           " until it comes back; the run waits for the rest of the line\n";
  }
  return out;
}

std::string format_cluster(const json& v) {
  std::ostringstream out;
  out << "hosts:";
  if (v.contains("hosts_up"))
    for (auto& [h, up] : v["hosts_up"].items())
      out << "  " << h << " " << (up.is_boolean() && up.get<bool>() ? "up" : "DOWN");
  out << "\n";
  if (v.contains("pools"))
    for (auto& [name, p] : v["pools"].items()) {
      out << "  pool " << name << " on " << text_of(p, "host") << " (" << text_of(p, "kind")
          << "): " << (p.value("alive", false) ? (p.value("busy", false) ? "busy" : "idle")
                                                : "not answering");
      if (p.contains("speed_factor") && p["speed_factor"].is_number()) {
        char buf[32];
        std::snprintf(buf, sizeof(buf), ", speed x%.2f", p["speed_factor"].get<double>());
        out << buf;
      }
      if (auto m = text_of(p, "model"); !m.empty())
        out << ", model " << m << " loaded";
      out << "\n";
    }
  if (v.contains("decoders"))
    for (auto& [name, d] : v["decoders"].items()) {
      out << "  decoder " << name << " on " << text_of(d, "host") << ": ";
      if (!d.value("alive", false))
        out << "not answering\n";
      else
        out << d.value("credits", 0) << " credits, holding " << d.value("holding", 0)
            << ", pending " << d.value("pending", 0) << "\n";
    }
  return out.str();
}

} // namespace vidline::nodes::verbs
