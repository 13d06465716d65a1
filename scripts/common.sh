# Shared by scripts/demo and scripts/test: install what is missing, then build once into build/.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${TXMQ_BUILD_DIR:-$ROOT/build}"

# Debian packages the build, the embedded server and the tests need.
TXMQ_PACKAGES=(cmake g++ make pkg-config libmariadb-dev mariadb-server libcli11-dev
               nlohmann-json3-dev libfmt-dev libgtest-dev libgmock-dev
               openssl    # the TLS test makes its certificates
               libssl-dev libboost-dev   # txmq serve: digests and SigV4; Beast and Asio
               libtomlplusplus-dev       # txmq serve --config (header-only use)
               awscli python3-boto3      # the SQS tests' Query-protocol clients (tests/sqs)
               prometheus                # promtool: the metrics tests check the exposition
               # tests/sql: the SQL interface through each language's driver (no network)
               python3-pymysql python3-sqlalchemy golang-go golang-github-go-sql-driver-mysql-dev
               default-jdk-headless libmariadb-java libjna-java php-cli php-mysql
               dpkg-dev file lintian)    # tests/package: cpack -G DEB (dpkg-shlibdeps, file), lintian

txmq_install_deps() {
  local missing=()
  for p in "${TXMQ_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "txmq: installing ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  # The packages' own services (mariadb, prometheus) are not used and not started: txmq runs
  # private servers, and the tests only need promtool. A policy-rc.d of our own says so to
  # invoke-rc.d while installing, unless the machine has one.
  local policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
    $sudo chmod 755 "$policy"
  fi
  local status=0
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || status=$?
  [ -z "$policy" ] || $sudo rm -f "$policy"
  return "$status"
}

# How the sanitizer builds report (scripts/test, scripts/sanitize): any report fails the run.
txmq_sanitizer_env() {
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1"
  export LSAN_OPTIONS="suppressions=$ROOT/tests/sanitizers/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
}

txmq_build() {
  [ -f "$BUILD_DIR/CMakeCache.txt" ] || echo "txmq: building into $BUILD_DIR (the first build takes a few minutes)" >&2
  cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="${TXMQ_BUILD_TYPE:-RelWithDebInfo}" "$@" >/dev/null
  cmake --build "$BUILD_DIR" -j"$(nproc)"
}

# An npm package a test suite needs, into DIR (the suites' run.sh call this, not the configure
# step); nothing is fetched when it is there already. A fresh Debian 12 gets its own Node.js and
# npm first.
#   txmq_install_npm DIR PACKAGE VERSION WHAT
txmq_install_npm() {
  local dir="$1" package="$2" version="$3" what="$4"
  [ -f "$dir/node_modules/$package/package.json" ] && return 0
  if ! command -v npm >/dev/null; then
    echo "txmq: installing nodejs and npm for $what" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
  fi
  echo "txmq: installing $package into $dir" >&2
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "$package@$version" >/dev/null
}

# The SQS tests' JSON-protocol client, @aws-sdk/client-sqs v3 (tests/sqs/run.sh).
txmq_install_sqs_node() {
  txmq_install_npm "$1" @aws-sdk/client-sqs 3 "the JSON-protocol SQS tests"
}

# tests/sql's Node.js driver, mysql2, for its promise API (tests/sql/run.sh node).
txmq_install_sql_node() {
  txmq_install_npm "$1" mysql2 3 "the SQL interface's Node.js tests"
}
