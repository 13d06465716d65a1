#pragma once

// The cryptography of authentication, on OpenSSL: SHA-256 and HMAC-SHA256, the comparison of
// secrets in constant time, and random bytes that must not be guessed.
#include <array>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>

#include "util/random.h"

namespace txmq::server {

using Sha256 = std::array<unsigned char, 32>;
// SHA-256 of the concatenation of `parts`, and HMAC-SHA256 as RFC 2104 defines it, on an
// algorithm fetched from OpenSSL once and a context per thread (SigV4 and receipt handles run
// them on every request).
Sha256 sha256(std::initializer_list<std::string_view> parts);
Sha256 hmac_sha256(std::string_view key, std::string_view data);
std::string hex_of(const Sha256& digest);  // lower-case
// `size` bytes in lower-case hex.
std::string lower_hex(const unsigned char* bytes, unsigned int size);

std::string sha256_hex(std::string_view bytes);
// HMAC-SHA256 of `data` under `key`, in lower-case hex.
std::string hmac_sha256_hex(std::string_view key, std::string_view data);
// Whether two strings are equal, in a time that depends on their sizes only (for secrets).
bool constant_time_equal(std::string_view a, std::string_view b);
// Random bytes for values that must not be guessed (the receipt key) are util's.
using util::random_bytes;

}  // namespace txmq::server
