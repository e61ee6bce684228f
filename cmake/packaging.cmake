# `cmake --install` and the Debian package (CPack; launch/package, docs/install.md).
# Installs: bin/vidline, lib/systemd/system/vidline-node@.service (ExecStart pointed at
# this prefix's binary), share/doc/vidline (README, docs, the protocol) and
# share/doc/vidline/examples (the example configs).
include(GNUInstallDirs)
# Installing and packaging take what is built, they do not build: the packaging test runs
# cpack on the build tree without rebuilding the tests (launch/package builds first).
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY TRUE)

install(TARGETS vidline RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The unit names /usr/bin/vidline; the prefix is known only at install time (CPack
# installs under /usr, a plain `cmake --install` under CMAKE_INSTALL_PREFIX).
set(_unit_src ${CMAKE_CURRENT_SOURCE_DIR}/launch/vidline-node@.service)
set(_unit_out ${CMAKE_BINARY_DIR}/install/vidline-node@.service)
install(CODE "
  file(READ \"${_unit_src}\" _unit)
  string(REPLACE \"ExecStart=/usr/bin/vidline \"
                 \"ExecStart=\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/vidline \"
                 _unit \"\${_unit}\")
  file(WRITE \"${_unit_out}\" \"\${_unit}\")
  file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\" TYPE FILE
       FILES \"${_unit_out}\")
")

file(GLOB _docs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/docs/*.md)
install(FILES README.md messages/PROTOCOL.md ${_docs} DESTINATION ${CMAKE_INSTALL_DOCDIR})
file(GLOB _examples CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/config/examples/*.json)
install(FILES ${_examples} DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME vidline)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "video diffusion production line over mismatched GPUs on a LAN")
string(CONCAT CPACK_PACKAGE_DESCRIPTION
    "vidline runs text-to-video batches over the GPUs of several hosts: one node per host, "
    "a coordinator that journals every job, sim, exec and ComfyUI backends. The package "
    "installs the binary, the systemd unit vidline-node@.service (run as the system user "
    "vidline), the documentation and example configs.")
set(CPACK_PACKAGE_CONTACT "vidline maintainers <vidline@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/package)
set(CPACK_STRIP_FILES ON)  # the debug info stays in the build tree
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # vidline_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Runtime libraries from dpkg-shlibdeps on the binary; adduser for the postinst.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "systemd")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_CURRENT_SOURCE_DIR}/launch/debian/postinst
    ${CMAKE_CURRENT_SOURCE_DIR}/launch/debian/prerm
    ${CMAKE_CURRENT_SOURCE_DIR}/launch/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
include(CPack)
