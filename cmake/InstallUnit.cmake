# Runs at install time (install(SCRIPT) in cmake/Install.cmake): installs
# the systemd unit with its ExecStart rewritten to the daemon's place under
# the prefix of this install, which only install time knows: /usr/sbin for
# the package (cpack installs with the prefix /usr under DESTDIR),
# /usr/local/sbin for a plain `cmake --install`, PREFIX/sbin for
# `--prefix PREFIX`. Set by install(CODE) before this runs:
#   RBLN_UNIT_SOURCE  deploy/rbln-artifactd.service (ExecStart=/usr/sbin/...)
#   RBLN_UNIT_STAGED  where the rewritten unit is written first
#   RBLN_UNIT_DIR     where it goes (relative: under the prefix)
#   RBLN_SBIN_DIR     where the daemon went (relative: under the prefix)
foreach(dir IN ITEMS RBLN_UNIT_DIR RBLN_SBIN_DIR)
  if(NOT IS_ABSOLUTE "${${dir}}")
    set(${dir} "${CMAKE_INSTALL_PREFIX}/${${dir}}")
  endif()
endforeach()
file(READ "${RBLN_UNIT_SOURCE}" unit)
set(packaged "\nExecStart=/usr/sbin/rbln-artifactd ")
string(FIND "${unit}" "${packaged}" found)
if(found EQUAL -1)
  message(FATAL_ERROR "${RBLN_UNIT_SOURCE} has no line "
                      "'ExecStart=/usr/sbin/rbln-artifactd ' to rewrite")
endif()
string(REPLACE "${packaged}" "\nExecStart=${RBLN_SBIN_DIR}/rbln-artifactd "
               rewritten "${unit}")
file(WRITE "${RBLN_UNIT_STAGED}" "${rewritten}")
file(INSTALL DESTINATION "${RBLN_UNIT_DIR}" TYPE FILE
     PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
     FILES "${RBLN_UNIT_STAGED}")
