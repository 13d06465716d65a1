#include "server/sqs/messages.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "server/auth/crypto.h"
#include "server/sqs/digests.h"
#include "server/sqs/wire.h"

namespace txmq::server {

using json = nlohmann::json;

namespace {

constexpr std::string_view kSystemPrefix = "AWS.SQS.";
constexpr std::size_t kMaxTraceHeaderBytes = 1024;

bool is_binary_type(std::string_view type) { return type.starts_with("Binary"); }

// SQS's rules for a message attribute, and its bytes as SQS counts them toward the size limit.
std::size_t check_attribute(const std::string& name, const json& value, AttributeValue& out) {
  auto bad = [&](std::string_view why) {
    fail("InvalidParameterValue", fmt::format("Message attribute '{}' is invalid: {}", name, why));
  };
  const bool name_ok =
      !name.empty() && name.size() <= 256 && name.front() != '.' && name.back() != '.' &&
      name.find("..") == std::string::npos &&
      std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
      });
  if (!name_ok) {
    fail("InvalidParameterValue",
         fmt::format("The message attribute name '{}' is invalid. Attribute name can contain A-Z, "
                     "a-z, 0-9, underscore (_), hyphen (-), and period (.) characters.",
                     name.substr(0, 256)));
  }
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (lower.starts_with("aws.") || lower.starts_with("amazon.")) {
    bad("names starting with AWS. or Amazon. are reserved");
  }
  if (!value.is_object()) bad("the value must be a structure");
  const auto type_member = value.find("DataType");
  if (type_member == value.end() || type_member->is_null()) {
    bad("The message attribute data type is required");
  }
  if (!type_member->is_string()) bad("DataType must be a string");
  const std::string type = type_member->get<std::string>();
  if (type.empty()) bad("The message attribute data type is required");
  const std::string base = type.substr(0, type.find('.'));
  if (base != "String" && base != "Number" && base != "Binary") {
    fail("InvalidParameterValue",
         fmt::format("The message attribute '{}' has an invalid message attribute type, the set "
                     "of supported type prefixes is Binary, Number, and String.",
                     name));
  }
  if (type.size() > 256) bad("DataType is up to 256 characters");
  out.type = type;
  auto empty_value = [&] {
    fail("InvalidParameterValue",
         fmt::format("Message (user) attribute '{}' must contain a non-empty value of type '{}'.",
                     name, base));
  };
  if (base == "Binary") {
    if (!value.contains("BinaryValue")) empty_value();
    if (!value["BinaryValue"].is_string()) bad("BinaryValue must be base64 text");
    auto bytes = base64_decode(value["BinaryValue"].get<std::string>());
    if (!bytes) bad("BinaryValue is not valid base64");
    out.value = std::move(*bytes);
    if (out.value.empty()) empty_value();
  } else {
    if (!value.contains("StringValue")) empty_value();
    if (!value["StringValue"].is_string()) bad("StringValue must be a string");
    out.value = value["StringValue"].get<std::string>();
    if (out.value.empty()) empty_value();
    if (auto at = invalid_body_character(out.value)) {
      bad(fmt::format("StringValue has a character SQS does not allow at byte {}", *at));
    }
    if (base == "Number") {
      const std::string& v = out.value;
      std::size_t i = (v[0] == '-' || v[0] == '+') ? 1 : 0;
      bool digits = false;
      bool ok = i < v.size();
      for (bool dot = false, exp = false; ok && i < v.size(); ++i) {
        const char ch = v[i];
        if (ch >= '0' && ch <= '9') digits = true;
        else if (ch == '.' && !dot && !exp) dot = true;
        else if ((ch == 'e' || ch == 'E') && digits && !exp) {
          exp = true;
          if (i + 1 < v.size() && (v[i + 1] == '-' || v[i + 1] == '+')) ++i;
        } else ok = false;
      }
      if (!ok || !digits) bad("a Number's StringValue must be a number");
    }
  }
  return name.size() + type.size() + out.value.size();
}

}  // namespace

// MessageId: a UUID-shaped name of (topic, id); a dead-lettered message keeps its origin's.
std::string message_id(std::string_view topic, std::uint64_t id) {
  const std::string h = sha256_hex(fmt::format("{}/{}", topic, id));
  return fmt::format("{}-{}-{}-{}-{}", h.substr(0, 8), h.substr(8, 4), h.substr(12, 4),
                     h.substr(16, 4), h.substr(20, 12));
}

