#include "util/random.h"

#include <sys/random.h>

#include <cerrno>
#include <stdexcept>

namespace txmq::util {

bool fill_random(void* out, std::size_t size) noexcept {
  auto* bytes = static_cast<char*>(out);
  std::size_t filled = 0;
  while (filled < size) {
    const ssize_t got = getrandom(bytes + filled, size - filled, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return false;
    filled += static_cast<std::size_t>(got);
  }
  return true;
}

std::string random_bytes(std::size_t size) {
  std::string out(size, '\0');
  if (!fill_random(out.data(), size)) throw std::runtime_error("getrandom failed");
  return out;
}

}  // namespace txmq::util
