// libFuzzer target: the frame decoder, as a node's I/O thread and router use it.
//
// Input: one ZeroMQ frame's bytes. decode_frame runs under the wire limits (nodes/bus/bus_options.cpp
// wire_limits: max_frame_bytes from the knobs, strings and bins bounded by the frame) and
// under tight limits; the body (or, when the frame does not decode, the whole input, so
// bodies are fuzzed directly too) is unpacked once and converted to every message type.
//
// Checked, besides "no crash, no sanitizer report, no exception":
// - a decoded envelope holds what PROTOCOL.md promises (names printable and bounded, id
//   not 0, the body inside the input) and survives encode_frame -> decode_frame unchanged;
// - what decodes under tight limits decodes the same under the wire limits;
// - a body that converts to the type its envelope names re-packs to bytes that convert
//   again and re-pack to the same bytes (pack/unpack are each other's inverse);
// - a latent_chunk's pack_latent_chunk_head + data equals pack_body.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <string_view>

#include "messages/envelope.hpp"
#include "messages/messages.hpp"

namespace msg = vidline::msg;

namespace {

void fail(const char* what) {
  std::fprintf(stderr, "fuzz_frame: property violated: %s\n", what);
  std::abort();
}

void check(bool ok, const char* what) {
  if (!ok)
    fail(what);
}

/// nodes/bus/bus_options.cpp wire_limits() with the default knobs (max_frame_bytes 8 MiB): copied,
/// not linked, so the target needs no ZeroMQ.
msg::decode_limits wire_limits() {
  msg::decode_limits l;
  l.max_frame_bytes = 8u << 20;
  l.max_bin = l.max_frame_bytes;
  l.max_str = l.max_frame_bytes;
  return l;
}

/// Small enough that the fuzzer reaches every limit branch with short inputs.
msg::decode_limits tight_limits() {
  msg::decode_limits l;
  l.max_frame_bytes = 512;
  l.max_array = 4;
  l.max_map = 8;
  l.max_str = 32;
  l.max_bin = 64;
  l.max_depth = 3;
  l.max_name = 16;
  return l;
}

/// PROTOCOL.md: envelope names are printable ASCII without spaces (0x21..0x7e).
bool printable(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x21 || c > 0x7e)
      return false;
  return true;
}

bool same_env(const msg::envelope& a, const msg::envelope& b) {
  return a.version == b.version && a.type == b.type && a.id == b.id && a.sender == b.sender &&
         a.correlation == b.correlation && a.target == b.target;
}

void check_envelope(const msg::frame& f, const char* data, std::size_t size,
                    const msg::decode_limits& l) {
  const msg::envelope& e = f.env;
  check(e.version == msg::protocol_version, "version");
  check(!e.type.empty() && e.type.size() <= l.max_name && printable(e.type), "type name");
  check(!e.sender.empty() && e.sender.size() <= l.max_name && printable(e.sender), "sender name");
  check(e.target.size() <= l.max_name && printable(e.target), "target name");
  check(e.id != 0, "id 0 accepted");
  check(f.body.size() <= size && (f.body.empty() || (f.body.data() >= data &&
                                                     f.body.data() + f.body.size() <= data + size)),
        "body outside the frame");
}

/// Re-encodes a decoded frame and decodes it again: the same envelope and body.
void check_reencode(const msg::frame& f, const msg::decode_limits& l) {
  const std::string again = msg::encode_frame(f.env, f.body);
  msg::frame g;
  const auto err = msg::decode_frame(again.data(), again.size(), l, g);
  check(err == msg::decode_error::none, "re-encoded frame does not decode");
  check(same_env(f.env, g.env), "re-encoded envelope differs");
  check(f.body == g.body, "re-encoded body differs");
}

/// pack(x) converts back, and pack(convert(pack(x))) == pack(x).
template <class T>
void check_repack(const T& x, const msg::decode_limits& l) {
  const std::string once = msg::pack_body(x);
  T y;
  check(msg::unpack_body_as(once, l, y), "a re-packed body does not unpack");
  check(msg::pack_body(y) == once, "pack/unpack do not round-trip");
}

void check_chunk_head(const msg::latent_chunk& c) {
  std::string whole = msg::pack_latent_chunk_head(c, c.data.size);
  whole.append(c.data.ptr, c.data.size);
  check(whole == msg::pack_body(c), "pack_latent_chunk_head + data != pack_body");
}

