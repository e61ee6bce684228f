#include "backends/sim/latent.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include "config/profile/profile.hpp"

namespace vidline::backends::sim {
namespace {

constexpr std::string_view domain = "vidline-sim-latent";  // 18 bytes, no terminator
constexpr std::size_t prefix_bytes = 18 + 8 + 4 + 4 + 4;    // 38
constexpr std::size_t block_bytes = 32;
static_assert(latent_generator::piece_bytes % block_bytes == 0);

void put_le(uint8_t* out, uint64_t v, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k)
    out[k] = static_cast<uint8_t>(v >> (8 * k));
}

std::array<uint8_t, prefix_bytes> make_prefix(const latent_key& key) {
  std::array<uint8_t, prefix_bytes> p{};
  std::memcpy(p.data(), domain.data(), domain.size());
  put_le(p.data() + 18, key.seed, 8);
  put_le(p.data() + 26, key.width, 4);
  put_le(p.data() + 30, key.height, 4);
  put_le(p.data() + 34, key.seconds, 4);
  return p;
}

[[noreturn]] void openssl_failed(const char* what) {
  throw std::runtime_error(std::string("latent: OpenSSL ") + what + " failed");
}

} // namespace

uint64_t latent_bytes(const profile& p, uint32_t width, uint32_t height, uint32_t seconds) {
  return p.latent_bytes({width, height, seconds});
}

digest block(const latent_key& key, uint64_t i) {
  std::array<uint8_t, prefix_bytes + 8 + 32> message{};
  auto prefix = make_prefix(key);
  std::memcpy(message.data(), prefix.data(), prefix.size());
  put_le(message.data() + prefix_bytes, i, 8);
  std::memcpy(message.data() + prefix_bytes + 8, key.ident.data(), key.ident.size());
  return sha256_of(message.data(), message.size());
}

/// Owns the OpenSSL objects: the fetched SHA-256, the context holding the absorbed
/// prefix, a scratch context per block, and the running hash of the whole latent.
struct latent_generator::impl {
  EVP_MD* md = nullptr;
  EVP_MD_CTX* prefix_ctx = nullptr;
  EVP_MD_CTX* block_ctx = nullptr;
  vidline::sha256 whole;
  std::vector<uint8_t> piece;
  uint64_t total = 0;
  uint64_t produced = 0;
  uint64_t next_block = 0;
  digest ident{};

  ~impl() {
    EVP_MD_CTX_free(block_ctx);
    EVP_MD_CTX_free(prefix_ctx);
    EVP_MD_free(md);
  }

  void compute_block(uint8_t* out) {
    uint8_t index[8];
    put_le(index, next_block++, 8);
    unsigned int len = 0;
    if (EVP_MD_CTX_copy_ex(block_ctx, prefix_ctx) != 1 ||
        EVP_DigestUpdate(block_ctx, index, sizeof index) != 1 ||
        EVP_DigestUpdate(block_ctx, ident.data(), ident.size()) != 1 ||
        EVP_DigestFinal_ex(block_ctx, out, &len) != 1)
      openssl_failed("digest");
  }
};

latent_generator::latent_generator(const latent_key& key, uint64_t total_bytes)
    : impl_(std::make_unique<impl>()) {
  impl_->total = total_bytes;
  impl_->ident = key.ident;
  // An explicitly fetched EVP_MD skips the per-call provider lookup of EVP_sha256().
  impl_->md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  impl_->prefix_ctx = EVP_MD_CTX_new();
  impl_->block_ctx = EVP_MD_CTX_new();
  if (impl_->md == nullptr || impl_->prefix_ctx == nullptr || impl_->block_ctx == nullptr)
    openssl_failed("allocation");
  auto prefix = make_prefix(key);
  if (EVP_DigestInit_ex2(impl_->prefix_ctx, impl_->md, nullptr) != 1 ||
      EVP_DigestUpdate(impl_->prefix_ctx, prefix.data(), prefix.size()) != 1)
    openssl_failed("init");
  impl_->piece.resize(static_cast<std::size_t>(std::min<uint64_t>(total_bytes, piece_bytes)));
}

latent_generator::~latent_generator() = default;
latent_generator::latent_generator(latent_generator&&) noexcept = default;
latent_generator& latent_generator::operator=(latent_generator&&) noexcept = default;

std::string_view latent_generator::next() {
  impl& s = *impl_;
  auto size = static_cast<std::size_t>(std::min<uint64_t>(s.total - s.produced, piece_bytes));
  uint8_t* out = s.piece.data();
  std::size_t whole_blocks = size / block_bytes;
  for (std::size_t b = 0; b < whole_blocks; ++b)
    s.compute_block(out + b * block_bytes);
  if (std::size_t tail = size % block_bytes; tail != 0) {
    uint8_t last[block_bytes];
    s.compute_block(last);
    std::memcpy(out + whole_blocks * block_bytes, last, tail);
  }
  s.whole.update(out, size);
  s.produced += size;
  return {reinterpret_cast<const char*>(out), size};
}

bool latent_generator::done() const noexcept { return impl_->produced == impl_->total; }
uint64_t latent_generator::produced() const noexcept { return impl_->produced; }
uint64_t latent_generator::total() const noexcept { return impl_->total; }

std::string latent_generator::sha256_hex() {
  if (!done())
    throw std::logic_error("latent_generator: digest asked before the end");
  return to_hex(impl_->whole.finish());
}

std::optional<std::string> generate_latent(const latent_key& key, uint64_t total_bytes,
                                           const latent_sink& sink) {
  latent_generator gen(key, total_bytes);
  while (!gen.done())
    if (!sink(gen.next()))
      return std::nullopt;
  return gen.sha256_hex();
}

namespace {

/// A file descriptor that closes itself, and removes its file unless kept.
class output_file {
public:
  explicit output_file(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0)
      fail("cannot create");
  }
  ~output_file() {
    if (fd_ >= 0)
      ::close(fd_);
    if (!keep_)
      ::unlink(path_.c_str());
  }
  output_file(const output_file&) = delete;
  output_file& operator=(const output_file&) = delete;

  void write(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR)
          continue;
        fail("cannot write");
      }
      data.remove_prefix(static_cast<std::size_t>(n));
    }
  }

  /// fsyncs and closes the file, and keeps it.
  void commit() {
    if (::fsync(fd_) != 0)
      fail("cannot fsync");
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0)
      fail("cannot close");
    keep_ = true;
  }

private:
  [[noreturn]] void fail(const char* what) {
    throw std::runtime_error(std::string(what) + " " + path_ + ": " + std::strerror(errno));
  }

  std::string path_;
  int fd_ = -1;
  bool keep_ = false;
};

} // namespace

std::optional<std::string> write_latent_file(const latent_key& key, uint64_t total_bytes,
                                             const std::string& path,
                                             const std::function<bool()>& keep_going) {
  output_file out(path);
  latent_generator gen(key, total_bytes);
  while (!gen.done()) {
    if (keep_going && !keep_going())
      return std::nullopt;
    out.write(gen.next());
  }
  out.commit();
  return gen.sha256_hex();
}

} // namespace vidline::backends::sim
