#include "common/digest.hpp"

#include <stdexcept>

#include <openssl/evp.h>

namespace vidline {

struct sha256::impl {
  EVP_MD_CTX* ctx = nullptr;
};

sha256::sha256() : impl_(std::make_unique<impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  if (impl_->ctx == nullptr || EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("sha256: EVP init failed");
}

sha256::~sha256() {
  if (impl_ && impl_->ctx)
    EVP_MD_CTX_free(impl_->ctx);
}

sha256::sha256(sha256&&) noexcept = default;
sha256& sha256::operator=(sha256&& other) noexcept {
  if (this != &other) {
    if (impl_ && impl_->ctx)
      EVP_MD_CTX_free(impl_->ctx);
    impl_ = std::move(other.impl_);
  }
  return *this;
}

void sha256::update(const void* data, std::size_t size) {
  EVP_DigestUpdate(impl_->ctx, data, size);
}

digest sha256::finish() {
  digest d{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(impl_->ctx, d.data(), &len);
  return d;
}

digest sha256::peek() const {
  digest d{};
  EVP_MD_CTX* copy = EVP_MD_CTX_new();
  if (copy == nullptr || EVP_MD_CTX_copy_ex(copy, impl_->ctx) != 1) {
    EVP_MD_CTX_free(copy);
    throw std::runtime_error("sha256: EVP copy failed");
  }
  unsigned int len = 0;
  EVP_DigestFinal_ex(copy, d.data(), &len);
  EVP_MD_CTX_free(copy);
  return d;
}

digest sha256_of(const void* data, std::size_t size) {
  digest d{};
  unsigned int len = 0;
  EVP_Digest(data, size, d.data(), &len, EVP_sha256(), nullptr);
  return d;
}

std::string to_hex(const digest& d) {
  static const char* hex = "0123456789abcdef";
  std::string out(64, '0');
  for (std::size_t i = 0; i < d.size(); ++i) {
    out[2 * i] = hex[d[i] >> 4];
    out[2 * i + 1] = hex[d[i] & 0xf];
  }
  return out;
}

bool is_sha256_hex(std::string_view s) {
  if (s.size() != 64)
    return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

} // namespace vidline
