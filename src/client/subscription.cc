#include "client/subscription.h"

namespace txmq {

Client::Subscription::Subscription(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::Subscription::Subscription(Subscription&&) noexcept = default;

Client::Subscription& Client::Subscription::operator=(Subscription&& other) noexcept {
  if (this != &other) {
    Subscription ended(std::move(*this));
    impl_ = std::move(other.impl_);
  }
  return *this;
}

Client::Subscription::~Subscription() {
  if (impl_) impl_->subscriber->end();
}

}  // namespace txmq