// A request's MessageAttributes (and MessageSystemAttributes) as library attributes; returns
// the bytes SQS counts for them.
std::size_t read_attributes(const json& entry, Attributes& out) {
  std::size_t bytes = 0;
  if (auto it = entry.find("MessageAttributes"); it != entry.end() && !it->is_null()) {
    if (!it->is_object()) fail("InvalidParameterValue", "MessageAttributes must be a map");
    if (it->size() > 10) {
      fail("InvalidParameterValue", "Number of message attributes [" +
                                        std::to_string(it->size()) + "] exceeds the allowed maximum [10].");
    }
    for (const auto& [name, value] : it->items()) {
      AttributeValue a;
      bytes += check_attribute(name, value, a);
      out.emplace(name, std::move(a));
    }
  }
  if (auto it = entry.find("MessageSystemAttributes"); it != entry.end() && !it->is_null()) {
    if (!it->is_object()) fail("InvalidParameterValue", "MessageSystemAttributes must be a map");
    for (const auto& [name, value] : it->items()) {
      if (name != "AWSTraceHeader") {
        fail("InvalidParameterValue",
             fmt::format("Message system attribute name '{}' is invalid.", name.substr(0, 64)));
      }
      const auto type = value.is_object() ? value.find("DataType") : value.end();
      const auto text = value.is_object() ? value.find("StringValue") : value.end();
      if (!value.is_object() || type == value.end() || !type->is_string() ||
          type->get_ref<const std::string&>() != "String" || text == value.end() ||
          !text->is_string()) {
        fail("InvalidParameterValue",
             "AWSTraceHeader must have DataType String and a string StringValue");
      }
      const std::string& trace = text->get_ref<const std::string&>();
      // An X-Ray trace header: Root=1-...;Parent=...;Sampled=1, printable ASCII.
      const bool trace_ok =
          !trace.empty() && trace.size() <= kMaxTraceHeaderBytes &&
          std::all_of(trace.begin(), trace.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
      if (!trace_ok) {
        fail("InvalidParameterValue",
             fmt::format("AWSTraceHeader must be 1 to {} printable ASCII characters",
                         kMaxTraceHeaderBytes));
      }
      out[std::string(kTraceHeaderAttribute)] = {"String", trace};
    }
  }
  return bytes;
}

// The user's attributes of a stored message in SQS's JSON shape, filtered by the names asked for.
json user_attributes(const Attributes& attributes, const std::vector<std::string>& wanted) {
  json out = json::object();
  // SQS's ".*" means any rest of the name: "Hel.*" asks for "Hello" and "Help.Me" alike.
  auto asked = [&](const std::string& name) {
    for (const auto& w : wanted) {
      if (w == "All" || w == "*" || w == name) return true;
      if (w.ends_with(".*") && name.starts_with(std::string_view(w).substr(0, w.size() - 2))) {
        return true;
      }
    }
    return false;
  };
  for (const auto& [name, a] : attributes) {
    if (name.starts_with(kSystemPrefix) || !asked(name)) continue;
    json v = {{"DataType", a.type}};
    if (is_binary_type(a.type)) v["BinaryValue"] = base64_encode(a.value);
    else v["StringValue"] = a.value;
    out[name] = std::move(v);
  }
  return out;
}

json user_attributes_all(const Attributes& attributes) { return user_attributes(attributes, {"All"}); }

// The bytes of a send entry as SQS counts them toward a batch's limit: the body and the
// message attributes' names, types and values (a binary value by its bytes, not its base64; as
// sent, before any check). System attributes (AWSTraceHeader) do not count, as in SQS.
std::size_t entry_bytes(const json& entry) {
  const auto text_size = [](const json& v) {
    return v.is_string() ? v.get_ref<const std::string&>().size() : std::size_t{0};
  };
  std::size_t bytes = 0;
  if (auto body = entry.find("MessageBody"); body != entry.end()) bytes += text_size(*body);
  auto attributes = entry.find("MessageAttributes");
  if (attributes == entry.end() || !attributes->is_object()) return bytes;
  for (const auto& [name, value] : attributes->items()) {
    bytes += name.size();
    if (!value.is_object()) continue;
    for (const char* field : {"DataType", "StringValue"}) {
      if (auto f = value.find(field); f != value.end()) bytes += text_size(*f);
    }
    if (auto f = value.find("BinaryValue"); f != value.end() && f->is_string()) {
      const auto decoded = base64_decode(f->get_ref<const std::string&>());
      bytes += decoded ? decoded->size() : text_size(*f);
    }
  }
  return bytes;
}

}  // namespace txmq::server
