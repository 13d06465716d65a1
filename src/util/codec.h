#pragma once

// Small text codecs shared by the library, txmq serve and the command: hex, percent-encoding
// and forms, base64, UTF-8 and printable escaping. Pure functions of their input; they know
// nothing of queues, databases or HTTP. Where callers need different rules (a '+' in a query,
// a stray '%', missing base64 padding) the rule is a named parameter.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace txmq::util {

// --- hex ---------------------------------------------------------------------------------------

// Two lower-case hex digits per byte.
std::string hex_encode(std::string_view bytes);
// The value of a hex digit of either case, -1 for any other character.
int hex_digit_value(char c);

// --- percent-encoding (RFC 3986) and forms -----------------------------------------------------

// Whether '/' is percent-encoded too (a query's names and values) or kept (a path).
enum class Slash { kEncoded, kKept };
// RFC 3986 percent-encoding with upper-case hex: unreserved characters (A-Z a-z 0-9 - . _ ~)
// kept, every other byte as %XX. SigV4's canonical form.
std::string percent_encode(std::string_view bytes, Slash slash);
void append_percent_encoded(std::string& out, std::string_view bytes, Slash slash);

// What a '+' means: itself (RFC 3986: a DSN) or a space (HTML forms, SQS's query strings).
enum class PlusSign { kLiteral, kSpace };
// What a '%' not followed by two hex digits does: make the text invalid (nullopt), or stay as
// it is (SigV4 signs what the client sent).
enum class BadEscape { kRefuse, kKeep };
// %XX as the byte, either case of hex. With BadEscape::kKeep the result is never nullopt.
std::optional<std::string> percent_decode(std::string_view text, PlusSign plus, BadEscape bad);

// application/x-www-form-urlencoded (a URL's query, a form's body): '&'-separated name=value
// pairs decoded with '+' a space; empty pieces are no pairs, a name without '=' has the value
// "". nullopt for a bad escape under BadEscape::kRefuse.
using FormPairs = std::vector<std::pair<std::string, std::string>>;
std::optional<FormPairs> form_decode(std::string_view text, BadEscape bad);
// The same, bounded: a text that goes on after `max_pairs` pairs is refused before the rest is
// split or decoded (hostile forms and queries). `fault` says why a text was refused.
enum class FormFault { kNone, kBadEscape, kTooManyPairs };
std::optional<FormPairs> form_decode(std::string_view text, BadEscape bad, std::size_t max_pairs,
                                     FormFault& fault);

// --- base64 (RFC 4648, the standard alphabet) --------------------------------------------------

// With '=' padding to a multiple of four characters.
std::string base64_encode(std::string_view bytes);
// kExact: a multiple of four characters, one or two '=' only at the end (SQS's binary values).
// kOptional: any number of trailing '=', none included, and any length; bits left over at the end
// are dropped (HTTP Basic credentials as clients send them).
enum class Base64Padding { kExact, kOptional };
// nullopt for a character outside the alphabet or padding the rule does not allow.
std::optional<std::string> base64_decode(std::string_view text,
                                         Base64Padding padding = Base64Padding::kExact);

// --- UTF-8 (RFC 3629) --------------------------------------------------------------------------

struct Utf8Char {
  char32_t code_point;
  std::size_t size;  // 1 to 4 bytes
};
// The character `text` starts with; nullopt when text is empty or does not start with UTF-8: a
// stray continuation byte, a sequence cut short, an overlong form, a surrogate, or a code point
// past U+10FFFF.
// Inline: SQS checks every byte of every message body with it.
inline std::optional<Utf8Char> utf8_char(std::string_view text) {
  if (text.empty()) return std::nullopt;
  const auto lead = static_cast<unsigned char>(text[0]);
  if (lead < 0x80) return Utf8Char{lead, 1};
  std::size_t size = 0;
  char32_t code_point = 0;
  char32_t smallest = 0;  // below it the form is overlong
  if ((lead & 0xe0) == 0xc0) {
    size = 2, code_point = lead & 0x1f, smallest = 0x80;
  } else if ((lead & 0xf0) == 0xe0) {
    size = 3, code_point = lead & 0x0f, smallest = 0x800;
  } else if ((lead & 0xf8) == 0xf0) {
    size = 4, code_point = lead & 0x07, smallest = 0x10000;
  } else {
    return std::nullopt;
  }
  if (text.size() < size) return std::nullopt;
  for (std::size_t k = 1; k < size; ++k) {
    const auto next = static_cast<unsigned char>(text[k]);
    if ((next & 0xc0) != 0x80) return std::nullopt;
    code_point = (code_point << 6) | (next & 0x3f);
  }
  if (code_point < smallest || code_point > 0x10ffff ||
      (code_point >= 0xd800 && code_point <= 0xdfff)) {
    return std::nullopt;
  }
  return Utf8Char{code_point, size};
}
bool is_valid_utf8(std::string_view text);

// --- printable escaping ------------------------------------------------------------------------

struct Escaping {
  bool backslash = false;       // '\' as "\\", so that an escape in the input cannot pass for ours
  bool named_controls = false;  // '\n', '\r', '\t' as \n \r \t rather than \x0a \x0d \x09
  bool non_ascii_kept = false;  // bytes 0x80 to 0xff as they are (UTF-8 text stays readable)
};
// Untrusted bytes as a message may show them: printable ASCII as is, other bytes as \xNN
// (lower-case), cut after `max` bytes with "... (N bytes)".
std::string printable(std::string_view text, std::size_t max = 64, Escaping how = {});

}  // namespace txmq::util
