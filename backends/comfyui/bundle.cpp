#include "backends/comfyui/bundle.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <stdexcept>

#include <archive.h>
#include <archive_entry.h>

// The ustar reading and writing is libarchive's (Debian's libarchive-dev); this file only
// says which members a latent bundle may hold and turns libarchive's errors into ours.

namespace vidline::backends::comfyui {
namespace {

constexpr std::size_t chunk = 1 << 20;
const std::string member_ext = ".latent";

using archive_ptr = std::unique_ptr<struct archive, int (*)(struct archive*)>;
using entry_ptr = std::unique_ptr<struct archive_entry, void (*)(struct archive_entry*)>;
using file_ptr = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

file_ptr open(const std::string& path, const char* mode) {
  file_ptr f(std::fopen(path.c_str(), mode), &std::fclose);
  if (!f)
    throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  return f;
}

std::string error_of(struct archive* a) {
  const char* e = archive_error_string(a);
  return e != nullptr ? e : "unknown libarchive error";
}

} // namespace

bool valid_part_name(const std::string& part) {
  return !part.empty() && part.size() <= 32 &&
         std::all_of(part.begin(), part.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
         });
}

void write_bundle(const std::string& path, const std::vector<bundle_part>& parts) {
  std::set<std::string> seen;
  for (auto& p : parts)
    if (!valid_part_name(p.part) || !seen.insert(p.part).second)
      throw std::runtime_error("bundle " + path + ": invalid or repeated part name '" + p.part + "'");

  archive_ptr a(archive_write_new(), &archive_write_free);
  auto fail = [&](const std::string& what) {
    return std::runtime_error("bundle " + path + ": " + what + ": " + error_of(a.get()));
  };
  // 512-byte blocks: the archive ends right after its two end-of-archive blocks.
  if (archive_write_set_format_ustar(a.get()) != ARCHIVE_OK ||
      archive_write_add_filter_none(a.get()) != ARCHIVE_OK ||
      archive_write_set_bytes_per_block(a.get(), 512) != ARCHIVE_OK ||
      archive_write_open_filename(a.get(), path.c_str()) != ARCHIVE_OK)
    throw fail("cannot create");
  std::vector<char> buf(chunk);
  for (auto& p : parts) {
    auto in = open(p.path, "rb");
    if (std::fseek(in.get(), 0, SEEK_END) != 0)
      throw std::runtime_error("cannot seek " + p.path);
    long size = std::ftell(in.get());
    std::rewind(in.get());
    if (size < 0)
      throw std::runtime_error("cannot size " + p.path);
    entry_ptr e(archive_entry_new(), &archive_entry_free);
    archive_entry_set_pathname(e.get(), (p.part + member_ext).c_str());
    archive_entry_set_filetype(e.get(), AE_IFREG);
    archive_entry_set_perm(e.get(), 0644);
    archive_entry_set_size(e.get(), size);
    archive_entry_set_mtime(e.get(), 0, 0);  // the same parts give the same bytes, hence digest
    if (archive_write_header(a.get(), e.get()) != ARCHIVE_OK)
      throw fail("cannot add " + p.path);
    for (long left = size; left > 0;) {
      std::size_t n = std::fread(buf.data(), 1, std::min<long>(left, chunk), in.get());
      if (n == 0)
        throw std::runtime_error("cannot read " + p.path + " (it shrank?)");
      if (archive_write_data(a.get(), buf.data(), n) != static_cast<la_ssize_t>(n))
        throw fail("cannot write");
      left -= static_cast<long>(n);
    }
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK)
    throw fail("cannot write");
}

std::vector<bundle_part> read_bundle(const std::string& path, const std::string& dir) {
  auto bad = [&](const std::string& why) {
    return std::runtime_error("latent bundle " + path + ": " + why);
  };
  archive_ptr a(archive_read_new(), &archive_read_free);
  if (archive_read_support_format_tar(a.get()) != ARCHIVE_OK ||
      archive_read_support_filter_none(a.get()) != ARCHIVE_OK)
    throw bad("libarchive: " + error_of(a.get()));
  if (archive_read_open_filename(a.get(), path.c_str(), chunk) != ARCHIVE_OK)
    throw bad("not a tar archive, or a damaged header (checksum): " + error_of(a.get()));

  std::vector<bundle_part> parts;
  std::set<std::string> seen;
  std::vector<char> buf(chunk);
  for (;;) {
    struct archive_entry* e = nullptr;
    int r = archive_read_next_header(a.get(), &e);
    if (r == ARCHIVE_EOF)
      break;
    if (r != ARCHIVE_OK)
      throw bad((parts.empty() ? "not a tar archive, or a damaged header (checksum): "
                               : "truncated or damaged after member '" + parts.back().part +
                                     member_ext + "': ") + error_of(a.get()));
    if (archive_format(a.get()) != ARCHIVE_FORMAT_TAR_USTAR &&
        archive_format(a.get()) != ARCHIVE_FORMAT_TAR_PAX_INTERCHANGE)
      throw bad("not a ustar archive");
    if (archive_entry_filetype(e) != AE_IFREG)
      throw bad("member '" + std::string(archive_entry_pathname(e)) + "' is not a regular file");
    std::string name = archive_entry_pathname(e);
    if (name.size() <= member_ext.size() ||
        name.compare(name.size() - member_ext.size(), member_ext.size(), member_ext) != 0)
      throw bad("member '" + name.substr(0, 100) + "' is not <part>.latent");
    std::string part = name.substr(0, name.size() - member_ext.size());
    if (!valid_part_name(part) || !seen.insert(part).second)
      throw bad("invalid or repeated member '" + name + "'");

    std::string dest = dir + "/" + name;
    auto out = open(dest, "wb");
    for (;;) {
      la_ssize_t n = archive_read_data(a.get(), buf.data(), buf.size());
      if (n == 0)
        break;
      if (n < 0)
        throw bad("truncated in member '" + name + "': " + error_of(a.get()));
      if (std::fwrite(buf.data(), 1, static_cast<std::size_t>(n), out.get()) !=
          static_cast<std::size_t>(n))
        throw std::runtime_error("cannot write " + dest + ": " + std::strerror(errno));
    }
    if (std::fflush(out.get()) != 0)
      throw std::runtime_error("cannot write " + dest);
    parts.push_back({part, dest});
  }
  if (parts.empty())
    throw bad("holds no latent");
  return parts;
}

} // namespace vidline::backends::comfyui
