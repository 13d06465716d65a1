#!/bin/bash
# Install and consume (docs/install.md): the build tree installed into a scratch prefix, the
# programs of examples/ built against that install as an outside project, with find_package(txmq)
# (tests/package/CMakeLists.txt: shared and static) and with pkg-config and plain g++ (shared
# and static), all of them run against the test server, then the Debian package (cpack -G DEB):
# its files, control data and lintian (no errors).
#   tests/package/run.sh BUILD_DIR
# Reuses BUILD_DIR as built; nothing of txmq is compiled again. The examples run in a database
# of their own (txmq_package) on the server the usual DSN resolution gives (TXMQ_DSN, else the
# embedded server of $TXMQ_HOME: CTest's txmq_server fixture), since their topics and tables
# have fixed names that the integration tests use too.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
BUILD="$(cd "$1" && pwd)"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/txmq-package.XXXXXX")"
PREFIX="$SCRATCH/prefix"
trap 'rm -rf "$SCRATCH"' EXIT
SECONDS=0
step() { echo "== $* (${SECONDS}s)"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_in() {  # expect_in TEXT PATTERN WHAT
  grep -qE -- "$2" <<<"$1" || { printf '%s\n' "$1" >&2; fail "$3: no line matches '$2'"; }
}

step "cmake --install into $PREFIX"
cmake --install "$BUILD" --prefix "$PREFIX" >"$SCRATCH/install.log"
LIBDIR="$(dirname "$(find "$PREFIX" -name libtxmq.a)")"
for f in bin/txmq bin/txmq-bench include/txmq/client.h include/txmq/transaction.h share/man/man1/txmq.1.gz \
         share/bash-completion/completions/txmq share/doc/txmq/copyright \
         lib/systemd/system/txmq-serve.service etc/txmq/serve.conf etc/txmq/txmq.env; do
  [ -e "$PREFIX/$f" ] || fail "not installed: $f"
done
for f in libtxmq.a libtxmq.so libtxmq.so.0 pkgconfig/txmq.pc cmake/txmq/txmqConfig.cmake \
         cmake/txmq/txmqConfigVersion.cmake cmake/txmq/txmqTargets.cmake \
         cmake/txmq/txmqStaticTargets.cmake; do
  [ -e "$LIBDIR/$f" ] || fail "not installed: ${LIBDIR#"$PREFIX/"}/$f"
done
VERSION="$(sed -n 's/^project(txmq VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")"
[ "$(readlink "$LIBDIR/libtxmq.so")" = libtxmq.so.0 ] || fail "libtxmq.so -> $(readlink "$LIBDIR/libtxmq.so")"
[ "$(readlink "$LIBDIR/libtxmq.so.0")" = "libtxmq.so.$VERSION" ] || fail "libtxmq.so.0 -> $(readlink "$LIBDIR/libtxmq.so.0")"
expect_in "$(readelf -d "$LIBDIR/libtxmq.so.$VERSION")" 'SONAME.*\[libtxmq\.so\.0\]' "libtxmq's SONAME"
[ "$(stat -c %a "$PREFIX/etc/txmq/txmq.env")" = 600 ] || fail "txmq.env is not mode 600"
expect_in "$(cat "$PREFIX/lib/systemd/system/txmq-serve.service")" \
  "^ExecStart=$PREFIX/bin/txmq serve --config $PREFIX/etc/txmq/serve.conf\$" "the unit's paths"
expect_in "$("$PREFIX/bin/txmq" --help)" 'serve' "the installed txmq --help"

