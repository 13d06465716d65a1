# cmake --install: the command, the library (shared and static), the public headers, a CMake
# package (find_package(txmq) -> txmq::txmq, txmq::txmq_static), txmq.pc, the man page, bash
# completion, the systemd unit of txmq serve with its files in /etc. cmake/package.cmake makes
# a Debian package of the same files (cpack -G DEB). Checked by tests/package/run.sh.
# Not in sanitizer and fuzzer builds, which have no shared library.
if(NOT TXMQ_SANITIZE STREQUAL "")
  return()
endif()

# Debian's multiarch library folder (lib/x86_64-linux-gnu) also under /usr/local and other
# prefixes: ld.so, pkg-config and find_package search it there too, and the package needs it.
if(NOT DEFINED CMAKE_INSTALL_LIBDIR AND CMAKE_LIBRARY_ARCHITECTURE AND EXISTS /etc/debian_version)
  set(CMAKE_INSTALL_LIBDIR "lib/${CMAKE_LIBRARY_ARCHITECTURE}" CACHE PATH "Object code libraries")
endif()
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
set(TXMQ_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/txmq)

install(TARGETS txmq_cli txmq_bench_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS txmq_shared EXPORT txmqTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_COMPONENT Unspecified)
install(TARGETS txmq EXPORT txmqStaticTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY include/txmq DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")

# Two export sets, so that a shared-library user needs neither Connector/C's nor fmt's
# development files: txmqConfig.cmake loads the static one only when those are found.
install(EXPORT txmqTargets NAMESPACE txmq:: DESTINATION ${TXMQ_CMAKE_DIR})
install(EXPORT txmqStaticTargets NAMESPACE txmq:: DESTINATION ${TXMQ_CMAKE_DIR})
configure_package_config_file(cmake/txmqConfig.cmake.in
  ${PROJECT_BINARY_DIR}/install/txmqConfig.cmake INSTALL_DESTINATION ${TXMQ_CMAKE_DIR})
# 0.x: a new minor version may change the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/install/txmqConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/install/txmqConfig.cmake
              ${PROJECT_BINARY_DIR}/install/txmqConfigVersion.cmake
        DESTINATION ${TXMQ_CMAKE_DIR})

# The man page and the changelog, compressed as Debian wants them (gzip -9n: no name, no time).
set(TXMQ_GZIPPED)
foreach(file txmq.1 changelog)
  add_custom_command(OUTPUT ${PROJECT_BINARY_DIR}/install/${file}.gz
    COMMAND gzip -9n -c ${PROJECT_SOURCE_DIR}/packaging/${file} > ${PROJECT_BINARY_DIR}/install/${file}.gz
    DEPENDS ${PROJECT_SOURCE_DIR}/packaging/${file} VERBATIM)
  list(APPEND TXMQ_GZIPPED ${PROJECT_BINARY_DIR}/install/${file}.gz)
endforeach()
add_custom_target(txmq_docs ALL DEPENDS ${TXMQ_GZIPPED})
install(FILES ${PROJECT_BINARY_DIR}/install/txmq.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${PROJECT_BINARY_DIR}/install/changelog.gz packaging/copyright
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES packaging/lintian-overrides DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides
        RENAME txmq)
install(FILES packaging/txmq.bash-completion DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
        RENAME txmq)

# Files whose contents or place depend on the prefix given at install time (cmake --install
# --prefix P, or /usr for the package): txmq.pc (its prefix), and the systemd unit with
# serve.conf and txmq.env (/lib/systemd/system and /etc/txmq for /usr; P/lib/systemd/system and
# P/etc/txmq otherwise, with the unit's paths to match).
install(CODE "
  set(TXMQ_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
  set(TXMQ_BINARY_DIR \"${PROJECT_BINARY_DIR}\")
  set(TXMQ_VERSION \"${PROJECT_VERSION}\")
  set(TXMQ_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
  set(TXMQ_INCLUDEDIR \"${CMAKE_INSTALL_INCLUDEDIR}\")
  set(TXMQ_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
  set(TXMQ_STRIP \"${CMAKE_STRIP}\")")
install(SCRIPT cmake/install_at_prefix.cmake)  # also strips libtxmq.a (--strip, cpack)

include(cmake/package.cmake)
