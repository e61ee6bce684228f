#pragma once
/// The envelope every message travels in between nodes, and its codec.
///
/// A frame is one ZeroMQ message holding one msgpack array:
///   ["VIDLINE", version, type, id, sender, correlation, target, body]
/// `body` is a msgpack bin holding the packed struct named by `type`. See PROTOCOL.md.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <msgpack.hpp>

namespace vidline::msg {

/// The protocol's magic word and version. A frame with another major version is dropped.
inline constexpr const char* protocol_magic = "VIDLINE";
inline constexpr uint16_t protocol_version = 1;

/// Bounds for decoding bytes that came from outside. Without them an 18-byte frame can ask
/// msgpack for a 128 GiB allocation (platform-facts.md).
struct decode_limits {
  std::size_t max_frame_bytes = 8u << 20;  ///< bytes; a 1 MiB chunk plus its header fits
  std::size_t max_array = 100000;          ///< elements in any one array
  std::size_t max_map = 1024;              ///< pairs in any one map
  std::size_t max_str = 1u << 20;          ///< bytes in any one string
  std::size_t max_bin = 4u << 20;          ///< bytes in any one bin (a chunk)
  std::size_t max_depth = 16;              ///< nesting
};

/// Routing and identity of one message.
struct envelope {
  uint16_t version = protocol_version;
  std::string type;          ///< the body's wire_name
  uint64_t id = 0;           ///< unique per sender boot: (sender, id) deduplicates
  std::string sender;        ///< host name, or "cli:<pid>" for a command-line client
  uint64_t correlation = 0;  ///< the id this message answers, 0 if none
  std::string target;        ///< actor name on the receiving node ("coordinator", "pool:x")
};

/// Why a frame was refused.
enum class decode_error {
  none = 0,
  oversized,        ///< larger than max_frame_bytes
  malformed,        ///< not msgpack, or truncated
  limit_exceeded,   ///< msgpack unpack limit hit
  bad_shape,        ///< msgpack, but not an envelope array
  bad_magic,
  unknown_version,
  bad_body,         ///< body does not unpack as the type says
};

/// A name for a decode_error, for logs and counters.
const char* to_string(decode_error e);

/// A decoded frame: the envelope plus a zero-copy view of the body bytes, which stay
/// valid as long as `handle` lives.
struct frame {
  envelope env;
  std::string_view body;
  msgpack::object_handle handle;
};

/// Packs an envelope and an already-packed body into one frame.
std::string encode_frame(const envelope& env, std::string_view body);

/// Decodes one frame; never throws; refuses anything outside `limits`.
decode_error decode_frame(const char* data, std::size_t size, const decode_limits& limits,
                          frame& out);

/// Packs a message struct into body bytes.
template <class T>
std::string pack_body(const T& x) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, x);
  return std::string(buf.data(), buf.size());
}

/// Unpacks body bytes into a message struct within `limits`; false when they do not fit.
/// The result may reference `body` (raw_ref fields): keep `keep` alive while using it.
bool unpack_body(std::string_view body, const decode_limits& limits,
                 msgpack::object_handle& keep);

template <class T>
bool unpack_body_as(std::string_view body, const decode_limits& limits, T& out) {
  msgpack::object_handle keep;
  if (!unpack_body(body, limits, keep))
    return false;
  try {
    keep.get().convert(out);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

} // namespace vidline::msg