# The examples' database: the test server's DSN with another database.
DSN="${TXMQ_DSN:-$("$BUILD/txmq" --json local status | python3 -c 'import json,sys; print(json.load(sys.stdin)["dsn"])')}"
read -r -a CONNECT < <(python3 - "$DSN" <<'PY'
import sys, urllib.parse as u
d = u.urlsplit(sys.argv[1]); q = dict(u.parse_qsl(d.query))
args = ["--user=" + u.unquote(d.username or "")]
if d.password: args.append("--password=" + u.unquote(d.password))
if "socket" in q: args.append("--socket=" + q["socket"])
else: args += ["--host=" + (d.hostname or "localhost"), "--port=" + str(d.port or 3306)]
print(" ".join(args))
PY
)
APP_DSN="$(sed -E 's#^([a-z]+://[^/]*)/[^?]*#\1/txmq_package#' <<<"$DSN")"
mariadb "${CONNECT[@]}" -e "DROP DATABASE IF EXISTS txmq_package; CREATE DATABASE txmq_package"
trap 'mariadb "${CONNECT[@]}" -e "DROP DATABASE IF EXISTS txmq_package" || true; rm -rf "$SCRATCH"' EXIT
# order_service's own connection (APP_DB_*), to the same database.
APP_ENV=(TXMQ_DSN="$APP_DSN" APP_DB_NAME=txmq_package)
for a in "${CONNECT[@]}"; do
  case "$a" in
    --user=*) APP_ENV+=(APP_DB_USER="${a#--user=}") ;;
    --password=*) APP_ENV+=(APP_DB_PASSWORD="${a#--password=}") ;;
    --socket=*) APP_ENV+=(APP_DB_SOCKET="${a#--socket=}") ;;
    --host=*) APP_ENV+=(APP_DB_HOST="${a#--host=}") ;;
    --port=*) APP_ENV+=(APP_DB_PORT="${a#--port=}") ;;
  esac
done

ORDERS=0
run_examples() {  # run_examples ORDER_SERVICE APPLY_PAYMENTS: what each says it did
  local out
  out="$(env "${APP_ENV[@]}" "$1" 3)" || fail "$1 failed: $out"
  ORDERS=$((ORDERS + 3))
  expect_in "$out" 'placed through a txmq transaction' "$1"
  expect_in "$out" "placed through the application's own connection" "$1"
  expect_in "$out" "^orders topic: $ORDERS ready\$" "$1"
  out="$(env "${APP_ENV[@]}" "$2" --send 50)" || fail "$2 --send failed: $out"
  expect_in "$out" '^sent 50 payments$' "$2 --send"
  out="$(env "${APP_ENV[@]}" "$2")" || fail "$2 failed: $out"
  expect_in "$out" 'applied 50 payments' "$2"
}
linked_to_libtxmq() { readelf -d "$1" | grep -q 'NEEDED.*\[libtxmq\.so\.0\]'; }

step "find_package(txmq): examples/ with txmq::txmq and txmq::txmq_static"
cmake -S "$HERE" -B "$SCRATCH/cmake-app" -DCMAKE_PREFIX_PATH="$PREFIX" \
      -DTXMQ_EXAMPLES_DIR="$ROOT/examples" -DCMAKE_BUILD_TYPE=Release >"$SCRATCH/cmake-app.log" \
  || { cat "$SCRATCH/cmake-app.log" >&2; fail "configuring the find_package project"; }
cmake --build "$SCRATCH/cmake-app" -j"$(nproc)" >>"$SCRATCH/cmake-app.log" \
  || { cat "$SCRATCH/cmake-app.log" >&2; fail "building the find_package project"; }
for e in order_service apply_payments; do
  linked_to_libtxmq "$SCRATCH/cmake-app/${e}_shared" || fail "${e}_shared does not use libtxmq.so.0"
  ! linked_to_libtxmq "$SCRATCH/cmake-app/${e}_static" || fail "${e}_static uses libtxmq.so.0"
done
run_examples "$SCRATCH/cmake-app/order_service_shared" "$SCRATCH/cmake-app/apply_payments_shared"
run_examples "$SCRATCH/cmake-app/order_service_static" "$SCRATCH/cmake-app/apply_payments_static"

