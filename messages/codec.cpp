/// The envelope codec (envelope.hpp): frames in and out, decoded under limits.
///
/// Untrusted bytes pass three gates, cheapest first: the frame size; a pre-scan that walks
/// the msgpack structure without allocating (lengths fit, containers claim no more
/// elements than bytes remain, nesting bounded); then msgpack::unpack under the same
/// limits, with a reference function so strings and bins point into the frame instead of
/// being copied. The pre-scan is what keeps a 5-byte "array of 100000" from costing a
/// 2.4 MB allocation inside msgpack, which unpack_limit alone does not prevent.

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>

#include "messages/envelope.hpp"
#include "messages/messages.hpp"

namespace vidline::msg {
namespace {

/// Elements of a version-1 envelope: magic, version, type, id, sender, correlation,
/// target, body. Receivers ignore elements past these (room to add fields in version 1).
constexpr std::size_t envelope_fields = 8;

/// An envelope holds scalars and one bin; these bounds leave room for fields added at the
/// end of it later while keeping a hostile envelope from claiming large containers.
constexpr std::size_t envelope_max_elements = 32;
constexpr std::size_t envelope_max_depth = 2;

constexpr std::string_view magic{"VIDLINE"};

/// The limits for the envelope itself: `limits`, tightened to what an envelope can hold.
decode_limits envelope_limits(const decode_limits& limits) {
  decode_limits l = limits;
  l.max_array = std::min(l.max_array, envelope_max_elements);
  l.max_map = std::min(l.max_map, envelope_max_elements);
  l.max_depth = std::min(l.max_depth, envelope_max_depth);
  return l;
}

msgpack::unpack_limit to_unpack_limit(const decode_limits& l) {
  return msgpack::unpack_limit(l.max_array, l.max_map, l.max_str, l.max_bin, l.max_ext,
                               std::min(l.max_depth, max_scan_depth));
}

/// Reference (zero-copy) every str, bin and ext within its limit. msgpack 4.1 checks the
/// str/bin/ext limits only on the copying path, so an oversized one must be sent there to
/// be refused (it is, before anything is allocated).
bool reference_within_limits(msgpack::type::object_type type, std::size_t size, void* user) {
  const auto& l = *static_cast<const msgpack::unpack_limit*>(user);
  switch (type) {
  case msgpack::type::STR:
    return size <= l.str();
  case msgpack::type::BIN:
    return size <= l.bin();
  case msgpack::type::EXT:
    return size <= l.ext();
  default:
    return false;
  }
}

uint64_t load_be(const unsigned char* p, std::size_t n) {
  uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i)
    v = (v << 8) | p[i];
  return v;
}

/// Unpacks `data` (already pre-scanned) under `limits`, referencing it; maps msgpack's
/// exceptions to decode errors.
decode_error unpack_checked(const char* data, std::size_t size, const decode_limits& limits,
                            msgpack::object_handle& out) {
  msgpack::unpack_limit ul = to_unpack_limit(limits);
  try {
    std::size_t off = 0;
    bool referenced = false;
    msgpack::object_handle h =
        msgpack::unpack(data, size, off, referenced, &reference_within_limits, &ul, ul);
    if (off != size)
      return decode_error::malformed;
    out = std::move(h);
    return decode_error::none;
  } catch (const msgpack::size_overflow&) {
    return decode_error::limit_exceeded;
  } catch (const std::bad_alloc&) {
    return decode_error::limit_exceeded;
  } catch (...) {
    return decode_error::malformed;
  }
}

/// A name the envelope carries: printable ASCII without spaces (0x21..0x7e), so it can go
/// into logs without escaping or ambiguity.
bool valid_name(const msgpack::object& o, std::size_t max, bool allow_empty) {
  if (o.type != msgpack::type::STR || o.via.str.size > max)
    return false;
  if (o.via.str.size == 0)
    return allow_empty;
  for (uint32_t i = 0; i < o.via.str.size; ++i) {
    auto c = static_cast<unsigned char>(o.via.str.ptr[i]);
    if (c < 0x21 || c > 0x7e)
      return false;
  }
  return true;
}

std::string as_string(const msgpack::object& o) {
  return std::string(o.via.str.ptr, o.via.str.size);
}

template <class Packer>
void pack_key(Packer& pk, std::string_view key) {
  pk.pack_str(static_cast<uint32_t>(key.size()));
  pk.pack_str_body(key.data(), static_cast<uint32_t>(key.size()));
}

uint32_t checked_u32(std::size_t n, const char* what) {
  if (n > std::numeric_limits<uint32_t>::max())
    throw std::length_error(std::string(what) + " exceeds msgpack's 4 GiB bin limit");
  return static_cast<uint32_t>(n);
}

} // namespace

