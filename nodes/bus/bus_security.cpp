/// The bus's security (docs/security.md): CURVE keys, the ZAP handler that admits only the
/// config's host keys on the CURVE link and, on the bulk channel, only listed addresses
/// presenting their host's per-boot secret; the handshake monitor; who may send what.

#include <random>

#include "nodes/bus/bus_impl.hpp"

namespace vidline::nodes::bus {
namespace bus_detail {

/// Constant-time comparison of two secrets.
bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size() || a.empty())
    return false;
  unsigned char d = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

/// 32 random bytes as 64 hex digits: a bulk secret.
std::string random_secret() {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 8; ++i) {
    uint32_t v = rd();
    for (int j = 0; j < 8; ++j, v >>= 4)
      out.push_back(hex[v & 0xf]);
  }
  return out;
}

const char* to_string(security_event e) {
  switch (e) {
  case security_event::key_refused:
    return "refused a key";
  case security_event::handshake_failed:
    return "a handshake failed";
  case security_event::impersonation:
    return "refused a frame";
  case security_event::bulk_address_refused:
    return "refused a bulk connection";
  case security_event::bulk_misuse:
    return "refused a frame on the bulk channel";
  case security_event::bulk_secret_refused:
    return "refused a bulk connection without its host's secret";
  }
  return "?";
}

/// The 32 bytes of a Z85 key, or "" when it is not one.
std::string z85_to_binary(const std::string& z85) {
  if (z85.size() != 40)
    return "";
  std::string out(32, '\0');
  if (zmq_z85_decode(reinterpret_cast<uint8_t*>(out.data()), z85.c_str()) == nullptr)
    return "";
  return out;
}

std::string binary_to_z85(std::string_view key) {
  if (key.size() != 32)
    return "(" + std::to_string(key.size()) + " bytes, not a key)";
  char buf[41];
  zmq_z85_encode(buf, reinterpret_cast<const uint8_t*>(key.data()), 32);
  return buf;
}

} // namespace bus_detail

void bus::impl::read_zap() {
  for (int n = 0; n < io_batch; ++n) {
    std::vector<zmq::message_t> parts;
    zmq::message_t part;
    if (!zap.recv(part, zmq::recv_flags::dontwait))
      return;
    parts.push_back(std::move(part));
    while (parts.back().more() && parts.size() < 16) {
      zmq::message_t next;
      if (!zap.recv(next, zmq::recv_flags::dontwait))
        break;
      parts.push_back(std::move(next));
    }
    if (parts.back().more())
      drain_parts(zap);
    // The handler is a ROUTER (so a bulk request can wait for its host's secret): the
    // session's pipe id and an empty delimiter, then RFC 27: version, request id, domain,
    // address, routing id, mechanism, credentials.
    if (parts.size() < 2 || parts[1].size() != 0)
      continue;  // not from a libzmq session: nothing to answer
    const std::string pipe = parts[0].to_string();
    auto text = [&](std::size_t i) {
      return i + 2 < parts.size() ? parts[i + 2].to_string() : "";
    };
    const std::string key = text(6);
    // The bulk channel has no encryption (PLAIN mechanism, its own domain): a connection is
    // admitted from a listed host's address with the secret that host sent us over CURVE
    // in its heartbeats (user name = the host), and may then only ask for latents and
    // answer such requests (authorised()). Every other connection is CURVE with a listed
    // key.
    const bool bulk = text(2) == bulk_zap_domain;
    const std::string address = text(3);
    if (text(0) != "1.0" || text(5) != (bulk ? "PLAIN" : "CURVE") ||
        (!bulk && key.size() != 32)) {
      const std::string reason = bulk ? "not a PLAIN ZAP request" : "not a CURVE ZAP request";
      answer_zap(pipe, text(1), bulk, false, reason, "", "from " + printable(address) + ": " + reason);
      continue;
    }
    if (bulk) {
      const std::string host = key, password = text(7);
      const auto& ok = opt.bulk_admit_addresses;
      const std::string who = "from " + printable(address) + " as '" + printable(host) + "'";
      if (std::find(ok.begin(), ok.end(), address) == ok.end()) {
        answer_zap(pipe, text(1), true, false, "address not listed", "",
                   who + ": address not listed");
      } else if (opt.bulk_peers.count(host) == 0) {
        answer_zap(pipe, text(1), true, false, "not a bulk peer", "", who + ": not a bulk peer");
      } else if (auto it = bulk_secret_in.find(host);
                 it != bulk_secret_in.end() && same_secret(it->second, password)) {
        answer_zap(pipe, text(1), true, true, "OK", host, "");
      } else if (zap_waiting.size() < max_waiting_bulk_connections) {
        // Its host may have just started (or we did): its next heartbeat brings the
        // secret. Held until then, at most a liveness window.
        zap_waiting.push_back(waiting_zap{pipe, text(1), host, password, address,
                                          now_ms() + liveness_window_ms(opt.knobs)});
      } else {
        answer_zap(pipe, text(1), true, false, "no secret", "",
                   who + ": too many connections waiting for their host's secret", true);
      }
      continue;
    }
    if (auto it = host_of_key.find(key); it != host_of_key.end())
      answer_zap(pipe, text(1), false, true, "OK", it->second,
                 it->second + " from " + printable(address));
    else
      answer_zap(pipe, text(1), false, false, "key not listed", "",
                 "key " + binary_to_z85(key) + " from " + printable(address) +
                     ": key not listed");
  }
}

