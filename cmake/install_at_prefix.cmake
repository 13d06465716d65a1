# Run by cmake --install (cmake/install.cmake sets the TXMQ_* variables): the files that depend
# on the install prefix. file(INSTALL) adds $DESTDIR itself.
string(REGEX REPLACE "/+$" "" prefix "${CMAKE_INSTALL_PREFIX}")
if(prefix STREQUAL "/usr")
  set(sysconfdir /etc)
  set(unitdir /lib/systemd/system)  # Debian 12: units stay in /lib until the /usr merge is done
else()
  set(sysconfdir ${prefix}/etc)
  set(unitdir ${prefix}/lib/systemd/system)
endif()
set(bindir ${prefix}/${TXMQ_BINDIR})
set(libdir ${prefix}/${TXMQ_LIBDIR})
set(includedir ${prefix}/${TXMQ_INCLUDEDIR})
set(out ${TXMQ_BINARY_DIR}/install/at-prefix)

configure_file(${TXMQ_SOURCE_DIR}/cmake/txmq.pc.in ${out}/txmq.pc @ONLY)
file(INSTALL DESTINATION ${libdir}/pkgconfig TYPE FILE FILES ${out}/txmq.pc)

configure_file(${TXMQ_SOURCE_DIR}/packaging/txmq-serve.service.in ${out}/txmq-serve.service @ONLY)
file(INSTALL DESTINATION ${unitdir} TYPE FILE FILES ${out}/txmq-serve.service)

# The configuration: never over an administrator's own (the package's conffiles are dpkg's
# business; this is for installs without a package). txmq.env holds a password: owner only.
configure_file(${TXMQ_SOURCE_DIR}/packaging/serve.conf.in ${out}/serve.conf @ONLY)
if(NOT EXISTS "$ENV{DESTDIR}${sysconfdir}/txmq/serve.conf")
  file(INSTALL DESTINATION ${sysconfdir}/txmq TYPE FILE FILES ${out}/serve.conf)
endif()
if(NOT EXISTS "$ENV{DESTDIR}${sysconfdir}/txmq/txmq.env")
  file(INSTALL DESTINATION ${sysconfdir}/txmq TYPE FILE
       PERMISSIONS OWNER_READ OWNER_WRITE FILES ${TXMQ_SOURCE_DIR}/packaging/txmq.env)
endif()

# cmake --install --strip and cpack strip the command and libtxmq.so but leave libtxmq.a's
# debug information (47 MB of its 50) and compiler notes: strip those too (as dh_strip does),
# keeping its symbols.
if(CMAKE_INSTALL_DO_STRIP AND TXMQ_STRIP)
  execute_process(COMMAND ${TXMQ_STRIP} --strip-debug --remove-section=.comment
                          "$ENV{DESTDIR}${libdir}/libtxmq.a"
                  COMMAND_ERROR_IS_FATAL ANY)
endif()
