// client: the facade (txmq::Client, which routes each call to the engine or to the shards) and
// the Worker. Here: Client::Subscription's state, the long-poll layer's subscriber, which it
// ends when destroyed.
#pragma once

#include <memory>

#include "txmq/client.h"
#include "wait/subscriber.h"

namespace txmq {

struct Client::Subscription::Impl {
  explicit Impl(std::shared_ptr<internal::Subscriber> s) : subscriber(std::move(s)) {}
  const std::shared_ptr<internal::Subscriber> subscriber;
};

}  // namespace txmq
