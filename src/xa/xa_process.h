// Exactly-once across databases: a batch of a topic processed in an XA transaction that spans
// the queue's server and the resource's.
#pragma once

#include <string_view>
#include <vector>

#include "engine/queue_context.h"
#include "txmq/transaction.h"
#include "txmq/types.h"
#include "xa/xa.h"

namespace txmq::internal {

std::size_t process_xa(QueueContext& q, XaSites& sites, std::string_view topic, const XaResource& resource,
                       const ProcessOptions& options, const TransactionalHandler& handler);
XaRecovery recover_xa(QueueContext& q, XaSites& sites, const XaResource& resource);
std::vector<XaBranchStatus> xa_status(QueueContext& q, XaSites& sites, const XaResource& resource);

}  // namespace txmq::internal
