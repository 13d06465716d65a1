#include "util/codec.h"

#include <algorithm>
#include <limits>

namespace txmq::util {
namespace {

constexpr char kLowerHex[] = "0123456789abcdef";
constexpr char kUpperHex[] = "0123456789ABCDEF";

constexpr std::string_view kBase64Alphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

bool is_unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == '~';
}

}  // namespace

std::string hex_encode(std::string_view bytes) {
  std::string out(bytes.size() * 2, '0');
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    out[2 * i] = kLowerHex[c >> 4];
    out[2 * i + 1] = kLowerHex[c & 15];
  }
  return out;
}

int hex_digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_percent_encoded(std::string& out, std::string_view bytes, Slash slash) {
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (is_unreserved(c) || (slash == Slash::kKept && c == '/')) {
      out += ch;
    } else {
      out += '%';
      out += kUpperHex[c >> 4];
      out += kUpperHex[c & 15];
    }
  }
}

std::string percent_encode(std::string_view bytes, Slash slash) {
  std::string out;
  out.reserve(bytes.size());
  append_percent_encoded(out, bytes, slash);
  return out;
}

std::optional<std::string> percent_decode(std::string_view text, PlusSign plus, BadEscape bad) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%') {
      const int high = i + 2 < text.size() ? hex_digit_value(text[i + 1]) : -1;
      const int low = i + 2 < text.size() ? hex_digit_value(text[i + 2]) : -1;
      if (high >= 0 && low >= 0) {
        out += static_cast<char>(high * 16 + low);
        i += 2;
      } else if (bad == BadEscape::kKeep) {
        out += c;
      } else {
        return std::nullopt;
      }
    } else if (c == '+' && plus == PlusSign::kSpace) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::optional<FormPairs> form_decode(std::string_view text, BadEscape bad) {
  FormFault fault = FormFault::kNone;
  return form_decode(text, bad, std::numeric_limits<std::size_t>::max(), fault);
}

std::optional<FormPairs> form_decode(std::string_view text, BadEscape bad, std::size_t max_pairs,
                                     FormFault& fault) {
  FormPairs pairs;
  fault = FormFault::kNone;
  while (!text.empty()) {
    if (pairs.size() == max_pairs) {
      fault = FormFault::kTooManyPairs;
      return std::nullopt;
    }
    const std::size_t amp = text.find('&');
    const std::string_view piece = text.substr(0, amp);
    text = amp == std::string_view::npos ? std::string_view() : text.substr(amp + 1);
    if (piece.empty()) continue;
    const std::size_t eq = piece.find('=');
    std::optional<std::string> name = percent_decode(piece.substr(0, eq), PlusSign::kSpace, bad);
    std::optional<std::string> value =
        eq == std::string_view::npos ? std::string()
                                     : percent_decode(piece.substr(eq + 1), PlusSign::kSpace, bad);
    if (!name || !value) {
      fault = FormFault::kBadEscape;
      return std::nullopt;
    }
    pairs.emplace_back(std::move(*name), std::move(*value));
  }
  return pairs;
}

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) |
                       (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    out += kBase64Alphabet[(v >> 18) & 63];
    out += kBase64Alphabet[(v >> 12) & 63];
    out += kBase64Alphabet[(v >> 6) & 63];
    out += kBase64Alphabet[v & 63];
  }
  if (i < bytes.size()) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += kBase64Alphabet[(v >> 18) & 63];
    out += kBase64Alphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kBase64Alphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text, Base64Padding padding) {
  if (padding == Base64Padding::kExact && text.size() % 4 != 0) return std::nullopt;
  const std::size_t unpadded = text.find_last_not_of('=') + 1;  // npos + 1 == 0: all '='
  if (padding == Base64Padding::kExact && text.size() - unpadded > 2) return std::nullopt;
  text = text.substr(0, unpadded);
  std::string out;
  out.reserve(text.size() / 4 * 3 + 2);
  unsigned buffer = 0;
  int bits = 0;
  for (const char c : text) {  // an '=' left inside is outside the alphabet
    const std::size_t v = kBase64Alphabet.find(c);
    if (v == std::string_view::npos) return std::nullopt;
    buffer = (buffer << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buffer >> bits) & 0xff);
    }
  }
  return out;
}

bool is_valid_utf8(std::string_view text) {
  while (!text.empty()) {
    const std::optional<Utf8Char> c = utf8_char(text);
    if (!c) return false;
    text.remove_prefix(c->size);
  }
  return true;
}

std::string printable(std::string_view text, std::size_t max, Escaping how) {
  std::string out;
  out.reserve(std::min(text.size(), max) + 16);
  for (std::size_t i = 0; i < text.size() && i < max; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\\' && how.backslash) {
      out += "\\\\";
    } else if (how.named_controls && (c == '\n' || c == '\r' || c == '\t')) {
      out += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t";
    } else if ((c >= 0x20 && c < 0x7f) || (c >= 0x80 && how.non_ascii_kept)) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kLowerHex[c >> 4];
      out += kLowerHex[c & 15];
    }
  }
  if (text.size() > max) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

}  // namespace txmq::util
