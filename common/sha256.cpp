#include "common/sha256.hpp"

#include <cstdio>
#include <vector>

namespace vidline {

std::string sha256_file_hex(const std::string& path, uint64_t* bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr)
    return {};
  sha256 h;
  std::vector<char> buf(1 << 20);
  uint64_t total = 0;
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
    h.update(buf.data(), n);
    total += n;
  }
  bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed)
    return {};
  if (bytes != nullptr)
    *bytes = total;
  return to_hex(h.finish());
}

} // namespace vidline
