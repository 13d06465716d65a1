// libFuzzer target: the DSN parser. Any input either parses or is refused with
// kInvalidArgument; no message shows a password or an unprintable byte.
#include <cstdlib>
#include <string>
#include <string_view>

#include "db/dsn.h"
#include "fuzz.h"
#include "txmq/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  // The input as given, and with a known password spliced in as a DSN's user part.
  constexpr std::string_view kSecret = "Zq9secretPW";
  for (const std::string& text :
       {std::string(input), "mysql://u:" + std::string(kSecret) + "@" + std::string(input),
        "mysql://u:" + std::string(kSecret) + std::string(input)}) {
    try {
      txmq::internal::Dsn dsn = txmq::internal::parse_dsn(text);
      const std::string shown = dsn.describe();
      // A host of the list may hold those bytes itself: then describe() shows a host.
      bool in_a_host = false;
      for (const auto& node : dsn.nodes) in_a_host = in_a_host || node.host.find(kSecret) != std::string::npos;
      txmq::fuzz::require(shown.find(kSecret) == std::string::npos ||
                              dsn.user.find(kSecret) != std::string::npos || in_a_host ||
                              dsn.socket.find(kSecret) != std::string::npos ||
                              dsn.database.find(kSecret) != std::string::npos,
                          "describe() shows the password");
      txmq::fuzz::require(!dsn.user.empty() && !dsn.database.empty(),
                          "accepted without user or database");
    } catch (const txmq::Error& e) {
      txmq::fuzz::require(e.code() == txmq::Errc::kInvalidArgument, "not kInvalidArgument");
      txmq::fuzz::require(txmq::fuzz::printable(e.what()), "unprintable error message");
      if (text.find(kSecret) != std::string::npos &&
          input.find(kSecret) == std::string_view::npos) {
        txmq::fuzz::require(std::string_view(e.what()).find(kSecret) == std::string_view::npos,
                            "an error message shows the password");
      }
    }
  }
  return 0;
}
