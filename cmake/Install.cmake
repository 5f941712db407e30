# What `cmake --install` puts where (GNUInstallDirs, under
# CMAKE_INSTALL_PREFIX: /usr/local by default, /usr in the package), the man
# pages generated from --help, and the Debian package (`cpack -G DEB`).
#
#   sbin/rbln-artifactd                     the daemon (run by systemd or root)
#   bin/rbln-artifact, bin/rbln-artifact-synth
#   lib/systemd/system/rbln-artifactd.service  (ExecStart names sbin/ above)
#   lib/sysusers.d/rbln-artifactd.conf      the service user, for systemd-sysusers
#   share/rbln-artifactd/proto/...          the API's .proto files
#   share/doc/rbln-artifactd/               README.md and docs/
#   share/man/man8/rbln-artifactd.8.gz, share/man/man1/rbln-artifact*.1.gz
#   libexec/rbln-artifactd/rbln_codec_rebel.py  the rebel adapter, a codec
#                                           for --codec-command
include(GNUInstallDirs)

# An install never stops half way: what the build did not make (a build of
# some targets only) is skipped (OPTIONAL), and said at the end of this file.
# `cmake --build build` and deploy/demo.sh make everything installed.
install(TARGETS rbln-artifactd DESTINATION ${CMAKE_INSTALL_SBINDIR} OPTIONAL)
install(TARGETS rbln-artifact rbln-artifact-synth
        DESTINATION ${CMAKE_INSTALL_BINDIR} OPTIONAL)
# The external codec over rebel-compiler (docs/codec-protocol.md): a Python
# program the daemon runs, not a command for users, so under libexec.
install(PROGRAMS ${PROJECT_SOURCE_DIR}/codecs/rebel/rbln_codec_rebel.py
        DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/rbln-artifactd)
set(RBLN_SYSTEMD_UNIT_DIR lib/systemd/system
    CACHE STRING "Where the systemd unit is installed (under the prefix)")
# The unit names the daemon by the install-time prefix: /usr/sbin in the
# package (cpack installs with the prefix /usr under DESTDIR), /usr/local/sbin
# for a plain `cmake --install`, PREFIX/sbin for `--prefix PREFIX`. So its
# ExecStart is rewritten when installing, not when configuring. A relative
# RBLN_SYSTEMD_UNIT_DIR is under the prefix.
# cmake/InstallUnit.cmake does it, with these settings of the build.
install(CODE "set(RBLN_UNIT_SOURCE [[${PROJECT_SOURCE_DIR}/deploy/rbln-artifactd.service]])
set(RBLN_UNIT_STAGED [[${CMAKE_BINARY_DIR}/install/rbln-artifactd.service]])
set(RBLN_UNIT_DIR [[${RBLN_SYSTEMD_UNIT_DIR}]])
set(RBLN_SBIN_DIR [[${CMAKE_INSTALL_SBINDIR}]])")
install(SCRIPT ${PROJECT_SOURCE_DIR}/cmake/InstallUnit.cmake)
# The service user, for systemd-sysusers (the package's postinst uses
# adduser instead): docs/installing.md.
install(FILES ${PROJECT_SOURCE_DIR}/deploy/rbln-artifactd.sysusers
        DESTINATION lib/sysusers.d RENAME rbln-artifactd.conf)
# The contract for clients in any language (reply_metadata.h is part of it).
# The example config; the package's postinst copies it to
# /etc/rbln-artifactd/rbln-artifactd.conf (the unit's --config) when there is
# none, so that an operator's edits survive upgrades.
install(FILES ${PROJECT_SOURCE_DIR}/deploy/rbln-artifactd.conf
        DESTINATION ${CMAKE_INSTALL_DATADIR}/rbln-artifactd)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/proto/
        DESTINATION ${CMAKE_INSTALL_DATADIR}/rbln-artifactd/proto
        FILES_MATCHING PATTERN "*.proto" PATTERN "*.h")
set(RBLN_DOC_DIR ${CMAKE_INSTALL_DATAROOTDIR}/doc/rbln-artifactd)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${RBLN_DOC_DIR})
# README.md links docs/NAME.md: the same layout keeps the links working.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${RBLN_DOC_DIR}/docs
        FILES_MATCHING PATTERN "*.md")

# Man pages, written by help2man from each program's --help and the include
# file man/PROGRAM.h2m, which adds the sections the help has not (EXIT
# STATUS, ENVIRONMENT, FILES, EXAMPLES, SEE ALSO) and replaces what the help
# prints after its options, then put in the order NAME, SYNOPSIS,
# DESCRIPTION, OPTIONS, EXAMPLES, ENVIRONMENT, FILES, EXIT STATUS, SEE ALSO
# (cmake/order_man_sections.pl) (Debian's help2man; a build without it builds
# everything else). The environment that changes the help's defaults is
# cleared, so that the pages show the built-in defaults (those of the user
# who builds: root's in CI and the package). tests/man_pages_test.py renders
# and checks them. Sanitizer and fuzzing builds are never installed, and make
# none.
find_program(HELP2MAN help2man)
find_program(GZIP gzip)
if(RBLN_SANITIZE OR RBLN_FUZZ)
  set(RBLN_HAVE_MAN_PAGES OFF)
