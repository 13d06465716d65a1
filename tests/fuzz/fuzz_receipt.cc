// libFuzzer target: receipts, which consumers hand back as text. A parsed receipt prints back
// to the same text (one spelling per receipt); refusals are printable kInvalidArgument.
#include <string>
#include <string_view>

#include "fuzz.h"
#include "txmq/client.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const txmq::Receipt r = txmq::Receipt::parse(text);
    txmq::fuzz::require(r.id != 0 && r.token != 0, "a zero id or token was accepted");
    txmq::fuzz::require(r.str() == text, "the receipt does not print back to its text");
  } catch (const txmq::Error& e) {
    txmq::fuzz::require(e.code() == txmq::Errc::kInvalidArgument, "not kInvalidArgument");
    txmq::fuzz::require(txmq::fuzz::printable(e.what()), "unprintable error message");
  }
  return 0;
}