/// Converts `obj` to T the way unpack_body_as does; on success and when `deep`, checks
/// the round trip.
template <class T>
void convert_as(const msgpack::object& obj, const msg::decode_limits& l, bool deep) {
  T x;
  try {
    obj.convert(x);
  } catch (const std::exception&) {
    return;  // refused: what the router does too
  }
  if (!deep)
    return;
  check_repack(x, l);
  if constexpr (std::is_same_v<T, msg::latent_chunk>)
    check_chunk_head(x);
}

/// Every message type, in PROTOCOL.md's order. `deep` selects the one whose round trip is
/// checked (the envelope's type; for a bare body, one chosen by the input).
void convert_all(const msgpack::object& obj, const msg::decode_limits& l,
                 std::string_view deep) {
#define VIDLINE_FUZZ_TYPE(T) convert_as<msg::T>(obj, l, deep == msg::T::wire_name)
  VIDLINE_FUZZ_TYPE(sample_order);
  VIDLINE_FUZZ_TYPE(sample_result);
  VIDLINE_FUZZ_TYPE(pool_status);
  VIDLINE_FUZZ_TYPE(result_ack);
  VIDLINE_FUZZ_TYPE(decode_order);
  VIDLINE_FUZZ_TYPE(decode_result);
  VIDLINE_FUZZ_TYPE(decoder_status);
  VIDLINE_FUZZ_TYPE(encode_request);
  VIDLINE_FUZZ_TYPE(encode_reply);
  VIDLINE_FUZZ_TYPE(heartbeat);
  VIDLINE_FUZZ_TYPE(peer_event);
  VIDLINE_FUZZ_TYPE(latent_fetch);
  VIDLINE_FUZZ_TYPE(latent_chunk);
  VIDLINE_FUZZ_TYPE(submit_run);
  VIDLINE_FUZZ_TYPE(submit_reply);
  VIDLINE_FUZZ_TYPE(status_query);
  VIDLINE_FUZZ_TYPE(status_reply);
  VIDLINE_FUZZ_TYPE(resume_run);
  VIDLINE_FUZZ_TYPE(resume_reply);
  VIDLINE_FUZZ_TYPE(shutdown_request);
#undef VIDLINE_FUZZ_TYPE
}

constexpr const char* all_types[] = {
    msg::sample_order::wire_name,   msg::sample_result::wire_name, msg::pool_status::wire_name,
    msg::result_ack::wire_name,     msg::decode_order::wire_name,  msg::decode_result::wire_name,
    msg::decoder_status::wire_name, msg::encode_request::wire_name, msg::encode_reply::wire_name,
    msg::heartbeat::wire_name,      msg::peer_event::wire_name,    msg::latent_fetch::wire_name,
    msg::latent_chunk::wire_name,   msg::submit_run::wire_name,    msg::submit_reply::wire_name,
    msg::status_query::wire_name,   msg::status_reply::wire_name,  msg::resume_run::wire_name,
    msg::resume_reply::wire_name,   msg::shutdown_request::wire_name};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, std::size_t size) {
  static const msg::decode_limits wire = wire_limits();
  static const msg::decode_limits tight = tight_limits();
  const char* data = reinterpret_cast<const char*>(bytes);

  msg::frame tf;
  const auto tight_err = msg::decode_frame(data, size, tight, tf);
  if (tight_err == msg::decode_error::none)
    check_envelope(tf, data, size, tight);

  msg::frame f;
  const auto err = msg::decode_frame(data, size, wire, f);
  std::string_view body(data, size);
  std::string_view deep = all_types[size % (sizeof(all_types) / sizeof(all_types[0]))];
  if (err == msg::decode_error::none) {
    check_envelope(f, data, size, wire);
    check_reencode(f, wire);
    body = f.body;
    deep = f.env.type;
  }
  if (tight_err == msg::decode_error::none)
    check(err == msg::decode_error::none && same_env(tf.env, f.env) && tf.body == f.body,
          "decodes under tight limits but not the same under the wire limits");

  msgpack::object_handle keep;
  if (msg::unpack_body(body, wire, keep))
    convert_all(keep.get(), wire, deep);
  // The tight limits on the body too: they must refuse cleanly, never crash.
  msgpack::object_handle keep_tight;
  if (msg::unpack_body(body, tight, keep_tight))
    check(msg::unpack_body(body, wire, keep), "body unpacks under tight limits only");
  return 0;
}
