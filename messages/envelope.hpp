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
  std::size_t max_depth = 16;              ///< nesting (at most max_scan_depth)
  std::size_t max_ext = 0;                 ///< bytes in any one ext; the protocol uses none
  std::size_t max_name = 255;              ///< bytes in the envelope's type, sender, target
};

/// The deepest nesting any decode_limits may allow: the pre-scan keeps its stack on the
/// stack, so a hostile frame cannot make it allocate.
inline constexpr std::size_t max_scan_depth = 64;

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

/// A decoded frame: the envelope plus a zero-copy view of the body bytes. `body` points
/// into the bytes given to decode_frame: it stays valid while those bytes (the ZeroMQ
/// message) live; `handle` holds the decoded envelope's zone.
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

/// The bytes of encode_frame(env, body) that precede the body: followed by `body_size`
/// bytes of body they make the whole frame. Lets a sender write a frame straight into a
/// ZeroMQ message (latent chunks go from the file into the message with one copy).
std::string encode_frame_head(const envelope& env, std::size_t body_size);

struct latent_chunk;

/// The bytes of pack_body(chunk) that precede chunk.data's contents, for a chunk whose
/// data is `data_size` bytes (chunk.data itself is ignored). Followed by those bytes they
/// make the whole body.
std::string pack_latent_chunk_head(const latent_chunk& chunk, std::size_t data_size);

/// Checks that `data` is exactly one well-formed msgpack value within `limits`, without
/// allocating: every length fits in the bytes that remain, every container claims no more
/// elements than bytes remain (so msgpack::unpack cannot be made to allocate more than the
/// frame is worth), no trailing bytes. Returns none, malformed or limit_exceeded.
decode_error prescan(const char* data, std::size_t size, const decode_limits& limits);

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
