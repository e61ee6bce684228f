/// The command-line client of a node's bus, and uploading an input with it (client.hpp).

#include "nodes/verbs/client.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <zmq.hpp>

#include "nodes/bus/bus_frame.hpp"
#include "nodes/data/inputs.hpp"

namespace vidline::nodes::verbs {

struct client::sockets {
  zmq::context_t ctx{1};
  zmq::socket_t dealer;
};

client::client(std::string endpoint, const config::knobs& knobs, bus::client_security security)
    : endpoint_(std::move(endpoint)),
      knobs_(knobs),
      security_(std::move(security)),
      limits_(bus::wire_limits(knobs)),
      sender_("cli:" + std::to_string(::getpid())),
      next_id_(data::first_envelope_id()),
      s_(std::make_unique<sockets>()) {
  if (security_.plaintext && !bus::is_loopback_endpoint(endpoint_))
    throw std::invalid_argument("client: plaintext to " + endpoint_ +
                                " refused: it is not loopback (use CURVE keys)");
  reset();
}

client::~client() = default;

void client::reset() {
  if (s_->dealer)
    s_->dealer.close();
  s_->dealer = zmq::socket_t(s_->ctx, zmq::socket_type::dealer);
  auto& d = s_->dealer;
  d.set(zmq::sockopt::linger, 0);
  d.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(knobs_.max_frame_bytes));
  d.set(zmq::sockopt::reconnect_ivl, knobs_.reconnect_min_ms);
  d.set(zmq::sockopt::reconnect_ivl_max, knobs_.reconnect_max_ms);
  // Queue nothing for a node that is not connected: a request then fails within its
  // timeout instead of being delivered whenever the node comes back.
  d.set(zmq::sockopt::immediate, true);
  if (!security_.plaintext) {
    d.set(zmq::sockopt::curve_serverkey, security_.server_public_z85);
    d.set(zmq::sockopt::curve_publickey, security_.public_z85);
    d.set(zmq::sockopt::curve_secretkey, security_.secret_z85);
  }
  d.connect(endpoint_);
}

std::optional<bus::inbound> client::request(const std::string& target, std::string_view type,
                                       std::string_view body, int timeout_ms) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::milliseconds(std::max(0, timeout_ms));
  auto left_ms = [&] {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    return std::max<int64_t>(0, left.count());
  };

  msg::envelope env;
  env.type = std::string(type);
  env.id = next_id_++;
  env.sender = sender_;
  env.target = target;
  last_id_ = env.id;
  zmq::message_t frame = bus::make_frame(env, body);

  auto& d = s_->dealer;
  // With ZMQ_IMMEDIATE a blocking send waits for the connection, up to the timeout.
  d.set(zmq::sockopt::sndtimeo, static_cast<int>(left_ms()));
  bool sent = false;
  try {
    sent = d.send(frame, zmq::send_flags::none).has_value();
  } catch (const zmq::error_t&) {
  }
  if (!sent) {
    reset();
    return std::nullopt;
  }
  for (;;) {
    zmq::pollitem_t item{d.handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(left_ms()));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR)
        continue;
      break;
    }
    if (!(item.revents & ZMQ_POLLIN)) {
      if (left_ms() == 0)
        break;
      continue;
    }
    zmq::message_t reply;
    if (!d.recv(reply, zmq::recv_flags::dontwait))
      continue;
    bool multipart = reply.more();
    while (reply.more() && d.recv(reply, zmq::recv_flags::dontwait)) {
    }
    if (multipart)
      continue;
    msg::frame f;
    if (msg::decode_frame(reply.data<char>(), reply.size(), limits_, f) != msg::decode_error::none)
      continue;
    if (f.env.correlation != env.id)
      continue;  // a late reply to an earlier request
    return bus::inbound{f.env, std::string(f.body), ""};
  }
  reset();  // Lazy Pirate: nothing from this request may leak into the next
  return std::nullopt;
}

std::string upload_input(client& cl, const config::knobs& k, const std::string& path,
                         const std::string& sha, bool* already) {
  if (already)
    *already = false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return "cannot open " + path + ": " + std::string(std::strerror(errno));
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return path + " is not a regular file";
  const auto total = static_cast<uint64_t>(st.st_size);
  if (total == 0)
    return path + " is empty";
  if (total > data::max_input_bytes)
    return fmt::format("{} is {} bytes, over the limit of {} bytes for a reference image", path,
                       total, data::max_input_bytes);
  const int timeout_ms = std::max(2000, k.transfer_timeout_ms);
  constexpr int max_silences = 6;  // consecutive unanswered requests before giving up
  constexpr int max_restarts = 3;  // the node asked to start over this often: give up
  const auto limits = bus::wire_limits(k);
  std::vector<char> buf(k.chunk_bytes);
  uint64_t offset = 0;
  bool probed = false;
  int silences = 0, restarts = 0;
  for (;;) {
    msg::input_put p;
    p.sha256 = sha;
    p.total = total;
    p.offset = offset;
    std::size_t n = 0;
    if (probed) {
      n = static_cast<std::size_t>(std::min<uint64_t>(k.chunk_bytes, total - offset));
      std::size_t got = 0;
      while (got < n) {
        ssize_t r = ::pread(fd, buf.data() + got, n - got, static_cast<off_t>(offset + got));
        if (r < 0 && errno == EINTR)
          continue;
        if (r <= 0)
          return r == 0 ? path + " changed while it was uploaded (shorter)"
                        : "cannot read " + path + ": " + std::string(std::strerror(errno));
        got += static_cast<std::size_t>(r);
      }
    }
    p.data = msgpack::type::raw_ref(buf.data(), static_cast<uint32_t>(n));
    auto rep = cl.request("bus", p, timeout_ms);
    if (!rep) {
      if (++silences >= max_silences)
        return fmt::format("the coordinator's node did not answer for {} s",
                           max_silences * timeout_ms / 1000);
      continue;
    }
    silences = 0;
    msg::input_put_reply r;
    if (rep->env.type != msg::input_put_reply::wire_name ||
        !msg::unpack_body_as(rep->body, limits, r))
      return "the coordinator's node answered " + rep->env.type +
             " (a node older than uploads?)";
    if (!r.error.empty())
      return "the coordinator's node refused it: " + r.error;
    if (r.done) {
      if (already && !probed)
        *already = true;
      return "";
    }
    if (!probed) {
      probed = true;
      offset = 0;
      continue;
    }
    if (r.next == 0 && offset + n != 0 && ++restarts > max_restarts)
      return "the coordinator's node restarted the upload too often";
    if (r.next > total)
      return "the coordinator's node asked for bytes past the end";
    offset = r.next;
  }
}

} // namespace vidline::nodes::verbs