const char* to_string(decode_error e) {
  switch (e) {
  case decode_error::none:
    return "none";
  case decode_error::oversized:
    return "oversized";
  case decode_error::malformed:
    return "malformed";
  case decode_error::limit_exceeded:
    return "limit_exceeded";
  case decode_error::bad_shape:
    return "bad_shape";
  case decode_error::bad_magic:
    return "bad_magic";
  case decode_error::unknown_version:
    return "unknown_version";
  case decode_error::bad_body:
    return "bad_body";
  }
  return "unknown";
}

decode_error prescan(const char* data, std::size_t size, const decode_limits& limits) {
  if (data == nullptr || size == 0)
    return decode_error::malformed;
  const auto* p = reinterpret_cast<const unsigned char*>(data);
  const std::size_t max_depth = std::min(limits.max_depth, max_scan_depth);
  std::array<uint64_t, max_scan_depth> left{};  // elements still owed by each open container
  std::size_t depth = 0;                         // open non-empty containers
  uint64_t owed = 1;                             // elements still owed in all: the root
  std::size_t pos = 0;
  while (owed > 0) {
    if (pos >= size)
      return decode_error::malformed;
    --owed;
    if (depth > 0)
      --left[depth - 1];
    const unsigned char b = p[pos++];
    std::size_t len_bytes = 0;  // bytes of a length field that follows b
    uint64_t skip = 0;          // payload bytes to skip after the length field
    enum { scalar, str, bin, ext, array, map } kind = scalar;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
      // fixint, nil, bool: the byte is the whole element
    } else if (b >= 0x80 && b <= 0x8f) {
      kind = map;
      skip = b & 0x0f;  // pairs, resolved below
    } else if (b >= 0x90 && b <= 0x9f) {
      kind = array;
      skip = b & 0x0f;
    } else if (b >= 0xa0 && b <= 0xbf) {
      kind = str;
      skip = b & 0x1f;
    } else {
      switch (b) {
      case 0xc4: case 0xc5: case 0xc6:
        kind = bin;
        len_bytes = std::size_t{1} << (b - 0xc4);
        break;
      case 0xc7: case 0xc8: case 0xc9:
        kind = ext;
        len_bytes = std::size_t{1} << (b - 0xc7);
        break;
      case 0xca: skip = 4; break;
      case 0xcb: skip = 8; break;
      case 0xcc: case 0xcd: case 0xce: case 0xcf:
        skip = uint64_t{1} << (b - 0xcc);
        break;
      case 0xd0: case 0xd1: case 0xd2: case 0xd3:
        skip = uint64_t{1} << (b - 0xd0);
        break;
      case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
        kind = ext;
        skip = uint64_t{1} << (b - 0xd4);  // data bytes; the type byte is added below
        break;
      case 0xd9: case 0xda: case 0xdb:
        kind = str;
        len_bytes = std::size_t{1} << (b - 0xd9);
        break;
      case 0xdc: case 0xdd:
        kind = array;
        len_bytes = b == 0xdc ? 2 : 4;
        break;
      case 0xde: case 0xdf:
        kind = map;
        len_bytes = b == 0xde ? 2 : 4;
        break;
      default:  // 0xc1 is never used
        return decode_error::malformed;
      }
    }
    if (len_bytes > 0) {
      if (size - pos < len_bytes)
        return decode_error::malformed;
      skip = load_be(p + pos, len_bytes);
      pos += len_bytes;
    }
    switch (kind) {
    case scalar:
      break;
    case str:
      if (skip > limits.max_str)
        return decode_error::limit_exceeded;
      break;
    case bin:
      if (skip > limits.max_bin)
        return decode_error::limit_exceeded;
      break;
    case ext:
      ++skip;  // the type byte; msgpack counts it in the ext size it limits
      if (skip > limits.max_ext)
        return decode_error::limit_exceeded;
      break;
    case array:
    case map: {
      if (skip > (kind == map ? limits.max_map : limits.max_array))
        return decode_error::limit_exceeded;
      const uint64_t items = kind == map ? 2 * skip : skip;
      skip = 0;
      if (items == 0)
        break;
      if (depth >= max_depth)
        return decode_error::limit_exceeded;
      owed += items;
      if (owed > size - pos)  // every element takes at least one byte
        return decode_error::malformed;
      left[depth++] = items;
      break;
    }
    }
    if (skip > size - pos)
      return decode_error::malformed;
    pos += static_cast<std::size_t>(skip);
    while (depth > 0 && left[depth - 1] == 0)
      --depth;
  }
  return pos == size ? decode_error::none : decode_error::malformed;
}

