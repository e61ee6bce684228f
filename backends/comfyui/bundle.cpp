#include "backends/comfyui/bundle.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <stdexcept>

namespace vidline::backends::comfyui {
namespace {

constexpr std::size_t block = 512;
constexpr uint64_t max_member = 077777777777ull;  // 11 octal digits: 8 GiB - 1

using file_ptr = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

file_ptr open(const std::string& path, const char* mode) {
  file_ptr f(std::fopen(path.c_str(), mode), &std::fclose);
  if (!f)
    throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  return f;
}

void write_all(std::FILE* f, const void* data, std::size_t n, const std::string& path) {
  if (n != 0 && std::fwrite(data, 1, n, f) != n)
    throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
}

void octal(char* field, std::size_t width, uint64_t v) {
  // width-1 digits and a NUL, as ustar writers do.
  std::snprintf(field, width, "%0*llo", static_cast<int>(width - 1),
                static_cast<unsigned long long>(v));
}

unsigned checksum(const std::array<unsigned char, block>& h) {
  unsigned sum = 0;
  for (std::size_t i = 0; i < block; ++i)
    sum += (i >= 148 && i < 156) ? ' ' : h[i];
  return sum;
}

bool parse_octal(const unsigned char* field, std::size_t width, uint64_t& out) {
  uint64_t v = 0;
  std::size_t i = 0;
  while (i < width && field[i] == ' ')
    ++i;
  bool any = false;
  for (; i < width && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (v > (UINT64_MAX >> 3))
      return false;
    v = v * 8 + (field[i] - '0');
    any = true;
  }
  for (; i < width; ++i)
    if (field[i] != ' ' && field[i] != '\0')
      return false;
  out = v;
  return any;
}

} // namespace

bool valid_part_name(const std::string& part) {
  return !part.empty() && part.size() <= 32 &&
         std::all_of(part.begin(), part.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
         });
}

void write_bundle(const std::string& path, const std::vector<bundle_part>& parts) {
  auto out = open(path, "wb");
  std::set<std::string> seen;
  std::vector<char> buf(1 << 20);
  for (auto& p : parts) {
    if (!valid_part_name(p.part) || !seen.insert(p.part).second)
      throw std::runtime_error("bundle " + path + ": invalid or repeated part name '" + p.part + "'");
    auto in = open(p.path, "rb");
    if (std::fseek(in.get(), 0, SEEK_END) != 0)
      throw std::runtime_error("cannot seek " + p.path);
    long size = std::ftell(in.get());
    std::rewind(in.get());
    if (size < 0 || static_cast<uint64_t>(size) > max_member)
      throw std::runtime_error("bundle " + path + ": " + p.path + " is too large for ustar");

    std::array<unsigned char, block> h{};
    std::string name = p.part + ".latent";
    std::memcpy(h.data(), name.data(), name.size());
    auto f = [&](std::size_t off) { return reinterpret_cast<char*>(h.data() + off); };
    octal(f(100), 8, 0644);
    octal(f(108), 8, 0);
    octal(f(116), 8, 0);
    octal(f(124), 12, static_cast<uint64_t>(size));
    octal(f(136), 12, 0);  // mtime 0: the same parts give the same bytes, hence digest
    h[156] = '0';
    std::memcpy(f(257), "ustar", 6);
    std::memcpy(f(263), "00", 2);
    std::snprintf(f(148), 8, "%06o", checksum(h));
    h[155] = ' ';
    write_all(out.get(), h.data(), block, path);

    uint64_t left = static_cast<uint64_t>(size);
    while (left > 0) {
      std::size_t n = std::fread(buf.data(), 1, std::min<uint64_t>(left, buf.size()), in.get());
      if (n == 0)
        throw std::runtime_error("cannot read " + p.path + " (it shrank?)");
      write_all(out.get(), buf.data(), n, path);
      left -= n;
    }
    static const char zeros[block] = {};
    write_all(out.get(), zeros, (block - static_cast<uint64_t>(size) % block) % block, path);
  }
  static const char end[2 * block] = {};
  write_all(out.get(), end, sizeof end, path);
  if (std::fflush(out.get()) != 0)
    throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
}

std::vector<bundle_part> read_bundle(const std::string& path, const std::string& dir) {
  auto in = open(path, "rb");
  std::vector<bundle_part> parts;
  std::set<std::string> seen;
  std::vector<char> buf(1 << 20);
  auto bad = [&](const std::string& why) {
    return std::runtime_error("latent bundle " + path + ": " + why);
  };
  for (;;) {
    std::array<unsigned char, block> h{};
    std::size_t got = std::fread(h.data(), 1, block, in.get());
    if (got != block)
      throw bad("truncated (no end-of-archive blocks)");
    if (std::all_of(h.begin(), h.end(), [](unsigned char c) { return c == 0; }))
      break;
    uint64_t sum = 0, size = 0;
    if (!parse_octal(h.data() + 148, 8, sum) || sum != checksum(h))
      throw bad("header checksum mismatch: not a tar archive, or damaged");
    if (std::memcmp(h.data() + 257, "ustar", 5) != 0)
      throw bad("not a ustar archive");
    if (h[156] != '0' && h[156] != '\0')
      throw bad("member of type '" + std::string(1, static_cast<char>(h[156])) + "' (only regular files)");
    if (h[345] != '\0')
      throw bad("member with a path prefix");
    std::string name(reinterpret_cast<const char*>(h.data()), strnlen(reinterpret_cast<const char*>(h.data()), 100));
    const std::string ext = ".latent";
    if (name.size() <= ext.size() || name.compare(name.size() - ext.size(), ext.size(), ext) != 0)
      throw bad("member '" + name.substr(0, 100) + "' is not <part>.latent");
    std::string part = name.substr(0, name.size() - ext.size());
    if (!valid_part_name(part) || !seen.insert(part).second)
      throw bad("invalid or repeated member '" + name + "'");
    if (!parse_octal(h.data() + 124, 12, size))
      throw bad("member '" + name + "' has no valid size");

    std::string dest = dir + "/" + name;
    auto out = open(dest, "wb");
    uint64_t left = size;
    while (left > 0) {
      std::size_t n = std::fread(buf.data(), 1, std::min<uint64_t>(left, buf.size()), in.get());
      if (n == 0)
        throw bad("truncated in member '" + name + "'");
      write_all(out.get(), buf.data(), n, dest);
      left -= n;
    }
    if (std::fflush(out.get()) != 0)
      throw std::runtime_error("cannot write " + dest);
    std::size_t pad = (block - size % block) % block;
    if (pad != 0 && std::fread(buf.data(), 1, pad, in.get()) != pad)
      throw bad("truncated after member '" + name + "'");
    parts.push_back({part, dest});
  }
  if (parts.empty())
    throw bad("holds no latent");
  return parts;
}

} // namespace vidline::backends::comfyui
