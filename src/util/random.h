#pragma once

// Random bytes for values that must not be guessed (lease tokens, receipt keys): the kernel's
// cryptographic generator (getrandom), asked on every call and never buffered, so that a
// forked child cannot hand out bytes its parent already used.
#include <cstddef>
#include <string>

namespace txmq::util {

// Fills `size` bytes at `out`; false (errno set) when the kernel refuses.
[[nodiscard]] bool fill_random(void* out, std::size_t size) noexcept;
// `size` random bytes; throws std::runtime_error when the kernel refuses.
std::string random_bytes(std::size_t size);

}  // namespace txmq::util