std::string encode_frame_head(const envelope& env, std::size_t body_size) {
  msgpack::sbuffer buf(64 + env.type.size() + env.sender.size() + env.target.size());
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_array(envelope_fields);
  pk.pack_str(static_cast<uint32_t>(magic.size()));
  pk.pack_str_body(magic.data(), static_cast<uint32_t>(magic.size()));
  pk.pack_uint16(env.version);
  pk.pack(env.type);
  pk.pack_uint64(env.id);
  pk.pack(env.sender);
  pk.pack_uint64(env.correlation);
  pk.pack(env.target);
  pk.pack_bin(checked_u32(body_size, "frame body"));
  return std::string(buf.data(), buf.size());
}

std::string encode_frame(const envelope& env, std::string_view body) {
  std::string out = encode_frame_head(env, body.size());
  out.append(body.data(), body.size());
  return out;
}

decode_error decode_frame(const char* data, std::size_t size, const decode_limits& limits,
                          frame& out) {
  if (size > limits.max_frame_bytes)
    return decode_error::oversized;
  const decode_limits lim = envelope_limits(limits);
  if (auto e = prescan(data, size, lim); e != decode_error::none)
    return e;
  msgpack::object_handle h;
  if (auto e = unpack_checked(data, size, lim, h); e != decode_error::none)
    return e;

  const msgpack::object& root = h.get();
  if (root.type != msgpack::type::ARRAY || root.via.array.size < 2)
    return decode_error::bad_shape;
  const msgpack::object* f = root.via.array.ptr;
  if (f[0].type != msgpack::type::STR ||
      std::string_view(f[0].via.str.ptr, f[0].via.str.size) != magic)
    return decode_error::bad_magic;
  if (f[1].type != msgpack::type::POSITIVE_INTEGER)
    return decode_error::bad_shape;
  if (f[1].via.u64 != protocol_version)
    return decode_error::unknown_version;
  if (root.via.array.size < envelope_fields)
    return decode_error::bad_shape;
  if (!valid_name(f[2], limits.max_name, false) ||               // type
      f[3].type != msgpack::type::POSITIVE_INTEGER || f[3].via.u64 == 0 ||  // id
      !valid_name(f[4], limits.max_name, false) ||               // sender
      f[5].type != msgpack::type::POSITIVE_INTEGER ||            // correlation
      !valid_name(f[6], limits.max_name, true) ||                // target
      f[7].type != msgpack::type::BIN)                           // body
    return decode_error::bad_shape;

  out.env.version = static_cast<uint16_t>(f[1].via.u64);
  out.env.type = as_string(f[2]);
  out.env.id = f[3].via.u64;
  out.env.sender = as_string(f[4]);
  out.env.correlation = f[5].via.u64;
  out.env.target = as_string(f[6]);
  out.body = std::string_view(f[7].via.bin.ptr, f[7].via.bin.size);
  out.handle = std::move(h);
  return decode_error::none;
}

bool unpack_body(std::string_view body, const decode_limits& limits,
                 msgpack::object_handle& keep) {
  if (body.size() > limits.max_frame_bytes)
    return false;
  if (prescan(body.data(), body.size(), limits) != decode_error::none)
    return false;
  msgpack::object_handle h;
  if (unpack_checked(body.data(), body.size(), limits, h) != decode_error::none)
    return false;
  if (h.get().type != msgpack::type::MAP)  // every message struct packs as a map
    return false;
  keep = std::move(h);
  return true;
}

std::string pack_latent_chunk_head(const latent_chunk& chunk, std::size_t data_size) {
  // Field names and order as VIDLINE_MSGPACK_MAP in messages.hpp packs them; the codec
  // test checks the bytes against pack_body.
  msgpack::sbuffer buf(128 + chunk.sha256.size() + chunk.error.size());
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(6);
  pack_key(pk, "transfer_id");
  pk.pack(chunk.transfer_id);
  pack_key(pk, "sha256");
  pk.pack(chunk.sha256);
  pack_key(pk, "offset");
  pk.pack(chunk.offset);
  pack_key(pk, "total");
  pk.pack(chunk.total);
  pack_key(pk, "error");
  pk.pack(chunk.error);
  pack_key(pk, "data");
  pk.pack_bin(checked_u32(data_size, "latent chunk"));
  return std::string(buf.data(), buf.size());
}

} // namespace vidline::msg