void bus::impl::answer_zap(const std::string& pipe, const std::string& request_id, bool bulk,
                           bool admitted, const std::string& reason, const std::string& user,
                           const std::string& detail, bool secret) {
  const std::string reply[] = {pipe, "", "1.0", request_id, admitted ? "200" : "400", reason,
                               user, ""};
  try {
    for (std::size_t i = 0; i < 8; ++i)
      zap.send(zmq::buffer(reply[i]), i < 7 ? zmq::send_flags::sndmore : zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    spdlog::error("bus {}: ZAP reply failed: {}", opt.self, e.what());
  }
  if (bulk) {
    count(admitted ? &bus_stats::bulk_admitted : &bus_stats::bulk_refused);
    if (secret)
      count(&bus_stats::bulk_secrets_refused);
    if (!admitted)
      security(secret ? security_event::bulk_secret_refused
                      : security_event::bulk_address_refused,
               detail);
  } else if (admitted) {
    count(&bus_stats::keys_admitted);
    spdlog::debug("bus {}: admitted {}", opt.self, detail);
  } else {
    count(&bus_stats::keys_refused);
    security(security_event::key_refused, detail);
  }
}

void bus::impl::settle_waiting_bulk(const std::string* host, int64_t now) {
  // `host` sent a heartbeat: its connections that wait are admitted when they present the
  // secret it sent, refused otherwise. Without a host: those past their deadline are
  // refused.
  for (auto it = zap_waiting.begin(); it != zap_waiting.end();) {
    const std::string who =
        "from " + printable(it->address) + " as '" + printable(it->host) + "'";
    if (host != nullptr && it->host == *host) {
      auto s = bulk_secret_in.find(*host);
      if (s != bulk_secret_in.end() && same_secret(s->second, it->password))
        answer_zap(it->pipe, it->request_id, true, true, "OK", it->host, "");
      else
        answer_zap(it->pipe, it->request_id, true, false, "wrong secret", "",
                   who + ": not the secret " + *host + " sent over the authenticated link",
                   true);
    } else if (host == nullptr && now >= it->deadline_ms) {
      answer_zap(it->pipe, it->request_id, true, false, "no secret", "",
                 who + ": no heartbeat of " + it->host + " with a matching secret within " +
                     std::to_string(liveness_window_ms(opt.knobs)) + " ms",
                 true);
    } else {
      ++it;
      continue;
    }
    it = zap_waiting.erase(it);
  }
}

void bus::impl::read_monitor(zmq::socket_t& m, bool bulk) {
  for (int n = 0; n < io_batch; ++n) {
    zmq::message_t event;
    if (!m.recv(event, zmq::recv_flags::dontwait))
      return;
    zmq::message_t address;
    if (event.more())
      (void)m.recv(address, zmq::recv_flags::dontwait);
    if (address.more())
      drain_parts(m);
    if (event.size() < 6)
      continue;
    uint16_t what = 0;
    uint32_t value = 0;
    std::memcpy(&what, event.data(), 2);
    std::memcpy(&value, static_cast<const char*>(event.data()) + 2, 4);
    // A refused key is counted by the ZAP handler; the rest failed before reaching it.
    if (what == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
      continue;
    const char* detail =
        what == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ? "protocol error" : "no detail";
    if (bulk) {
      count(&bus_stats::bulk_refused);
      count(&bus_stats::bulk_secrets_refused);
      security(security_event::bulk_address_refused,
               fmt::format("handshake failed on {} ({} {:#x}): not PLAIN with a host's "
                           "secret, or not ZMTP",
                           printable(address.to_string()), detail, value));
      continue;
    }
    count(&bus_stats::handshakes_failed);
    security(security_event::handshake_failed,
             fmt::format("on {} ({} {:#x}): no key, a wrong server key, or not ZMTP",
                         printable(address.to_string()), detail, value));
  }
}

bool bus::impl::authorised(const msg::envelope& env, const ingress& in) {
  if (in.bulk) {
    // No keys here: only latent requests from a peer (routing id = its name = sender)
    // and chunks from the peer this DEALER reaches. A chunk's bytes count only once they
    // hash to the digest the authenticated link gave; a request is answered only from
    // this host's latent files, only to the connection it came on.
    std::string why;
    if (in.reply_to.empty()) {
      const std::string host = in.path.substr(2);
      if (env.type == msg::latent_chunk::wire_name && env.sender == host)
        return true;
      why = env.type + " from '" + env.sender + "' on the bulk connection to " + host;
    } else {
      // The routing id must be the host whose secret the connection presented (ZAP's
      // User-Id), so the name alone takes nothing over.
      if (env.type == msg::latent_fetch::wire_name && env.sender == in.reply_to &&
          in.user == in.reply_to && opt.bulk_peers.count(env.sender) != 0)
        return true;
      why = env.type + " from '" + env.sender + "' on bulk router id " + printable(in.reply_to);
    }
    count(&bus_stats::bulk_misuse);
    security(security_event::bulk_misuse, why);
    return false;
  }
  if (in.local || opt.security.plaintext)
    return true;
  std::string why;
  if (in.reply_to.empty()) {
    // On our DEALER to a peer, whose server key the CURVE handshake proved.
    const std::string host = in.path.substr(2);
    if (env.sender == host)
      return true;
    why = "sender '" + env.sender + "' on the connection to " + host;
  } else if (in.user.empty()) {
    why = "no authenticated key on router id " + printable(in.reply_to);
  } else {
    // A routing id that names a host must be the key's host; any other is a client (the
    // CLI holds a host's key) whose envelopes say "cli:...". Senders are held to the key.
    const bool id_is_host = in.reply_to == opt.self || opt.peers.count(in.reply_to) != 0;
    if (id_is_host && in.reply_to != in.user)
      why = "router id '" + in.reply_to + "' on a connection with the key of " + in.user;
    else if (env.sender == in.user || (!id_is_host && env.sender.rfind("cli:", 0) == 0))
      return true;
    else
      why = "sender '" + env.sender + "' on a connection with the key of " + in.user;
  }
  count(&bus_stats::impersonations);
  security(security_event::impersonation, why + " (" + env.type + ")");
  return false;
}

void bus::impl::security(security_event e, const std::string& detail) {
  std::string note;
  if (!gate(security_gates[static_cast<std::size_t>(e)], note))
    return;
  const bus_stats s = [&] {
    std::lock_guard<std::mutex> lock(stats_mutex);
    return counters;
  }();
  spdlog::warn("bus {}: security: {}: {}{} [totals: {} keys refused, {} handshakes failed, "
               "{} frames refused]",
               opt.self, to_string(e), detail, note, s.keys_refused, s.handshakes_failed,
               s.impersonations);
}

} // namespace vidline::nodes::bus