elseif(HELP2MAN AND GZIP)
  set(RBLN_MAN_DIR ${CMAKE_BINARY_DIR}/man)
  set(RBLN_MAN_PAGES "")
  foreach(page IN ITEMS "rbln-artifactd;8;serve and resize the KV cache of compiled NPU artifacts"
                        "rbln-artifact;1;read and change the KV cache size of compiled NPU artifacts"
                        "rbln-artifact-synth;1;write a synthetic compiled NPU artifact")
    list(GET page 0 program)
    list(GET page 1 section)
    list(GET page 2 summary)
    set(out ${RBLN_MAN_DIR}/${program}.${section}.gz)
    set(include ${PROJECT_SOURCE_DIR}/man/${program}.h2m)
    add_custom_command(
      OUTPUT ${out}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${RBLN_MAN_DIR}
      COMMAND ${CMAKE_COMMAND} -E env --unset=RBLN_ARTIFACTD_SOCKET
              --unset=RBLN_ARTIFACTD_ADDRESS --unset=RBLN_ARTIFACTD_STORE
              ${HELP2MAN} --no-info --section=${section}
              --version-string=${PROJECT_VERSION} --name=${summary}
              --include=${include}
              --output=${RBLN_MAN_DIR}/${program}.${section}
              $<TARGET_FILE:${program}>
      COMMAND perl ${PROJECT_SOURCE_DIR}/cmake/order_man_sections.pl
              ${RBLN_MAN_DIR}/${program}.${section} NAME SYNOPSIS DESCRIPTION
              OPTIONS EXAMPLES ENVIRONMENT FILES "EXIT STATUS" "SEE ALSO"
      # -n: no name or time stamp in the .gz, so equal pages are equal files.
      COMMAND ${GZIP} -9nf ${RBLN_MAN_DIR}/${program}.${section}
      DEPENDS ${program} ${include}
              ${PROJECT_SOURCE_DIR}/cmake/order_man_sections.pl
      COMMENT "Writing the man page ${program}(${section}) with help2man"
      VERBATIM)
    list(APPEND RBLN_MAN_PAGES ${out})
    install(FILES ${out} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section}
            OPTIONAL)
  endforeach()
  add_custom_target(rbln_man_pages ALL DEPENDS ${RBLN_MAN_PAGES})
  list(JOIN RBLN_MAN_PAGES "\" \"" RBLN_MAN_PAGES_QUOTED)
  set(RBLN_HAVE_MAN_PAGES ON)
else()
  message(STATUS "help2man not found: no man pages are built or installed "
                 "(apt-get install help2man, as deploy/install-deps.sh does)")
  set(RBLN_HAVE_MAN_PAGES OFF)
endif()

# Says what the OPTIONAL installs above skipped because it was not built.
install(CODE "
  foreach(built IN ITEMS \"$<TARGET_FILE:rbln-artifactd>\"
                         \"$<TARGET_FILE:rbln-artifact>\"
                         \"$<TARGET_FILE:rbln-artifact-synth>\"
                         \"${RBLN_MAN_PAGES_QUOTED}\")
    if(built AND NOT EXISTS \"\${built}\")
      message(STATUS \"Skipped \${built}: not built (cmake --build the build \"
                     \"directory to build everything, then install again)\")
    endif()
  endforeach()")

# The Debian package: `cpack -G DEB` in the build directory, after a build.
# Its Depends are the Debian runtime packages of the linked libraries, found
# by dpkg-shlibdeps, plus adduser for the maintainer scripts
# (deploy/debian/): postinst creates the rbln-artifactd system user and
# group and starts or enables nothing.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME rbln-artifactd)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "resize the KV cache of compiled NPU model artifacts without recompiling")
string(CONCAT CPACK_PACKAGE_DESCRIPTION
    "rbln-artifactd, a gRPC daemon, owns a store of compiled NPU model "
    "artifacts and reads and changes their KV-cache size (kvcache_num_blocks): "
    "to an explicit block count or to the largest that fits a memory budget, "
    "atomically. rbln-artifact is its command-line client, with the flags of "
    "optimum-rbln-cli; rbln-artifact-synth writes synthetic artifacts.")
set(RBLN_PACKAGE_MAINTAINER "rbln-artifactd maintainers"
    CACHE STRING "The Maintainer field of the Debian package")
set(CPACK_PACKAGE_CONTACT ${RBLN_PACKAGE_MAINTAINER})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS adduser)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/deploy/debian/postinst
    ${PROJECT_SOURCE_DIR}/deploy/debian/prerm
    ${PROJECT_SOURCE_DIR}/deploy/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
