#pragma once

// The regions a txmq serve answers (--region): one name, a comma-separated list, or "*" for any.
// A request is signed for one region (its credential scope); the server accepts it when that
// region is among these and answers in it (queue ARNs carry the request's region), so that an
// SDK configured for another region than the server's first still works.
#include <string>
#include <string_view>
#include <vector>

namespace txmq::server {

class Regions {
 public:
  // One region.
  explicit Regions(std::string_view name);
  // "us-east-1", "us-east-1,eu-west-1" or "*" (spaces around names ignored). Throws
  // std::invalid_argument for an empty list, a repeated name or a name that is not a region
  // name (lower-case letters, digits and '-', 1 to 32 characters).
  static Regions parse(std::string_view text);
  static bool valid_name(std::string_view name);

  bool allows(std::string_view region) const;
  bool any() const { return any_; }
  // The region of answers that no request's signature chose (the first named; us-east-1 for "*").
  const std::string& primary() const { return names_.front(); }
  // As given: "us-east-1", "us-east-1,eu-west-1" or "*".
  std::string describe() const;

 private:
  Regions() = default;
  std::vector<std::string> names_;
  bool any_ = false;
};

}  // namespace txmq::server
