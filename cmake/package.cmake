# cpack -G DEB (in the build folder): txmq_VERSION_ARCH.deb with everything cmake/install.cmake
# installs, under /usr, the unit in /lib/systemd/system and the configuration in /etc/txmq.
# One package, not Debian's libtxmq0 / libtxmq-dev / txmq split: lintian's warnings about that
# are expected (see docs/install.md).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME txmq)
set(CPACK_PACKAGE_VENDOR "txmq maintainers")
set(CPACK_RESOURCE_FILE_LICENSE "${PROJECT_SOURCE_DIR}/LICENSE")  # Apache License 2.0
set(CPACK_PACKAGE_CONTACT "txmq maintainers <maintainers@users.noreply.a-seed-6a05e169.example>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "durable, transactional message queue in MariaDB/MySQL")
set(CPACK_PACKAGE_DESCRIPTION "\
txmq keeps message queues in MariaDB or MySQL tables: batches commit all or
nothing, consumers lease messages in short transactions, expired leases are
reclaimed, and messages that fail too often are dead-lettered. Messages can be
sent in the same transaction as the application's own rows.
.
This package has the txmq command, txmq serve (the Amazon SQS API over HTTP,
with its systemd service txmq-serve), and the C++20 library libtxmq (shared
and static) with its headers, CMake package and pkg-config file.")
# DESTDIR staging with the real prefix /usr, so that cmake/install_at_prefix.cmake sees /usr
# and puts the unit in /lib/systemd/system and the configuration in /etc/txmq.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS
    OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Runtime dependencies from the binaries (dpkg-shlibdeps); adduser for the postinst.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS adduser)
# libtxmq.a's and the headers' users also need these development files.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libmariadb-dev, libfmt-dev, pkg-config, mariadb-server")
# A shlibs file for libtxmq.so.0.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
# Our own postinst and postrm replace the ones CPack writes to call ldconfig: the trigger does.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/packaging/postinst ${PROJECT_SOURCE_DIR}/packaging/postrm
    ${PROJECT_SOURCE_DIR}/packaging/triggers ${PROJECT_SOURCE_DIR}/packaging/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