step "pkg-config txmq: examples/ with g++, shared and static"
export PKG_CONFIG_PATH="$LIBDIR/pkgconfig"
expect_in "$(pkg-config --modversion txmq)" "^$VERSION\$" "pkg-config --modversion"
expect_in "$(pkg-config --static --libs txmq)" '-lmariadb.*-lfmt|-lfmt.*-lmariadb' "pkg-config --static --libs"
P="$SCRATCH/pc-app"
mkdir -p "$P"
for e in order_service apply_payments; do
  # shellcheck disable=SC2046  # pkg-config's flags are words
  g++ -std=c++20 -O1 -c "$ROOT/examples/$e.cc" -o "$P/$e.o" $(pkg-config --cflags txmq libmariadb)
  # shellcheck disable=SC2046
  g++ "$P/$e.o" -o "$P/${e}_shared" -Wl,-rpath,"$LIBDIR" $(pkg-config --libs txmq libmariadb)
  # Static: libtxmq.a first; then --static's list gives what it needs (Connector/C, fmt), and
  # --as-needed drops the -ltxmq (libtxmq.so) it also names, now unused.
  # shellcheck disable=SC2046
  g++ "$P/$e.o" -o "$P/${e}_static" -Wl,--as-needed "$LIBDIR/libtxmq.a" \
      $(pkg-config --static --libs txmq libmariadb)
  linked_to_libtxmq "$P/${e}_shared" || fail "pkg-config ${e}_shared does not use libtxmq.so.0"
  ! linked_to_libtxmq "$P/${e}_static" || fail "pkg-config ${e}_static uses libtxmq.so.0"
done
run_examples "$P/order_service_shared" "$P/apply_payments_shared"
run_examples "$P/order_service_static" "$P/apply_payments_static"

step "cpack -G DEB"
(cd "$BUILD" && cpack -G DEB -B "$SCRATCH/deb" >"$SCRATCH/cpack.log") \
  || { cat "$SCRATCH/cpack.log" >&2; fail "cpack"; }
DEB="$(ls "$SCRATCH"/deb/txmq_*.deb)"
CONTENTS="$(dpkg-deb -c "$DEB")"
for f in ./usr/bin/txmq ./usr/bin/txmq-bench ./usr/include/txmq/client.h ./usr/share/man/man1/txmq.1.gz \
         ./usr/share/bash-completion/completions/txmq ./usr/share/doc/txmq/copyright \
         ./usr/share/doc/txmq/changelog.gz ./lib/systemd/system/txmq-serve.service \
         ./etc/txmq/serve.conf ./etc/txmq/txmq.env \
         "./usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/"{libtxmq.a,libtxmq.so.$VERSION,pkgconfig/txmq.pc,cmake/txmq/txmqConfig.cmake}; do
  expect_in "$CONTENTS" " ${f//./\\.}( |\$)" "the package's files"
done
expect_in "$CONTENTS" ' \./usr/lib/[^ ]*/libtxmq\.so -> libtxmq\.so\.0$' "the package's files"
expect_in "$CONTENTS" " \./usr/lib/[^ ]*/libtxmq\.so\.0 -> libtxmq\.so\.$VERSION\$" "the package's files"
expect_in "$CONTENTS" '^-rw------- root/root .* \./etc/txmq/txmq\.env$' "txmq.env's mode"
CONTROL="$(dpkg-deb -I "$DEB")"
expect_in "$CONTROL" '^ Depends:.*adduser' "Depends"
expect_in "$CONTROL" '^ Depends:.*libmariadb3' "Depends (dpkg-shlibdeps)"
CONTROL_FILES="$(dpkg-deb --ctrl-tarfile "$DEB" | tar -t)"
for f in conffiles postinst postrm triggers shlibs md5sums; do
  expect_in "$CONTROL_FILES" "^\\./$f\$" "control files"
done
expect_in "$(dpkg-deb -f "$DEB" Package Version)" "^Version: $VERSION\$" "the package's version"
dpkg-deb --ctrl-tarfile "$DEB" | tar -xO ./conffiles | diff - "$ROOT/packaging/conffiles" \
  || fail "conffiles"
expect_in "$(dpkg-deb --fsys-tarfile "$DEB" | tar -xO ./lib/systemd/system/txmq-serve.service)" \
  '^ExecStart=/usr/bin/txmq serve --config /etc/txmq/serve.conf$' "the unit in the package"

step "lintian"
# Errors fail the test; warnings are printed (docs/install.md says which are expected).
lintian --fail-on error --tag-display-limit 0 "$DEB" | tee "$SCRATCH/lintian.log" || {
  fail "lintian reports errors"
}
step "done"
