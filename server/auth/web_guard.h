#pragma once

// Who may see txmq serve's web pages (the dashboard, /metrics): with --credentials, HTTP Basic
// auth with a key of the file (user: the access key id, password: its secret); without, only
// requests to a loopback host name (the server then listens on loopback only; the Host check
// stops DNS rebinding). The SQS API's own cross-site rules use loopback_host too.
#include <optional>
#include <string_view>

#include "server/auth/sigv4.h"
#include "server/http/http.h"

namespace txmq::server::web_guard {

// Whether `header` (an Authorization header's value) is Basic auth of a key of `credentials`
// with its secret; the secret is compared in constant time.
bool basic_auth_ok(std::string_view header, const Credentials& credentials);
// Whether a Host header names a loopback host (localhost, 127.x.y.z, [::1]), port ignored.
bool loopback_host(std::string_view host);
// The refusal of a request for `what` ("the txmq dashboard", "/metrics") that may not see it:
// 401 asking for Basic auth when there are credentials and the request does not carry a key of
// them; 403 without credentials when its Host is not a loopback name (DNS rebinding). None when
// it may.
std::optional<HttpResponse> refusal(const RequestHeader& request, const Credentials* credentials,
                                    std::string_view what);

}  // namespace txmq::server::web_guard
