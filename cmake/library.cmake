# The library, twice from one set of objects (txmq_objects and txmq_util's, position-independent,
# compiled once):
#   txmq         static, what the build's own programs link (the command, txmq serve, the bench,
#                the tests, the examples), so that they run from the build tree and from any
#                install prefix without an RPATH. In-tree alias txmq::txmq.
#   txmq_shared  shared, libtxmq.so.0 -> libtxmq.so.0.1.0, for applications once installed.
# Installed (cmake/install.cmake), the package's txmq::txmq is the shared library and
# txmq::txmq_static the static one. Sanitizer and fuzzer builds make only the static library.
set_target_properties(txmq_objects PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_compile_features(txmq_objects PUBLIC cxx_std_20)
target_include_directories(txmq_objects
  PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(txmq_objects PRIVATE PkgConfig::MARIADB fmt::fmt txmq_util PUBLIC Threads::Threads)
target_compile_options(txmq_objects PRIVATE ${TXMQ_WARNINGS})

# Usage requirements each library gives its users: the headers, C++20, threads; Connector/C and
# fmt stay private (a static library's users link them too: $<LINK_ONLY:...>).
function(txmq_library_usage target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>)
  target_link_libraries(${target} PUBLIC Threads::Threads)
endfunction()

add_library(txmq STATIC $<TARGET_OBJECTS:txmq_objects> $<TARGET_OBJECTS:txmq_util>)
add_library(txmq::txmq ALIAS txmq)
txmq_library_usage(txmq)
# Installed, Connector/C is the target the package config makes (PkgConfig::txmq_mariadb),
# so that its name cannot clash with a MARIADB prefix of the caller's own pkg_check_modules.
target_link_libraries(txmq PRIVATE $<BUILD_INTERFACE:PkgConfig::MARIADB> fmt::fmt
                      INTERFACE $<INSTALL_INTERFACE:$<LINK_ONLY:PkgConfig::txmq_mariadb>>)
set_target_properties(txmq PROPERTIES EXPORT_NAME txmq_static)

if(TXMQ_SANITIZE STREQUAL "")
  add_library(txmq_shared SHARED $<TARGET_OBJECTS:txmq_objects> $<TARGET_OBJECTS:txmq_util>)
  txmq_library_usage(txmq_shared)
  target_link_libraries(txmq_shared PRIVATE PkgConfig::MARIADB fmt::fmt)
  # -z defs: a symbol missing from the link list fails the build, not the application's link.
  target_link_options(txmq_shared PRIVATE LINKER:-z,defs)
  set_target_properties(txmq_shared PROPERTIES
    OUTPUT_NAME txmq
    VERSION ${PROJECT_VERSION}
    SOVERSION ${PROJECT_VERSION_MAJOR}
    EXPORT_NAME txmq)
endif()
